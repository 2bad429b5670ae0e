"""The runtime policy of SPEC section 6, as functions of a run's state.

:func:`before` decides about a call the model wants to make, :func:`after`
records its outcome and :func:`compacted` arms the post-compaction guard.
Each changes only the :class:`~loopwarden.engine.state.RunState` it is given
and returns a :class:`Step`: what the caller answers, and what it has to do
once the store has committed the change (emit an event, end the run, write a
log line). They read no clock (``now`` is an argument) and do no I/O, so a
store may run them twice for one update (optimistic concurrency) without
anything happening twice.

Escalation (SPEC 6.2): a warning is delivered once per ``warningThreshold``
bucket; a critical detection blocks the call and records a veto that repeats
the stuck outcome, so retrying climbs toward the global circuit breaker, which
ends the run. Unknown tools (SPEC 6.4) are counted against the registered
names and blocked past ``unknownToolThreshold``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from . import messages
from .compaction import COMPACTION_LOOP_PERSISTED, LogLine
from .detect import GLOBAL_CIRCUIT_BREAKER, UNKNOWN_TOOL_REPEAT, Detection, detect_in_window
from .state import RunState, Stop

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig
    from ..hashing import Outcome

__all__ = [
    "ALLOW",
    "Call",
    "Decision",
    "Done",
    "Step",
    "after",
    "before",
    "block_result",
    "compacted",
]

Action = Literal["allow", "warn", "block"]
EventAction = Literal["warn", "block", "stop", "abort"]
Call = tuple[str, str, bool, str, "str | None"]
"""A call about to run: tool name, args hash, poll flag, call key, call id."""
Done = tuple[str, str, str, "str | None", "Outcome"]
"""A finished call: tool name, args hash, call key, call id, outcome."""


@dataclass(frozen=True)
class Decision:
    """What to do with one tool call."""

    action: Action
    """``allow``, ``warn`` (run it and show ``message`` with its result) or ``block``."""
    message: str | None = None
    """For ``warn``, the note for the model; for ``block``, the tool result to return instead."""
    detection: Detection | None = None

    @property
    def blocked(self) -> bool:
        return self.action == "block"

    @property
    def allowed(self) -> bool:
        return self.action != "block"

    @property
    def warned(self) -> bool:
        return self.action == "warn"

    def as_result(self) -> dict[str, Any]:
        """A blocked call's answer in OpenClaw's tool-result shape (marked as an error)."""
        return block_result(self.message or "")


def block_result(message: str) -> dict[str, Any]:
    """The tool result a blocked call returns: text for the model plus a loop-veto marker."""
    return {
        "content": [{"type": "text", "text": message}],
        "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": message},
        "isError": True,
    }


ALLOW = Decision("allow")


class Step(NamedTuple):
    """What one policy function decided, and what is left to do after the commit."""

    decision: Decision = ALLOW
    """The answer to the call (:func:`before`; ``allow`` for the others)."""
    event: EventAction | None = None
    """The event to emit: its detection is ``decision.detection``, or ``stop`` for an abort."""
    stop: Stop | None = None
    """Set when the run is over: the caller raises ``stop.error()``."""
    started: bool = False
    """:func:`before` saw the run's first call."""
    note: str | None = None
    """:func:`after`: the warning note to append to the call's result."""
    recorded: bool = True
    """:func:`after`: the outcome was an outcome (not the answer of a blocked call)."""
    log: LogLine | None = None
    """A line for the ``loopwarden`` logger."""


# The common answers, built once: most calls allocate no Step at all.
QUIET = Step()
_QUIET_FIRST = Step(started=True)
_NOT_RECORDED = Step(recorded=False)


