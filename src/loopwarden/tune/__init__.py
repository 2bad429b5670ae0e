"""``loopwarden tune``: which thresholds suit my agents? Answered from recorded runs.

:func:`tune` replays every run of the given shards under every config of a
grid (one pass over the data: all configs side by side), folds the results
into per-config figures (runs warned / blocked / stopped, calls prevented, the
tokens of the turns behind them, first alarm inside each loop, false blocks
and warnings on runs labelled good) and recommends the config that prevents
the most calls with zero false blocks. Reports: :mod:`loopwarden.tune.report`
(text, JSON) and :mod:`loopwarden.tune.html`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..fleet import Shard, ShardResult, run_shards
from ..fleet._engines import Engine
from ..traces import InputInfo
from ..traces._results import merge_input
from ..traces.chat import RangeLabels
from ._job import TuneJob, TunePayload
from ._loops import DEFAULT_MIN_LOOP
from .grid import Candidate, GridError, build_candidates, default_changes, grid_changes, parse_grid
from .metrics import ConfigStats, Corpus, LabelBook, Tally, load_labels

__all__ = [
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


@dataclass
class Recommendation:
    """The config to use, and why."""

    index: int | None
    basis: str
    """``labels``: false blocks on runs labelled good; ``loops``: blocks in runs without a loop."""
    zero_false_blocks: bool
    text: str


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

    def false_alarms(self, index: int) -> int:
        """What the chart plots against calls prevented."""
        stats = self.stats[index]
        if self.labelled:
            return stats.false_blocks + stats.false_warnings
        return stats.blocked_outside_loops


def recommend(
    candidates: Sequence[Candidate], stats: Sequence[ConfigStats], labelled: bool
) -> Recommendation:
    """The config preventing the most calls with zero false blocks (or the fewest, said so)."""
    if not candidates:
        return Recommendation(
            None, "labels" if labelled else "loops", False, "no config to compare"
        )
    basis = "labels" if labelled else "loops"

    def false_blocks(i: int) -> int:
        return stats[i].false_blocks if labelled else stats[i].blocked_outside_loops

    def rank(i: int) -> tuple[int, int, float, int]:
        median = stats[i].median_first_alarm()
        return (
            stats[i].calls_prevented,
            -stats[i].false_warnings,
            -(median if median is not None else float("inf")),
            -i,
        )

    what = (
        "false blocks (runs labelled good that were blocked or stopped)"
        if labelled
        else "blocks in runs without a loop (no labels given: pass --labels for false blocks)"
    )
    clean = [i for i in range(len(candidates)) if false_blocks(i) == 0]
    if clean:
        best = max(clean, key=rank)
        c, s = candidates[best], stats[best]
        text = f"{c.name} ({c.describe()}) prevents {s.calls_prevented} calls with 0 {what}"
        if s.calls_prevented == 0:
            text += "; no config in the grid with 0 of those prevents any call"
        return Recommendation(best, basis, True, text)
    best = min(range(len(candidates)), key=lambda i: (false_blocks(i), tuple(-x for x in rank(i))))
    c, s = candidates[best], stats[best]
    text = (
        f"no config in the grid has 0 {what}; the fewest is {false_blocks(best)}: "
        f"{c.name} ({c.describe()}), preventing {s.calls_prevented} calls"
    )
    return Recommendation(best, basis, False, text)


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
        recommendation=recommend(candidates, tally.stats, tally.labelled),
        min_loop=min_loop,
        inputs=[info.to_dict() for info in inputs],
        problems=problems,
        problem_count=problem_count,
    )
