"""``ToolCallHistory``: the engine-level rolling history of SPEC sections 3, 4 and 8.

One window of ``historySize`` records shared by every run (OpenClaw's model),
with detection scoped to the run being checked. The runtime guard
(:mod:`loopwarden.guard`) instead gives each run a window of its own.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ._window import Record, RunWindow, now
from .config import LoopDetectionConfig
from .detection import Detection, detect_in_window
from .hashing import MISSING, args_hash, hash_outcome, is_known_poll
from .profiles import DEFAULT_REGISTRY, ProfileRegistry

__all__ = ["Record", "ToolCallHistory", "normalize_run_id"]


def normalize_run_id(run_id: object) -> str | None:
    """Trimmed run id; an empty one means "no run"."""
    if run_id is None:
        return None
    text = str(run_id).strip()
    return text or None


def _tool_name(tool: object) -> str:
    return tool.strip() if isinstance(tool, str) else str(tool).strip()


class ToolCallHistory:
    """Rolling history of tool calls and outcomes, with loop detection.

    >>> hist = ToolCallHistory(LoopDetectionConfig(enabled=True))
    >>> hist.record_call("read", {"path": "a.txt"}, call_id="c1")
    >>> rec = hist.record_outcome("read", {"path": "a.txt"}, call_id="c1", result="text")
    >>> hist.detect("read", {"path": "a.txt"}) is None
    True
    """

    def __init__(
        self, config: LoopDetectionConfig | None = None, *, profiles: ProfileRegistry | None = None
    ) -> None:
        self.config = config if config is not None else LoopDetectionConfig()
        self.profiles = profiles if profiles is not None else DEFAULT_REGISTRY
        self._order: deque[Record] = deque()
        self._windows: dict[str | None, RunWindow] = {}

    def __len__(self) -> int:
        return len(self._order)

    @property
    def records(self) -> list[Record]:
        """The records currently held, oldest first."""
        return list(self._order)

    def _window(self, run_id: str | None) -> RunWindow:
        window = self._windows.get(run_id)
        if window is None:
            window = self._windows[run_id] = RunWindow(capacity=None)
        return window

    def _append(self, rec: Record) -> Record:
        self._window(rec.run_id).append(rec)
        self._order.append(rec)
        while len(self._order) > self.config.history_size:
            oldest = self._order.popleft()
            window = self._windows[oldest.run_id]
            window.evict_oldest()
            if not window.records:
                del self._windows[oldest.run_id]
        return rec

    def record_call(
        self, tool: str, params: Any, call_id: str | None = None, run_id: str | None = None
    ) -> None:
        """Append a pending record for a call that is about to run."""
        tool = _tool_name(tool)
        self.record_call_hashed(tool, args_hash(tool, params), call_id, run_id)

    def record_call_hashed(
        self, tool: str, sig: str, call_id: str | None = None, run_id: str | None = None
    ) -> Record:
        """``record_call`` with a precomputed args hash (used by trace replay)."""
        return self._append(Record(tool, sig, call_id, normalize_run_id(run_id), None, None, now()))

    def record_outcome(
        self,
        tool: str,
        params: Any,
        call_id: str | None = None,
        run_id: str | None = None,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> Record | None:
        """Attach an outcome to the matching pending record (or append a complete one).

        Returns the record, or ``None`` when the outcome is not recorded (no
        result and no error, or loopwarden's own block answer).
        """
        tool = _tool_name(tool)
        outcome = hash_outcome(tool, params, result=result, error=error, profiles=self.profiles)
        if outcome.hash is None:
            return None
        return self.record_outcome_hashed(
            tool, args_hash(tool, params), outcome.hash, outcome.unknown_tool_name, call_id, run_id
        )

    def record_outcome_hashed(
        self,
        tool: str,
        sig: str,
        result_hash: str,
        unknown_tool_name: str | None = None,
        call_id: str | None = None,
        run_id: str | None = None,
    ) -> Record:
        """``record_outcome`` with precomputed hashes."""
        run = normalize_run_id(run_id)
        window = self._windows.get(run)
        rec = window.find_pending(sig, call_id) if window is not None else None
        if rec is not None and window is not None:
            window.complete(rec, result_hash, unknown_tool_name)
            return rec
        return self._append(Record(tool, sig, call_id, run, result_hash, unknown_tool_name, now()))

    def detect(self, tool: str, params: Any, run_id: str | None = None) -> Detection | None:
        """Check a call about to run; ``None`` unless a loop pattern matches."""
        if self.config.enabled is not True:
            return None
        tool = _tool_name(tool)
        poll = is_known_poll(tool, params, self.profiles)
        return self.detect_hashed(tool, args_hash(tool, params), poll, run_id)

    def detect_hashed(
        self, tool: str, sig: str, poll: bool, run_id: str | None = None
    ) -> Detection | None:
        """``detect`` with a precomputed args hash and poll flag."""
        if self.config.enabled is not True:
            return None
        window = self._windows.get(normalize_run_id(run_id))
        if window is None:
            return None
        return detect_in_window(window, tool, sig, poll, self.config)
