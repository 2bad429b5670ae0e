"""Exceptions raised by loopwarden.

::

    Exception
    └── LoopwardenError                  base of every exception loopwarden raises on purpose
        ├── ConfigError (+ ValueError)   a config or a store URL is invalid: .issues, each a
        │                                ConfigIssue with its path, file line and what to fix
        ├── StoreError                   a state store failed: .original; the guard logs it
        │                                and allows the call, or blocks it when fail-closed
        └── LoopAbort                    the guard ended the run on purpose: .code (the rule
            │                            that did), .tool_name, .count, .message, .report
            │                            (a StopReport: what the stop saved); to_dict()
            ├── CircuitBreakerTripped     a rule stopped the run: .code is its name
            │                            (consecutive_repeat, cycle, failure_streak,
            │                            blocks_in_a_row, unknown_tool_repeat,
            │                            global_circuit_breaker)
            └── CompactionLoopPersisted   code "compaction_loop_persisted": the seed's
                                         post-compaction guard

``LoopAbort`` and its subclasses are control flow: integrations let them
propagate so that the framework ends the run. A missing optional framework is
a plain ``ImportError`` that names the extra to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stopping import StopReport

__all__ = [
    "CircuitBreakerTripped",
    "CompactionLoopPersisted",
    "ConfigError",
    "ConfigIssue",
    "LoopAbort",
    "LoopwardenError",
    "StoreError",
]


class LoopwardenError(Exception):
    """Base class of every exception loopwarden raises."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found while validating a config."""

    path: str
    """Dotted path of the offending key, e.g. ``agents.list[2].tools.loopDetection.historySize``."""
    message: str
    """What is wrong and what is allowed instead."""
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line}: " if self.line is not None else f"{self.file}: "
        elif self.line is not None:
            where = f"line {self.line}: "
        return f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"


class ConfigError(LoopwardenError, ValueError):
    """A config is invalid. ``issues`` lists every problem found, each with its path.

    ``fail_closed``: the invalid config asks for ``failMode: "closed"`` (so a hook
    denies calls until it is fixed, rather than allowing them).
    """

    fail_closed: bool = False

    def __init__(self, issues: Sequence[ConfigIssue] | str) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue(path="", message=issues)]
        self.issues: tuple[ConfigIssue, ...] = tuple(issues)
        if len(self.issues) == 1:
            text = f"invalid loopwarden config: {self.issues[0]}"
        else:
            lines = "\n".join(f"  - {issue}" for issue in self.issues)
            text = f"invalid loopwarden config ({len(self.issues)} problems):\n{lines}"
        super().__init__(text)


class StoreError(LoopwardenError):
    """A state store could not be read or written. ``original`` is the underlying error."""

    def __init__(self, message: str, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


class LoopAbort(LoopwardenError):
    """The guard ended the run on purpose. ``code`` names the rule that did (``detector``
    is the same name)."""

    code: str = "loop_abort"
    report: StopReport | None = None
    """What the stop ended and saved (set by the guard that raised it)."""
    call_id: str | None = None
    """The id of the call the stop refused (``None``: the stop came after a call ran)."""
    _key: str | None = None  # the refused call's key in the run state (its id or signature)

    def __init__(self, message: str, *, tool_name: str, count: int, detector: str | None = None):
        super().__init__(message)
        self.message = message
        self.tool_name = tool_name
        self.count = count
        self.code = detector or type(self).code
        self.detector = self.code

    @property
    def askable(self) -> bool:
        """Whether a person may be asked to overrule this stop (``onStop: ask``). The
        post-compaction abort never is: the seed's verdict ends the run."""
        return self.code != CompactionLoopPersisted.code

    @staticmethod
    def find(exc: BaseException | None) -> LoopAbort | None:
        """The loopwarden stop behind ``exc``, or ``None``.

        Frameworks that wrap errors raised in their callbacks (ADK re-raises them
        as ``RuntimeError``; task groups raise exception groups) keep ours as the
        cause or context, or inside the group: this looks through all of them.
        """
        seen: set[int] = set()
        pending = [exc]
        while pending:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            if isinstance(current, LoopAbort):
                return current
            seen.add(id(current))
            group = getattr(current, "exceptions", None)
            if isinstance(group, tuple):
                pending.extend(e for e in reversed(group) if isinstance(e, BaseException))
            pending.append(current.__context__)
            pending.append(current.__cause__)
        return None

    def to_dict(self) -> dict[str, object]:
        """Machine-readable form, e.g. for an API response or a hook's stop reason."""
        out: dict[str, object] = {
            "code": self.code,
            "detector": self.code,
            "tool": self.tool_name,
            "count": self.count,
            "message": self.message,
        }
        if self.report is not None:
            out["calls"] = self.report.calls
            out["refused"] = self.report.refused
            out["summary"] = self.report.summary()
        return out


class CircuitBreakerTripped(LoopAbort):
    """A rule stopped the run; ``code`` is its name. The class's own code,
    ``global_circuit_breaker``, is the global circuit breaker's (no-progress streak reached
    ``globalCircuitBreakerThreshold``); every other rule sets its name."""

    code = "global_circuit_breaker"


class CompactionLoopPersisted(LoopAbort):
    """The same call kept returning the same result right after a context compaction."""

    code = "compaction_loop_persisted"
