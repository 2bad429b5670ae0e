"""Loops seen in a trace, independent of any config: the yardstick for "first alarm".

A loop is a streak of at least ``min_length`` consecutive calls with the same
signature (tool and arguments), or alternating between two signatures
(A, B, A, B, ...). That is what the real-data notes call a visible loop; the
tune report says, per config, how far into each loop its first alarm came.

State per run is constant: the last two signatures and two streak counters.
Each config's first alarm inside the open streaks is kept lazily (a marker
reset only when that config alarms again in a newer streak).
"""

from __future__ import annotations

__all__ = ["DEFAULT_MIN_LOOP", "MAX_LOOPS_PER_RUN", "LoopTracker"]

DEFAULT_MIN_LOOP = 10
MAX_LOOPS_PER_RUN = 50


class LoopTracker:
    """Finds loops in one run's call sequence and where each config first alarmed in them."""

    __slots__ = (
        "alt_start",
        "configs",
        "loops",
        "marks_alt",
        "marks_same",
        "min_length",
        "prev",
        "prev2",
        "same_start",
    )

    def __init__(self, configs: int, min_length: int) -> None:
        self.configs = configs
        self.min_length = min_length
        self.prev: str | None = None
        self.prev2: str | None = None
        self.same_start = 0
        self.alt_start = 0  # 0: no alternation going on
        # per config: (streak start it belongs to, first alarm call in it)
        self.marks_same: list[tuple[int, int]] = [(0, 0)] * configs
        self.marks_alt: list[tuple[int, int]] = [(0, 0)] * configs
        self.loops: list[tuple[int, int, list[int | None]]] = []
        """``(start call, length, first alarm position per config)``; 1 = the loop's first call."""

    def call(self, index: int, sig: str) -> None:
        """Call ``index`` (1-based) has signature ``sig``; feed before the guards see it."""
        prev = self.prev
        if sig != prev:
            if prev is not None:
                self._close(self.same_start, index - self.same_start, self.marks_same)
            self.same_start = index
            if sig == self.prev2 and prev is not None:
                if not self.alt_start:
                    self.alt_start = index - 2
            elif self.alt_start:
                self._close(self.alt_start, index - self.alt_start, self.marks_alt)
                self.alt_start = 0
        elif self.alt_start:
            self._close(self.alt_start, index - self.alt_start, self.marks_alt)
            self.alt_start = 0
        self.prev2, self.prev = prev, sig

    def alarm(self, config: int, index: int) -> None:
        """Config ``config`` warned, blocked or stopped at call ``index``."""
        start = self.same_start
        if start and self.marks_same[config][0] != start:
            self.marks_same[config] = (start, index)
        start = self.alt_start
        if start and self.marks_alt[config][0] != start:
            self.marks_alt[config] = (start, index)

    def finish(self, calls: int) -> list[tuple[int, int, list[int | None]]]:
        """Close the open streaks at the end of the run; returns the loops found."""
        if self.prev is not None:
            self._close(self.same_start, calls + 1 - self.same_start, self.marks_same)
        if self.alt_start:
            self._close(self.alt_start, calls + 1 - self.alt_start, self.marks_alt)
        self.prev = None
        self.alt_start = 0
        return self.loops

    def _close(self, start: int, length: int, marks: list[tuple[int, int]]) -> None:
        if length < self.min_length:
            return
        if len(self.loops) >= MAX_LOOPS_PER_RUN:
            return
        firsts: list[int | None] = []
        for mark_start, first in marks:
            firsts.append(first - start + 1 if mark_start == start else None)
        self.loops.append((start, length, firsts))
