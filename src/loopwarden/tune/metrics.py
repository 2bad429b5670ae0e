"""Per-config figures of a tune run, merged run by run in constant memory.

Each :class:`~loopwarden.tune._replay.RunRow` is folded into the per-config
:class:`ConfigStats` and the config-independent :class:`Corpus` as it arrives
from a worker; nothing per run is kept except a few example run ids.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ._labels import label_word
from ._replay import BLOCKED, STOPPED, WARNED, RunRow

__all__ = ["ConfigStats", "Corpus", "LabelBook", "Tally", "load_labels"]

MAX_EXAMPLES = 20


@dataclass
class ConfigStats:
    """What one config of the grid would have done across all runs."""

    runs_warned: int = 0
    """Runs whose worst outcome was a warning."""
    runs_blocked: int = 0
    """Runs with a block but no stop."""
    runs_stopped: int = 0
    """Runs the guard would have ended (circuit breaker or post-compaction abort)."""
    calls_prevented: int = 0
    prevented_tokens: int = 0
    saved_tokens: int = 0
    prevented_without_usage: int = 0
    """Prevented calls in runs whose trace records no token usage."""
    loops_caught: int = 0
    first_alarm: Counter[int] = field(default_factory=Counter)
    """First-alarm position inside each caught loop (1 = the loop's first call) -> loops."""
    blocked_outside_loops: int = 0
    """Runs blocked or stopped without any loop (a likely false block when labels are missing)."""
    false_blocks: int = 0
    false_warnings: int = 0
    bad_caught: int = 0
    """Runs labelled bad that got any alarm."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """A few run ids per finding: ``false_block``, ``false_warning``, ``blocked_outside_loops``."""

    def _example(self, kind: str, run: str) -> None:
        found = self.examples.setdefault(kind, [])
        if len(found) < MAX_EXAMPLES:
            found.append(run)

    def median_first_alarm(self) -> float | None:
        """Median first-alarm position over the caught loops."""
        counts = self.first_alarm
        total = sum(counts.values())
        if not total:
            return None

        def nth(k: int) -> int:
            seen = 0
            for position in sorted(counts):
                seen += counts[position]
                if seen > k:
                    return position
            return max(counts)

        if total % 2:
            return float(nth(total // 2))
        return (nth(total // 2 - 1) + nth(total // 2)) / 2


@dataclass
class Corpus:
    """Config-independent figures of the replayed runs."""

    runs: int = 0
    calls: int = 0
    loops: int = 0
    runs_with_loops: int = 0
    runs_with_usage: int = 0
    tokens: int = 0
    good: int = 0
    bad: int = 0
    unlabelled: int = 0


class LabelBook:
    """Outcome labels by run id (or session id), from ``--labels FILE``."""

    def __init__(self, labels: Mapping[str, Any] | None = None) -> None:
        self.labels: dict[str, str] = {}
        for run, value in (labels or {}).items():
            word = label_word(value)
            if word is not None:
                self.labels[str(run)] = word
        self.used = 0

    def __bool__(self) -> bool:
        return bool(self.labels)

    def label(self, row: RunRow) -> str | None:
        found = self.labels.get(row.run)
        if found is None and row.session is not None:
            found = self.labels.get(row.session)
        if found is not None:
            self.used += 1
            return found
        return label_word(row.label) if row.label is not None else None


def load_labels(path: str) -> dict[str, str]:
    """Run id -> ``good``/``bad`` from JSONL, a JSON object or list, or CSV/TSV (two columns).

    JSONL lines and list items are objects with a run id (``run``, ``run_id``,
    ``id``, ``session``) and a ``label`` (``good``/``bad`` or a synonym such as
    ``healthy``/``stuck``, or ``true``/``false``); labels that are neither are
    left out. Raises ``ValueError`` with ``file:line`` for an unreadable entry.
    """
    data = Path(path).read_bytes()
    if path.endswith(".gz"):
        import gzip

        data = gzip.decompress(data)
    text = data.decode("utf-8-sig")
    out: dict[str, str] = {}
    entries: list[tuple[int, Any]] = []
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and _entry_id(doc) is None:
        for run, value in doc.items():  # {"run id": "good", ...}
            _keep(out, str(run), value)
        return out
    if isinstance(doc, list):
        entries = list(enumerate(doc, 1))
    elif isinstance(doc, dict) or text.lstrip().startswith("{"):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append((number, orjson.loads(line)))
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not valid JSON ({exc})") from None
    else:
        return _table(path, text)
    for number, entry in entries:
        run = _entry_id(entry) if isinstance(entry, dict) else None
        if run is None:
            raise ValueError(f"{path}:{number}: expected an object with a run id and a label")
        _keep(out, run, entry.get("label", entry.get("outcome")))
    return out


def _table(path: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    dialect = "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"
    for number, row in enumerate(csv.reader(io.StringIO(text), dialect=dialect), 1):
        if not row or not row[0].strip():
            continue
        if len(row) < 2:
            raise ValueError(f"{path}:{number}: expected two columns: run id, label")
        if number == 1 and row[1].strip().lower() in ("label", "outcome"):
            continue  # a header
        _keep(out, row[0].strip(), row[1])
    return out


def _entry_id(entry: Mapping[str, Any]) -> str | None:
    for key in ("run", "run_id", "id", "session", "session_id"):
        value = entry.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    return None


def _keep(out: dict[str, str], run: str, value: Any) -> None:
    word = label_word(value)
    if word is not None:
        out[run] = word


class Tally:
    """Folds run rows into per-config stats and corpus figures."""

    def __init__(self, configs: int, labels: LabelBook | None = None) -> None:
        self.stats = [ConfigStats() for _ in range(configs)]
        self.corpus = Corpus()
        self.labels = labels or LabelBook()
        self.labelled = False
        """Whether any run had a label (from the file or the trace)."""

    def add(self, row: RunRow) -> None:
        corpus = self.corpus
        corpus.runs += 1
        corpus.calls += row.calls
        loops = row.loops
        corpus.loops += len(loops)
        if loops:
            corpus.runs_with_loops += 1
        if row.tokens is not None:
            corpus.runs_with_usage += 1
            corpus.tokens += row.tokens
        label = self.labels.label(row)
        if label == "good":
            corpus.good += 1
            self.labelled = True
        elif label == "bad":
            corpus.bad += 1
            self.labelled = True
        else:
            corpus.unlabelled += 1
        for c, stats in enumerate(self.stats):
            level = row.levels[c]
            if level == WARNED:
                stats.runs_warned += 1
            elif level == BLOCKED:
                stats.runs_blocked += 1
            elif level == STOPPED:
                stats.runs_stopped += 1
            stats.calls_prevented += row.prevented[c]
            if row.tokens is None:
                stats.prevented_without_usage += row.prevented[c]
            else:
                stats.prevented_tokens += row.prevented_tokens[c]
                stats.saved_tokens += row.saved_tokens[c]
            for _, _, firsts in loops:
                first = firsts[c]
                if first is not None:
                    stats.loops_caught += 1
                    stats.first_alarm[first] += 1
            if level >= BLOCKED and not loops:
                stats.blocked_outside_loops += 1
                stats._example("blocked_outside_loops", row.run)
            if label == "good":
                if level >= BLOCKED:
                    stats.false_blocks += 1
                    stats._example("false_block", row.run)
                elif level == WARNED:
                    stats.false_warnings += 1
                    stats._example("false_warning", row.run)
            elif label == "bad" and level >= WARNED:
                stats.bad_caught += 1
