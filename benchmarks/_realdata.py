"""Loading the real recorded runs and finding the loops in them (shared by the
efficacy benchmark and the data analysis).

The data lives in ``../shared/realdata`` (see its README); it is never copied
into the package. Loops are found from the call sequence alone, with the
definitions of issue 9: a *visible loop* is >= 10 consecutive calls with
identical (tool, args), or >= 10 calls alternating A,B; a *cycle* is >= 10
calls repeating a cycle of 2 to 5 calls; a *failure streak* is >= 10
consecutive failed calls of one tool with no other call between.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path(
    os.environ.get("LOOPWARDEN_REALDATA", ROOT.parent.parent / "shared" / "realdata")
)
LOOP_MIN = 10


@dataclass
class Call:
    index: int
    tool: str
    args: Any
    result: Any
    error: bool
    key: str = ""
    """(tool, args) as canonical JSON: equal keys are equal calls."""

    def text(self) -> str:
        return self.result if isinstance(self.result, str) else json.dumps(self.result)


@dataclass
class Run:
    source: str
    run: str
    label: str
    calls: list[Call] = field(default_factory=list)
    compactions: set[int] = field(default_factory=set)
    """Call indexes that come right after a context compaction marker."""

    @property
    def name(self) -> str:
        return f"{self.source}/{self.run}"


def find_data(path: str | os.PathLike[str] | None = None) -> Path:
    root = Path(path) if path is not None else DEFAULT_DATA
    if not (root / "dev-calls.jsonl.gz").exists():
        # A worktree sits two levels deeper than the main checkout.
        for parent in ROOT.parents:
            candidate = parent / "shared" / "realdata"
            if (candidate / "dev-calls.jsonl.gz").exists():
                return candidate
        raise SystemExit(f"no real data at {root}: set LOOPWARDEN_REALDATA or pass --data")
    return root


def load_runs(path: str | os.PathLike[str] | None = None, prefix: str = "dev") -> list[Run]:
    """Every run of the set with its calls in order (runs without calls are kept)."""
    root = find_data(path)
    runs: dict[tuple[str, str], Run] = {}
    with gzip.open(root / f"{prefix}-labels.jsonl.gz", "rt") as fh:
        for line in fh:
            d = json.loads(line)
            runs[(d["source"], d["run"])] = Run(d["source"], d["run"], d["label"])
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with gzip.open(root / f"{prefix}-calls.jsonl.gz", "rt") as fh:
        for line in fh:
            d = json.loads(line)
            rows.setdefault((d["source"], d["run"]), []).append(d)
    for key, items in rows.items():
        run = runs.setdefault(key, Run(key[0], key[1], "unknown"))
        items.sort(key=lambda d: d["i"])
        pending_compaction = False
        for d in items:
            if d.get("compaction"):
                pending_compaction = True
                continue
            call = Call(len(run.calls), d["tool"], d["args"], d["result"], bool(d["error"]))
            call.key = json.dumps([call.tool, call.args], sort_keys=True)
            if pending_compaction:
                run.compactions.add(call.index)
                pending_compaction = False
            run.calls.append(call)
    return sorted(runs.values(), key=lambda r: (r.source, r.run))


# -- loops found in the call sequence ------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    kind: str
    """``repeat`` (one call again and again), ``cycle`` (period 2-5) or ``failures``."""
    start: int
    end: int
    """Call indexes [start, end)."""
    period: int = 1
    tool: str = ""

    @property
    def length(self) -> int:
        return self.end - self.start


def repeat_spans(calls: list[Call], minimum: int = LOOP_MIN) -> list[Span]:
    """Runs of >= ``minimum`` consecutive calls with identical (tool, args)."""
    spans = []
    i = 0
    while i < len(calls):
        j = i
        while j + 1 < len(calls) and calls[j + 1].key == calls[i].key:
            j += 1
        if j - i + 1 >= minimum:
            spans.append(Span("repeat", i, j + 1, 1, calls[i].tool))
        i = j + 1
    return spans


def cycle_spans(
    calls: list[Call], minimum: int = LOOP_MIN, periods: range = range(2, 6)
) -> list[Span]:
    """Maximal runs of >= ``minimum`` calls that repeat a cycle of 2-5 calls (not one call)."""
    keys = [c.key for c in calls]
    best: list[Span] = []
    for p in periods:
        run = 0
        for j in range(len(keys) + 1):
            ok = j < len(keys) and j >= p and keys[j] == keys[j - p]
            if ok:
                run += 1
                continue
            length = run + p
            start = j - length
            # Each stretch once, with its smallest period.
            if (
                run > 0
                and length >= minimum
                and len(set(keys[start : start + p])) > 1
                and not any(s.start <= start and j <= s.end for s in best)
            ):
                best.append(Span("cycle", start, j, p, calls[start].tool))
            run = 0
    return sorted(best, key=lambda s: s.start)


def alternation_spans(calls: list[Call], minimum: int = LOOP_MIN) -> list[Span]:
    return list(cycle_spans(calls, minimum, range(2, 3)))


def failure_spans(calls: list[Call], minimum: int = LOOP_MIN) -> list[Span]:
    """Runs of >= ``minimum`` consecutive failed calls of one tool (no other call between)."""
    spans = []
    i = 0
    while i < len(calls):
        if not calls[i].error:
            i += 1
            continue
        j = i
        while j + 1 < len(calls) and calls[j + 1].error and calls[j + 1].tool == calls[i].tool:
            j += 1
        if j - i + 1 >= minimum:
            spans.append(Span("failures", i, j + 1, 1, calls[i].tool))
        i = j + 1
    return spans


def visible_loops(calls: list[Call]) -> list[Span]:
    """Issue 9's "visible loops": >= 10 identical calls in a row, or an A,B alternation >= 10."""
    return sorted(repeat_spans(calls) + alternation_spans(calls), key=lambda s: s.start)


def overlaps(span: Span, others: list[Span]) -> bool:
    return any(o.start < span.end and span.start < o.end for o in others)


def iter_calls(runs: list[Run]) -> Iterator[tuple[Run, Call]]:
    for run in runs:
        for call in run.calls:
            yield run, call
