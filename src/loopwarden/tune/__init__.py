"""``loopwarden tune``: which thresholds suit my agents? Answered from recorded runs.

:func:`tune` replays every run of the given shards under every config of a
grid (one pass over the data: all configs side by side), folds the results
into per-config figures (runs warned / blocked / stopped, calls prevented, the
tokens of the turns behind them, first alarm inside each loop, false blocks
and warnings on runs labelled good) and recommends a config only where it beats
the defaults (``C0``) by a stated margin (:func:`recommend`); otherwise it says
to keep them. Reports: :mod:`loopwarden.tune.report`
(text, JSON) and :mod:`loopwarden.tune.html`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..fleet import Shard, ShardResult, run_shards
from ..fleet._engines import Engine
from ..traces import InputInfo
from ..traces._results import merge_input
from ..traces.chat import RangeLabels
from ._job import TuneJob, TunePayload
from ._loops import DEFAULT_MIN_LOOP
from .grid import Candidate, GridError, build_candidates, default_changes, grid_changes, parse_grid
from .metrics import ConfigStats, Corpus, LabelBook, Tally, load_labels

if TYPE_CHECKING:
    from ..report.rules import RuleView

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_MIN_LOOP",
    "Candidate",
    "ConfigStats",
    "Corpus",
    "GridError",
    "LabelBook",
    "Recommendation",
    "TuneOutcome",
    "build_candidates",
    "default_changes",
    "grid_changes",
    "load_labels",
    "parse_grid",
    "recommend",
    "tune",
]


DEFAULT_MARGIN = 0.10
"""How much more a config must prevent than the defaults to be recommended: this share of
the defaults' prevented calls, and at least one call."""


@dataclass
class Recommendation:
    """The config to use, and why."""

    index: int | None
    """The recommended config; ``None``: keep the defaults (or there is nothing to compare)."""
    basis: str
    """``labels``: false blocks on runs labelled good; ``loops``: blocks in runs without a loop."""
    zero_false_blocks: bool
    """The config to use (the recommended one, or the defaults) has no false block."""
    text: str
    baseline: int | None = None
    """The candidate that stands for the defaults (``C0``), if the grid has it."""
    margin: float = DEFAULT_MARGIN
    needed: int = 0
    """Calls prevented beyond the defaults' that a config needed to be recommended."""


@dataclass
class TuneOutcome:
    """Everything a tune report shows."""

    candidates: list[Candidate]
    stats: list[ConfigStats]
    corpus: Corpus
    labelled: bool
    labels_matched: int
    recommendation: Recommendation
    min_loop: int
    inputs: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    problem_count: int = 0
    agent: str | None = None
    """The agent whose block every run got (``--agent``)."""

    def rules(self, index: int) -> list[RuleView]:
        """The rules in force under one candidate config, as ``config check`` lists them."""
        from ..report.rules import rules_in_force

        return rules_in_force(self.candidates[index].config, self.agent)

    def false_alarms(self, index: int) -> int:
        """What the chart plots against calls prevented."""
        stats = self.stats[index]
        if self.labelled:
            return stats.false_blocks + stats.false_warnings
        return stats.blocked_outside_loops


def recommend(
    candidates: Sequence[Candidate],
    stats: Sequence[ConfigStats],
    labelled: bool,
    *,
    margin: float = DEFAULT_MARGIN,
) -> Recommendation:
    """A config only where it beats the defaults on these runs, else "keep the defaults".

    The defaults are the candidate without changes (``C0``). A config beats them when it
    prevents at least ``margin`` more calls (and at least one more) with no more false
    blocks, or has fewer false blocks and prevents no fewer calls. Among the configs that
    beat them the most calls prevented wins, then fewer false blocks, fewer false
    warnings, the earlier first alarm, the earlier config. Ties with the defaults go to
    the defaults. Without a baseline in the grid (``build_candidates(baseline=False)``),
    the config preventing the most calls with zero false blocks is recommended.
    """
    basis = "labels" if labelled else "loops"
    if not candidates:
        return Recommendation(None, basis, False, "no config to compare", margin=margin)

    def false_blocks(i: int) -> int:
        return stats[i].false_blocks if labelled else stats[i].blocked_outside_loops

    def rank(i: int) -> tuple[int, int, int, float, int]:
        median = stats[i].median_first_alarm()
        return (
            stats[i].calls_prevented,
            -false_blocks(i),
            -stats[i].false_warnings,
            -(median if median is not None else float("inf")),
            -i,
        )

    what = (
        "false blocks (runs labelled good that were blocked or stopped)"
        if labelled
        else "blocks in runs without a loop (no labels given: pass --labels for false blocks)"
    )
    short = "false blocks" if labelled else "blocks in runs without a loop"
    note = "" if labelled else " (no labels given: pass --labels for false blocks)"
    base = next((i for i, c in enumerate(candidates) if not c.changes), None)
    if base is None:
        return _best_of_grid(candidates, stats, basis, what, false_blocks, rank, margin)
    prevented, fb = stats[base].calls_prevented, false_blocks(base)
    needed = max(1, math.ceil(margin * prevented))

    def beats(i: int) -> bool:
        more, fewer = stats[i].calls_prevented - prevented, false_blocks(i) < fb
        return (more >= needed and false_blocks(i) <= fb) or (fewer and more >= 0)

    better = [i for i in range(len(candidates)) if i != base and beats(i)]
    defaults = "the defaults" if candidates[base].config.source is None else "the base config"
    if not better:
        same = all(
            stats[i].calls_prevented == prevented and false_blocks(i) == fb
            for i in range(len(candidates))
        )
        how = (
            f"every config of the grid prevents as many calls, with as many {short}"
            if same
            else f"no config of the grid prevents at least {needed} more calls "
            f"({margin:.0%} of {defaults}' {prevented}, at least 1) without more {short}, "
            f"or has fewer {short} without preventing fewer calls"
        )
        text = (
            f"no difference: keep {defaults} ({candidates[base].name}: {prevented} calls "
            f"prevented, {fb} {short}); {how}{note}"
        )
        return Recommendation(None, basis, fb == 0, text, base, margin, needed)
    best = max(better, key=rank)
    c, s = candidates[best], stats[best]
    text = (
        f"{c.name} ({c.describe()}) prevents {s.calls_prevented} calls with {false_blocks(best)} "
        f"{short}; {defaults} ({candidates[base].name}) prevent {prevented} with {fb} "
        f"(a recommendation needs {needed} more calls prevented, or fewer {short}){note}"
    )
    return Recommendation(best, basis, false_blocks(best) == 0, text, base, margin, needed)


