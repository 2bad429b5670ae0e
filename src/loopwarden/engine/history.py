"""``ToolCallHistory``: the engine-level rolling history, one window for all runs.

One window of ``historySize`` records shared by every run (OpenClaw's model),
with detection scoped to the run being checked. The runtime guard
(:mod:`loopwarden.guard`) instead gives each run a window of its own.

Built from a bare ``tools.loopDetection`` block it keeps OpenClaw's semantics
exactly. The runtime guard's additions are switched on explicitly: a config with
``rules`` (``LoopDetectionConfig(enabled=True, rules=Rules())``) runs loopwarden's
own rules, and a registry with the volatile-counter profile
(``ProfileRegistry.create(volatile=True)``) masks outcomes before hashing.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..config import LoopDetectionConfig
from ..hashing import (
    MISSING,
    args_hash,
    error_text,
    failed,
    hash_outcome,
    is_known_poll,
    masked_hash,
    new_source,
)
from ..profiles import DEFAULT_REGISTRY, ProfileRegistry
from ..profiles.volatile import error_excerpt
from .detectors import Call, Detection, Observed
from .runtime import decide, observe, quiet
from .state import RunState
from .window import Record, RunWindow

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

    ``clock`` stamps the records (seconds since the epoch).

    >>> hist = ToolCallHistory(LoopDetectionConfig(enabled=True))
    >>> hist.record_call("read", {"path": "a.txt"}, call_id="c1")
    >>> rec = hist.record_outcome("read", {"path": "a.txt"}, call_id="c1", result="text")
    >>> hist.detect("read", {"path": "a.txt"}) is None
    True
    """

    def __init__(
        self,
        config: LoopDetectionConfig | None = None,
        *,
        profiles: ProfileRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config if config is not None else LoopDetectionConfig()
        self.profiles = profiles if profiles is not None else DEFAULT_REGISTRY
        self.clock = clock
        self._order: deque[Record] = deque()
        # One state per run: its window (evicted in the history's shared order) and the
        # state of the rules that keep one.
        self._runs: dict[str | None, RunState] = {}

    def __len__(self) -> int:
        return len(self._order)

    @property
    def records(self) -> list[Record]:
        """The records currently held, oldest first."""
        return list(self._order)

    def _add(
        self,
        tool: str,
        sig: str,
        call_id: str | None,
        run_id: str | None,
        result_hash: str | None,
        unknown_tool_name: str | None,
    ) -> Record:
        st = self._runs.get(run_id)
        if st is None:
            st = self._runs[run_id] = RunState.new(self.config, RunWindow(capacity=None))
        rec = st.window.add(
            tool, sig, call_id, result_hash, unknown_tool_name, self.clock(), run_id=run_id
        )
        self._order.append(rec)
        while len(self._order) > self.config.history_size:
            oldest = self._order.popleft()
            window = self._runs[oldest.run_id].window
            window.evict_oldest()
            if not window.records:
                del self._runs[oldest.run_id]
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
        return self._add(tool, sig, call_id, normalize_run_id(run_id), None, None)

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
        profiles = self.profiles
        outcome = hash_outcome(tool, params, result=result, error=error, profiles=profiles)
        if outcome.hash is None:
            return None
        masker = profiles.masker_for(tool)
        src = new_source((tool, params, result, error, profiles, masker))
        result_hash = masked_hash(src) if masker is not None else outcome.hash
        failure = failed(result, outcome.is_error)
        return self.record_outcome_hashed(
            tool,
            args_hash(tool, params),
            result_hash or outcome.hash,
            outcome.unknown_tool_name,
            call_id,
            run_id,
            is_error=failure,
            error=error_excerpt(error_text(src)) if failure else None,
            params=params,
        )

    def record_outcome_hashed(
        self,
        tool: str,
        sig: str,
        result_hash: str,
        unknown_tool_name: str | None = None,
        call_id: str | None = None,
        run_id: str | None = None,
        *,
        is_error: bool = False,
        error: str | None = None,
        params: Any = None,
    ) -> Record:
        """``record_outcome`` with precomputed hashes (``is_error``, ``error`` and ``params``
        are read by loopwarden's own rules only)."""
        run = normalize_run_id(run_id)
        st = self._runs.get(run)
        rec = None
        recent = False
        if st is not None:
            recent = st.plan.own and st.window.repeats_recent(sig)
            rec = st.window.complete_pending(sig, call_id, result_hash, unknown_tool_name)
        started = None if rec is None else rec.timestamp
        if st is None or rec is None:
            rec = self._add(tool, sig, call_id, run, result_hash, unknown_tool_name)
            st = self._runs[run]
        is_error = is_error or unknown_tool_name is not None
        waited = st.plan.own and quiet(
            st, sig, None if started is None else self.clock() - started, params, recent or is_error
        )
        observe(st, Observed(tool, sig, result_hash, is_error, error, waited, False))
        return rec

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
        st = self._runs.get(normalize_run_id(run_id))
        if st is None:
            return None
        if poll and st.plan.own:
            st.note_poll(sig)
        # OpenClaw's semantics exactly: no arbiter re-decides what the rules found.
        return decide(st, Call(tool, sig, poll, sig, None), arbitrate=False)
