"""The post-compaction guard (SPEC section 5).

After the runner compacts an overflowing context and retries, a model that was
stuck tends to resume the very same call. The guard opens a short window of
attempts; if every attempt in it is the same call with the same result, the
run is aborted with ``compaction_loop_persisted`` instead of looping again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["CompactionVerdict", "PostCompactionGuard"]

from ._logging import logger

COMPACTION_LOOP_PERSISTED = "compaction_loop_persisted"
# Calls remembered before arming, to report how many post-compaction calls
# simply repeated what the model was doing when the context overflowed.
_BASELINE_SIZE = 16


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


_IDLE = CompactionVerdict(False, False, 0)


def compaction_message(tool: str, count: int, window: int) -> str:
    return (
        f"CRITICAL: {tool} was called {count} times with identical arguments and got "
        f"identical results in the {window} attempts right after context compaction. "
        "Compaction did not break the loop, so loopwarden aborted the run."
    )


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
        self._window: list[tuple[str, str, str]] = []
        self._recent: deque[tuple[str, str]] = deque(maxlen=_BASELINE_SIZE)
        self._baseline: set[tuple[str, str]] = set()
        self._repeats = 0
        self._repeat_tools: set[str] = set()

    @property
    def armed(self) -> bool:
        return self._remaining > 0

    @property
    def remaining_attempts(self) -> int:
        return self._remaining

    def arm(self) -> None:
        """Open a new window (forgetting any previous one)."""
        if not self.enabled:
            return
        self._remaining = self.window_size
        self._window = []
        self._baseline = set(self._recent)
        self._repeats = 0
        self._repeat_tools = set()
        logger.info("post-compaction guard armed for %d attempts", self.window_size)

    def observe(self, tool: str, args_hash: str, result_hash: str) -> CompactionVerdict:
        """Record one outcome; returns the verdict (``should_abort`` ends the run)."""
        if not self.enabled:
            return _IDLE
        signature = (tool, args_hash)
        if self._remaining <= 0:
            self._recent.append(signature)
            return _IDLE
        self._remaining -= 1
        triple = (tool, args_hash, result_hash)
        self._window.append(triple)
        self._recent.append(signature)
        if signature in self._baseline:
            self._repeats += 1
            self._repeat_tools.add(tool)
        matches = self._window.count(triple)
        armed = self._remaining > 0
        if matches >= self.window_size:
            message = compaction_message(tool, matches, self.window_size)
            logger.error(
                "post-compaction loop persisted: %s repeated %d times with identical "
                "arguments and result",
                tool,
                matches,
            )
            return CompactionVerdict(
                True, armed, self._remaining, matches, tool, COMPACTION_LOOP_PERSISTED, message
            )
        if not armed:
            tools = ",".join(sorted(self._repeat_tools))
            logger.info(
                "post-compaction window closed without abort: %d calls, %d repeated a call "
                "made just before compaction%s",
                len(self._window),
                self._repeats,
                f" ({tools})" if tools else "",
            )
        return CompactionVerdict(False, armed, self._remaining, matches, tool)

    # -- serialisation (for persistent stores) -------------------------------
    def dump(self) -> dict[str, Any]:
        return {
            "r": self._remaining,
            "w": [list(t) for t in self._window],
            "c": [list(s) for s in self._recent],
            "b": [list(s) for s in self._baseline],
            "n": self._repeats,
            "t": sorted(self._repeat_tools),
        }

    def load(self, data: dict[str, Any]) -> None:
        self._remaining = int(data.get("r", 0))
        self._window = [(str(a), str(b), str(c)) for a, b, c in data.get("w", [])]
        self._recent = deque(
            ((str(a), str(b)) for a, b in data.get("c", [])), maxlen=_BASELINE_SIZE
        )
        self._baseline = {(str(a), str(b)) for a, b in data.get("b", [])}
        self._repeats = int(data.get("n", 0))
        self._repeat_tools = set(data.get("t", []))
