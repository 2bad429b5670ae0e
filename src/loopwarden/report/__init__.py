"""Rendering replay results: text for terminals, JSON for tools, a self-contained HTML page.

Writers receive the runs one by one as replay finishes them
(:meth:`ReportWriter.run`) and the totals at the end, so text and JSON output
stream in constant memory; the HTML page keeps only what it draws (see
:mod:`loopwarden.report.html` for its limits).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..traces.replay import RunReport

__all__ = ["SCHEMA", "InputInfo", "ReplayMeta", "ReportWriter", "Totals"]

SCHEMA = "loopwarden.replay/1"
"""Identifier of the JSON output schema; changes only with incompatible changes."""

MAX_PROBLEMS_KEPT = 1000


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


@dataclass
class ReplayMeta:
    """What a replay used: config, agent and overrides."""

    config_source: str | None
    """The ``--config`` file, or None for the built-in default."""
    agent: str | None
    overrides: dict[str, Any]
    effective: dict[str, Any]
    """The effective ``tools.loopDetection`` block (global, or the forced agent's)."""
    version: str

    def describe(self) -> str:
        block = self.effective
        base = self.config_source or "built-in defaults"
        parts = [
            f"config: {base} (enabled: {_word(block.get('enabled'))})",
            f"warning {block.get('warningThreshold')}",
            f"critical {block.get('criticalThreshold')}",
            f"breaker {block.get('globalCircuitBreakerThreshold')}",
            f"history {block.get('historySize')}",
        ]
        if self.agent:
            parts.insert(1, f"agent {self.agent}")
        if self.overrides:
            parts.append("--set " + ", ".join(f"{k}={_word(v)}" for k, v in self.overrides.items()))
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.config_source,
            "agent": self.agent,
            "overrides": dict(self.overrides),
            "effective": self.effective,
        }


def _word(value: Any) -> str:
    if value is None:
        return "unset"
    return "true" if value is True else "false" if value is False else str(value)


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


class ReportWriter(Protocol):
    """Receives replay results as they come."""

    def start(self, meta: ReplayMeta) -> None: ...

    def run(self, report: RunReport) -> None: ...

    def finish(self, totals: Totals) -> None: ...