def _best_of_grid(
    candidates: Sequence[Candidate],
    stats: Sequence[ConfigStats],
    basis: str,
    what: str,
    false_blocks: Callable[[int], int],
    rank: Callable[[int], tuple[int, int, int, float, int]],
    margin: float,
) -> Recommendation:
    """No defaults to compare with: the most calls prevented with zero false blocks."""
    clean = [i for i in range(len(candidates)) if false_blocks(i) == 0]
    if clean:
        best = max(clean, key=rank)
        c, s = candidates[best], stats[best]
        text = f"{c.name} ({c.describe()}) prevents {s.calls_prevented} calls with 0 {what}"
        if s.calls_prevented == 0:
            text += "; no config in the grid with 0 of those prevents any call"
        return Recommendation(best, basis, True, text, margin=margin)
    best = min(range(len(candidates)), key=lambda i: (false_blocks(i), tuple(-x for x in rank(i))))
    c, s = candidates[best], stats[best]
    text = (
        f"no config in the grid has 0 {what}; the fewest is {false_blocks(best)}: "
        f"{c.name} ({c.describe()}), preventing {s.calls_prevented} calls"
    )
    return Recommendation(best, basis, False, text, margin=margin)


def tune(
    shards: Sequence[Shard],
    candidates: Sequence[Candidate],
    *,
    labels: LabelBook | None = None,
    label_field: str | None = None,
    agent: str | None = None,
    min_loop: int = DEFAULT_MIN_LOOP,
    workers: int | None = None,
    engine: Engine = "local",
    ray_address: str | None = None,
    on_shard: Callable[[ShardResult[TunePayload]], None] | None = None,
    margin: float = DEFAULT_MARGIN,
) -> TuneOutcome:
    """Replay every shard under every candidate config and compare them.

    ``on_shard`` sees each shard's result as it is merged (progress, problems).
    Results are identical whatever ``workers`` and ``engine`` are.
    """
    job = TuneJob(
        [c.config for c in candidates], agent=agent, min_loop=min_loop, label_field=label_field
    )
    book = labels if labels is not None else LabelBook()
    tally = Tally(len(candidates), book)
    whole = RangeLabels()
    inputs: list[InputInfo] = []
    problems: list[tuple[str, str]] = []
    problem_count = 0
    results = run_shards(job, shards, workers=workers, engine=engine, ray_address=ray_address)
    for result in results:
        part = result.part
        if part is not None:
            whole.next_range(first=part == 0)
        for row in result.payload.rows:
            if part is not None:
                row.run = whole.label(row.key, row.run, row.source)
            tally.add(row)
        merge_input(inputs, result.info, continued=bool(part))
        problem_count += result.problem_count
        room = 1000 - len(problems)
        problems.extend(result.problems[: max(0, room)])
        if on_shard is not None:
            on_shard(result)
    return TuneOutcome(
        candidates=list(candidates),
        stats=tally.stats,
        corpus=tally.corpus,
        labelled=tally.labelled,
        labels_matched=book.used,
        recommendation=recommend(candidates, tally.stats, tally.labelled, margin=margin),
        min_loop=min_loop,
        inputs=[info.to_dict() for info in inputs],
        problems=problems,
        problem_count=problem_count,
        agent=agent,
    )
