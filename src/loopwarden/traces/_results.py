"""What replay finds: one :class:`RunReport` per run, and :class:`Totals` over all of them.

Plain data with derived figures; the report writers in :mod:`loopwarden.report`
render them, and :func:`loopwarden.traces.replay.replay_sources` fills them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..events import LoopEvent
from ._sink import Loc

__all__ = [
    "ABORTED",
    "AFTER_STOP",
    "BLOCKED",
    "ERROR",
    "REPEAT",
    "STOPPED",
    "TIMELINE_FLAGS",
    "WARNED",
    "InputInfo",
    "ReplayEvent",
    "RunReport",
    "Totals",
    "merge_input",
]

MAX_PROBLEMS_KEPT = 1000

# Bits of one timeline cell (the low byte); the tool's index in the run sits above.
BLOCKED = 1
WARNED = 2
STOPPED = 4
ABORTED = 8
REPEAT = 16
"""The outcome is identical to the previous outcome of the same call (same args)."""
AFTER_STOP = 32
"""The call came after the run would have been stopped."""
ERROR = 64
TIMELINE_FLAGS = {
    "blocked": BLOCKED,
    "warned": WARNED,
    "stopped": STOPPED,
    "aborted": ABORTED,
    "repeat": REPEAT,
    "after_stop": AFTER_STOP,
    "error": ERROR,
}


class ReplayEvent:
    """A guard decision at one call of a replayed run."""

    __slots__ = (
        "action",
        "call",
        "call_id",
        "count",
        "detector",
        "level",
        "line",
        "message",
        "paired_tool",
        "tool",
    )

    def __init__(self, event: LoopEvent, call: int, line: Loc) -> None:
        self.call = call
        self.line = line
        self.call_id = event.call_id
        self.action = event.action
        self.level = event.level
        self.tool = event.tool
        self.detector = event.detector
        self.count = event.count
        self.paired_tool = event.paired_tool
        self.message = event.message

    def to_dict(self) -> dict[str, Any]:
        line = self.line
        return {
            "call": self.call,
            "line": line if isinstance(line, int) else None,
            "position": line if isinstance(line, str) else None,
            "call_id": self.call_id,
            "action": self.action,
            "level": self.level,
            "tool": self.tool,
            "detector": self.detector,
            "count": self.count,
            "paired_tool": self.paired_tool,
            "message": self.message,
        }


def _calls(n: int) -> str:
    return f"{n} call{'s' if n != 1 else ''}"


class RunReport:
    """What replay found in one run."""

    __slots__ = (
        "agent",
        "calls",
        "compaction_marks",
        "compactions",
        "counts",
        "events",
        "events_omitted",
        "first_block_call",
        "first_intervention_call",
        "first_warning_call",
        "format",
        "key",
        "label",
        "line",
        "live_events",
        "session",
        "source",
        "stop",
        "stop_ran",
        "timeline",
        "timeline_tools",
        "title",
        "tools",
    )

    def __init__(
        self,
        key: str,
        label: str,
        source: str,
        fmt: str,
        line: Loc,
        session: str | None,
        agent: str | None,
        title: str | None,
        timeline: bool,
    ) -> None:
        self.key = key
        self.label = label
        self.source = source
        self.format = fmt
        self.line = line
        self.session = session
        self.agent = agent
        self.title = title
        self.calls = 0
        self.tools: dict[str, int] = {}
        self.events: list[ReplayEvent] = []
        self.events_omitted = 0
        self.counts = {"warn": 0, "block": 0, "stop": 0, "abort": 0}
        self.first_warning_call: int | None = None
        self.first_block_call: int | None = None
        self.first_intervention_call: int | None = None
        self.stop: ReplayEvent | None = None
        self.stop_ran = False
        """The call that ended the run ran (a post-compaction abort on its outcome)."""
        self.compactions = 0
        self.compaction_marks: list[int] = []
        self.live_events = 0
        self.timeline: list[int] | None = [] if timeline else None
        self.timeline_tools: dict[str, int] = {}

    # -- derived figures -------------------------------------------------------
    @property
    def level(self) -> str:
        """``ok``, ``warning`` (only warnings) or ``critical`` (a block, stop or abort)."""
        counts = self.counts
        if counts["block"] or counts["stop"] or counts["abort"]:
            return "critical"
        if counts["warn"]:
            return "warning"
        return "ok"

    @property
    def calls_after_first_warning(self) -> int:
        """Calls made after the guard first spoke up (warning, block, stop or abort)."""
        first = self.first_intervention_call
        return self.calls - first if first is not None else 0

    @property
    def calls_after_stop(self) -> int:
        """Calls made after the point where the guard would have ended the run."""
        return self.calls - self.stop.call if self.stop is not None else 0

    @property
    def calls_prevented(self) -> int:
        """Calls the guard would have kept from running: blocked calls, the call it stopped
        the run at (unless that call had run: an abort on its outcome) and every call after."""
        stop = self.stop
        ended = 0 if stop is None or self.stop_ran else 1
        return self.counts["block"] + ended + self.calls_after_stop

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def verdict(self) -> str:
        """One line that says what the guard would have done in this run."""
        n = self.calls
        stop = self.stop
        first = self.first_intervention_call
        after = self.calls_after_first_warning
        if stop is not None:
            what = "aborted" if stop.action == "abort" else "stopped"
            text = (
                f"{what} at call {stop.call} of {n}: {stop.detector} on {stop.tool} "
                f"(count {stop.count})"
            )
            if first is not None and first != stop.call:
                text += f"; first warning at call {first}, {_calls(after)} after it"
            if self.calls_after_stop:
                text += f"; {_calls(self.calls_after_stop)} after the stop"
            return text
        counts = self.counts
        if counts["block"]:
            return (
                f"looped: {counts['block']} blocked from call {self.first_block_call} of {n}; "
                f"{_calls(after)} after the first warning"
            )
        if counts["warn"]:
            warnings = counts["warn"]
            return (
                f"warned: {warnings} warning{'s' if warnings != 1 else ''} from call "
                f"{self.first_warning_call} of {n}; {_calls(after)} after the first warning"
            )
        return f"ok: {_calls(n)}, no loop detected"

    def to_dict(self) -> dict[str, Any]:
        line = self.line
        stop = self.stop
        return {
            "run": self.label,
            "session": self.session,
            "agent": self.agent,
            "title": self.title,
            "source": {
                "file": self.source,
                "line": line if isinstance(line, int) else None,
                "position": line if isinstance(line, str) else None,
                "format": self.format,
            },
            "level": self.level,
            "verdict": self.verdict(),
            "calls": self.calls,
            "tools": dict(sorted(self.tools.items(), key=lambda kv: (-kv[1], kv[0]))),
            "counts": dict(self.counts),
            "first_warning_call": self.first_warning_call,
            "first_intervention_call": self.first_intervention_call,
            "first_block_call": self.first_block_call,
            "stop": None
            if stop is None
            else {
                "action": stop.action,
                "call": stop.call,
                "tool": stop.tool,
                "detector": stop.detector,
                "count": stop.count,
                "message": stop.message,
            },
            "calls_after_first_warning": self.calls_after_first_warning,
            "calls_after_stop": self.calls_after_stop,
            "calls_prevented": self.calls_prevented,
            "compactions": self.compactions,
            "live_events": self.live_events,
            "events": [event.to_dict() for event in self.events],
            "events_omitted": self.events_omitted,
        }


@dataclass
class InputInfo:
    """One input as replay saw it."""

    name: str
    format: str | None
    """Detected (or forced) format; None for an empty input."""
    error: str | None = None
    """Why the input was skipped, if it was."""

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.name, "format": self.format, "error": self.error}


def merge_input(inputs: list[InputInfo], info: InputInfo, *, continued: bool = False) -> None:
    """Add an input; ``continued``: the next range of the file added last (one entry per file)."""
    if not continued or not inputs:
        inputs.append(info)
        return
    whole = inputs[-1]
    whole.format = whole.format or info.format
    if whole.error is None and info.error is not None and info.error != "empty input":
        whole.error = info.error


@dataclass
class Totals:
    """Figures across all replayed runs."""

    runs: int = 0
    calls: int = 0
    levels: Counter[str] = field(default_factory=Counter)
    stopped: int = 0
    aborted: int = 0
    warnings: int = 0
    blocks: int = 0
    calls_after_first_warning: int = 0
    calls_after_stop: int = 0
    compactions: int = 0
    problems: int = 0
    problem_list: list[tuple[str, str]] = field(default_factory=list)
    inputs: list[InputInfo] = field(default_factory=list)

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.calls += report.calls
        self.levels[report.level] += 1
        stop = report.stop
        if stop is not None:
            if stop.action == "abort":
                self.aborted += 1
            else:
                self.stopped += 1
        counts = report.counts
        self.warnings += counts["warn"]
        self.blocks += counts["block"]
        self.calls_after_first_warning += report.calls_after_first_warning
        self.calls_after_stop += report.calls_after_stop
        self.compactions += report.compactions

    def add_problem(self, where: str, reason: str) -> None:
        self.problems += 1
        if len(self.problem_list) < MAX_PROBLEMS_KEPT:
            self.problem_list.append((where, reason))

    @property
    def looped_runs(self) -> int:
        return self.levels["warning"] + self.levels["critical"]

    def reached(self, level: str) -> bool:
        """Whether any run reached ``warning`` (a warning or worse) or ``critical``."""
        if level == "warning":
            return self.looped_runs > 0
        return self.levels[level] > 0

    @property
    def nothing_read(self) -> bool:
        """No input given, or none readable and at least one failed (empty inputs are fine)."""
        if any(info.format is not None for info in self.inputs):
            return False
        return not self.inputs or any(
            info.error is not None and info.error != "empty input" for info in self.inputs
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": sum(1 for i in self.inputs if i.format is not None and i.error is None),
            "runs": self.runs,
            "calls": self.calls,
            "runs_ok": self.levels["ok"],
            "runs_warning": self.levels["warning"],
            "runs_critical": self.levels["critical"],
            "runs_stopped": self.stopped,
            "runs_aborted": self.aborted,
            "warnings": self.warnings,
            "blocks": self.blocks,
            "calls_after_first_warning": self.calls_after_first_warning,
            "calls_after_stop": self.calls_after_stop,
            "compactions": self.compactions,
            "problems": self.problems,
        }
