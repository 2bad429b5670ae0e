"""The post-compaction guard (docs/detection.md, "After a context compaction").

After the runner compacts an overflowing context and retries, a model that was
stuck tends to resume the very same call. The guard opens a short window of
attempts; if every attempt in it is the same call with the same result, the
run is aborted with ``compaction_loop_persisted`` instead of looping again.

The guard decides; it does not write its log lines itself on the runtime path.
:meth:`PostCompactionGuard.open` and :meth:`~PostCompactionGuard.step` return
the line to log, and the runtime guard writes it once the store has committed
the change (a store may run a transaction twice). :meth:`~PostCompactionGuard.arm`
and :meth:`~PostCompactionGuard.observe`, the engine-level entry points for callers
that use the guard on its own, write it straight away.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from logging import ERROR, INFO
from typing import Any, NamedTuple

from .._logging import write_line
from . import messages

__all__ = ["COMPACTION_LOOP_PERSISTED", "CompactionVerdict", "LogLine", "PostCompactionGuard"]

COMPACTION_LOOP_PERSISTED = "compaction_loop_persisted"
# Calls remembered before arming, to report how many post-compaction calls
# simply repeated what the model was doing when the context overflowed.
_BASELINE_SIZE = 16


class LogLine(NamedTuple):
    """A line for the ``loopwarden`` logger, to write once a change is committed."""

    level: int
    message: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class CompactionVerdict:
    """What one observation did to the guard."""

    should_abort: bool
    armed: bool
    remaining_attempts: int
    count: int = 0
    """Observations in the window identical to this one (tool, args and result)."""
    tool_name: str | None = None
    detector: str | None = None
    message: str | None = None
    log: LogLine | None = field(default=None, compare=False, repr=False)
    """What to log about this observation (the abort, or the closing summary)."""


_IDLE = CompactionVerdict(False, False, 0)


class PostCompactionGuard:
    """Watches the first ``window_size`` outcomes after a compaction.

    >>> guard = PostCompactionGuard(window_size=3)
    >>> guard.arm()
    >>> [guard.observe("read", "read:a", "r1").should_abort for _ in range(3)]
    [False, False, True]
    """

    def __init__(self, window_size: int = 3, enabled: bool = True) -> None:
        self.window_size = max(1, int(window_size))
        self.enabled = enabled
        self._remaining = 0
        self.armed = False
        """A window is open: the next ``remaining_attempts`` outcomes are attempts."""
        self._window: list[tuple[str, str, str]] = []
        self.recent: deque[tuple[str, str]] = deque(maxlen=_BASELINE_SIZE)
        """(tool, args hash) of the newest calls: what a compaction compares attempts with."""
        self._baseline: set[tuple[str, str]] = set()
        self._repeats = 0
        self._repeat_tools: set[str] = set()

    @property
    def remaining_attempts(self) -> int:
        return self._remaining

    def arm(self) -> None:
        """Open a new window (forgetting any previous one) and log it."""
        line = self.open()
        if line is not None:
            write_line(line)

    def observe(self, tool: str, args_hash: str, result_hash: str) -> CompactionVerdict:
        """Record one outcome and log what it did; ``should_abort`` ends the run."""
        verdict = self.step(tool, args_hash, result_hash)
        if verdict.log is not None:
            write_line(verdict.log)
        return verdict

    def open(self) -> LogLine | None:
        """:meth:`arm` without logging: returns the line to log (``None`` when disabled)."""
        if not self.enabled:
            return None
        self._remaining = self.window_size
        self.armed = True
        self._window = []
        self._baseline = set(self.recent)
        self._repeats = 0
        self._repeat_tools = set()
        return LogLine(INFO, "post-compaction guard armed for %d attempts", (self.window_size,))

    def step(self, tool: str, args_hash: str, result_hash: str) -> CompactionVerdict:
        """:meth:`observe` without logging: the verdict carries the line to log."""
        if not self.enabled:
            return _IDLE
        signature = (tool, args_hash)
        if self._remaining <= 0:
            self.recent.append(signature)
            return _IDLE
        self._remaining -= 1
        triple = (tool, args_hash, result_hash)
        self._window.append(triple)
        self.recent.append(signature)
        if signature in self._baseline:
            self._repeats += 1
            self._repeat_tools.add(tool)
        matches = self._window.count(triple)
        armed = self.armed = self._remaining > 0
        if matches >= self.window_size:
            return CompactionVerdict(
                True,
                armed,
                self._remaining,
                matches,
                tool,
                COMPACTION_LOOP_PERSISTED,
                messages.compaction_abort(tool, matches, self.window_size),
                LogLine(
                    ERROR,
                    "post-compaction loop persisted: %s repeated %d times with identical "
                    "arguments and result",
                    (tool, matches),
                ),
            )
        log = None
        if not armed:
            tools = ",".join(sorted(self._repeat_tools))
            log = LogLine(
                INFO,
                "post-compaction window closed without abort: %d calls, %d repeated a call "
                "made just before compaction%s",
                (len(self._window), self._repeats, f" ({tools})" if tools else ""),
            )
        return CompactionVerdict(False, armed, self._remaining, matches, tool, log=log)

    def continues(self, tool: str, args_hash: str, result_hash: str) -> bool:
        """Armed, and every attempt in the window so far was this call with this result:
        more of it ends the run."""
        if self._remaining <= 0:
            return False
        triple = (tool, args_hash, result_hash)
        return all(seen == triple for seen in self._window)

    # -- serialisation (for persistent stores) -------------------------------
    def dump(self) -> dict[str, Any]:
        # orjson writes tuples as arrays: no per-item conversion.
        return {
            "r": self._remaining,
            "w": self._window,
            "c": list(self.recent),
            "b": sorted(self._baseline),  # a stable order: equal states, equal bytes
            "n": self._repeats,
            "t": sorted(self._repeat_tools),
        }

    def load(self, data: dict[str, Any]) -> None:
        # map() over C callables: no Python frame per remembered call.
        self._remaining = int(data.get("r", 0))
        self.armed = self._remaining > 0
        self._window = list(map(tuple, data.get("w", [])))
        self.recent = deque(map(tuple, data.get("c", [])), maxlen=_BASELINE_SIZE)
        self._baseline = set(map(tuple, data.get("b", [])))
        self._repeats = int(data.get("n", 0))
        self._repeat_tools = set(data.get("t", []))