def before(
    st: RunState,
    call: Call,
    cfg: LoopDetectionConfig,
    tools: Collection[str] | None,
    now: float,
) -> Step:
    """Decide about a call at ``now``; ``tools`` are the run's registered tool names, when
    known (SPEC 6.4)."""
    tool, sig, poll, ckey, call_id = call
    first = not st.started
    st.started = True
    st.updated = now
    if st.blocked:
        # A new call under a call id that was blocked before (callers need not
        # report blocked calls back, and scripted models reuse ids).
        st.blocked.pop(ckey, None)
    stopped = st.stopped
    if stopped is not None:  # refuse every call of a stopped run the same way
        st.mark_blocked(ckey)
        return Step(
            Decision("block", stopped.message or messages.RUN_STOPPED), None, stopped, first
        )
    if tools is not None:
        det = _unknown_guard(st, tool, tool not in tools, cfg)
        if det is not None:
            return _block(st, det, tool, sig, ckey, call_id, cfg, first, now)
    window = st.window
    if cfg.enabled is True:
        det = detect_in_window(window, tool, sig, poll, cfg)
        if det is not None:
            if det.level == "critical":
                return _block(st, det, tool, sig, ckey, call_id, cfg, first, now)
            window.add(tool, sig, call_id, None, None, now)
            if not st.should_deliver(det.warning_key, det.count, cfg.warning_threshold):
                return _QUIET_FIRST if first else QUIET
            st.add_note(ckey, det.message)
            return Step(Decision("warn", det.message, det), "warn", None, first)
    window.add(tool, sig, call_id, None, None, now)
    return _QUIET_FIRST if first else QUIET


def _unknown_guard(
    st: RunState, tool: str, unknown: bool, cfg: LoopDetectionConfig
) -> Detection | None:
    """SPEC 6.4: count consecutive misses of an unregistered name; block past the threshold."""
    if not unknown:
        st.miss_name, st.miss_count = None, 0
        return None
    prior = st.miss_count if st.miss_name == tool else 0
    st.miss_name, st.miss_count = tool, prior + 1
    if prior < cfg.unknown_tool_threshold:
        return None
    return Detection(
        "critical",
        UNKNOWN_TOOL_REPEAT,
        prior,
        messages.unregistered_tool(tool, prior),
        f"unknown-tool:{tool}:{tool.lower()}",
        tool_name=tool,
        unknown_tool_name=tool.lower(),
    )


def _block(
    st: RunState,
    det: Detection,
    tool: str,
    sig: str,
    ckey: str,
    call_id: str | None,
    cfg: LoopDetectionConfig,
    first: bool,
    now: float,
) -> Step:
    window = st.window
    # The veto repeats the blocked pattern's outcome, so retrying a blocked
    # call keeps climbing toward the circuit breaker (SPEC 6.2).
    repeated = det.latest_result_hash or window.no_progress(sig)[1] or "veto"
    window.add(tool, sig, call_id, repeated, det.unknown_tool_name, now, True)
    st.mark_blocked(ckey)
    # Blocks that end the run: the global breaker, and unknown-tool retries that reach it.
    unknown = det.detector == UNKNOWN_TOOL_REPEAT
    if not (
        det.detector == GLOBAL_CIRCUIT_BREAKER
        or (
            unknown
            and det.count >= max(cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold)
        )
    ):
        return Step(Decision("block", det.message, det), "block", None, first)
    message = messages.stop(det.unknown_tool_name or tool, det.count, unknown)
    stop = st.stopped = Stop(tool, det.count, det.detector, message)
    return Step(Decision("block", message, det), "stop", stop, first)


def after(st: RunState, done: Done, now: float) -> Step:
    """Record a call's outcome (its hash ``None``: nothing to compare) at ``now``."""
    tool, sig, ckey, call_id, outcome = done
    if st.blocked and st.blocked.pop(ckey, None) is not None:
        return _NOT_RECORDED  # a blocked call's answer is not an outcome
    note = st.notes.pop(ckey, None) if st.notes else None
    result_hash = outcome.hash
    if result_hash is None:
        return QUIET if note is None else Step(note=note)
    window = st.window
    unknown = outcome.unknown_tool_name
    if window.complete_pending(sig, call_id, result_hash, unknown) is None:
        window.add(tool, sig, call_id, result_hash, unknown, now)
    guard = st.guard
    if st.stopped is None and guard.enabled:
        verdict = guard.step(tool, sig, result_hash)
        if verdict.should_abort:
            message = verdict.message or ""
            stop = st.stopped = Stop(tool, verdict.count, COMPACTION_LOOP_PERSISTED, message)
            return Step(event="abort", stop=stop, note=note, log=verdict.log)
        if verdict.log is not None:
            return Step(note=note, log=verdict.log)
    return QUIET if note is None else Step(note=note)


def compacted(st: RunState) -> LogLine | None:
    """The runner compacted the context and retries: arm the post-compaction guard."""
    return st.guard.open()
