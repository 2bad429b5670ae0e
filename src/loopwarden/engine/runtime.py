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
ends the run. Blocks also count toward a stop on their own, whatever the
detector: the ``globalCircuitBreakerThreshold - criticalThreshold`` blocked calls
that a repeat climbs through before the breaker, once they come in a row, end
the run at the next block (a ping-pong or a cycle never fills the window with
one outcome, so the breaker alone never ends it). Unknown tools (SPEC 6.4) are
counted against the registered names and blocked past ``unknownToolThreshold``.

With ``cfg.extras`` set, the extra detectors of :mod:`.extras` run beside the
SPEC 4 rules (the more severe finding wins; SPEC 4's on a tie), and
:func:`after` masks volatile counters in an outcome when the same call already
has an outcome in the window (only then is there anything to compare).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..hashing import error_text, failed, masked_hash
from ..profiles.volatile import error_excerpt
from . import messages
from .compaction import COMPACTION_LOOP_PERSISTED, LogLine
from .detect import GLOBAL_CIRCUIT_BREAKER, UNKNOWN_TOOL_REPEAT, Detection, detect_in_window
from .extras import Finding, finding_detection, outranks
from .state import MAX_MASKED, RunState, Stop

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig
    from ..hashing import Outcome, OutcomeSource

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
Done = tuple[str, str, str, "str | None", "Outcome", "OutcomeSource | None"]
"""A finished call: tool name, args hash, call key, call id, outcome, and what the
outcome came from (for masking and the extra detectors; ``None`` when only hashes
are known)."""


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
    outcome_hash: str | None = None
    """:func:`after`: the hash recorded when it is not the raw one (volatile counters masked)."""


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
        extra = st.extra
        # Only a poll, a recent call or the failing tool can continue an extra pattern.
        if extra is not None and (poll or sig in extra.recent_sigs or tool == extra.fail_tool):
            found = extra.check(tool, sig, poll)
            if found is not None and outranks(found, det):
                return _extra_step(st, found, tool, sig, ckey, call_id, cfg, first, now)
        if det is not None:
            if det.level == "critical":
                return _block(st, det, tool, sig, ckey, call_id, cfg, first, now)
            st.blocks = 0
            window.add(tool, sig, call_id, None, None, now)
            if not st.should_deliver(det.warning_key, det.count, cfg.warning_threshold):
                return _QUIET_FIRST if first else QUIET
            st.add_note(ckey, det.message)
            return Step(Decision("warn", det.message, det), "warn", None, first)
    st.blocks = 0
    window.add(tool, sig, call_id, None, None, now)
    return _QUIET_FIRST if first else QUIET


def _extra_step(
    st: RunState,
    found: Finding,
    tool: str,
    sig: str,
    ckey: str,
    call_id: str | None,
    cfg: LoopDetectionConfig,
    first: bool,
    now: float,
) -> Step:
    det = finding_detection(found, tool)
    if found.level == "critical":
        return _block(st, det, tool, sig, ckey, call_id, cfg, first, now, found)
    st.blocks = 0
    st.window.add(tool, sig, call_id, None, None, now)
    if not st.should_deliver(found.warning_key, found.count, found.every):
        return _QUIET_FIRST if first else QUIET
    st.add_note(ckey, found.message)
    return Step(Decision("warn", found.message, det), "warn", None, first)


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
    found: Finding | None = None,
) -> Step:
    window = st.window
    # The veto repeats the blocked pattern's outcome, so retrying a blocked
    # call keeps climbing toward the circuit breaker (SPEC 6.2).
    repeated = det.latest_result_hash or window.no_progress(sig)[1] or "veto"
    window.add(tool, sig, call_id, repeated, det.unknown_tool_name, now, True)
    st.mark_blocked(ckey)
    extra = st.extra
    if extra is not None:
        extra.veto(tool, sig, repeated)
    unknown = det.detector == UNKNOWN_TOOL_REPEAT
    # Blocks that end the run: the global breaker, unknown-tool retries that reach
    # it, an extra detector whose blocks were ignored, and any run whose calls
    # keep being blocked (issue 12: a ping-pong or a cycle never reaches the breaker).
    if unknown:
        ends = det.count >= max(cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold)
        reason = None
    else:
        in_a_row = st.blocks
        st.blocks = in_a_row + 1
        ends = (
            det.detector == GLOBAL_CIRCUIT_BREAKER
            or (found is not None and found.stop)
            or in_a_row >= cfg.global_circuit_breaker_threshold - cfg.critical_threshold
        )
        reason = (
            None
            if det.detector == GLOBAL_CIRCUIT_BREAKER or (found is not None and found.stop)
            else in_a_row
        )
    if not ends:
        message = found.message if found is not None else det.message
        return Step(Decision("block", message, det), "block", None, first)
    if reason is not None:
        message = messages.blocked_in_a_row(tool, reason, det.detector)
        stop = st.stopped = Stop(tool, reason, det.detector, message)
    elif found is not None:
        message = found.log_message
        stop = st.stopped = Stop(tool, det.count, det.detector, message)
    else:
        message = messages.stop(det.unknown_tool_name or tool, det.count, unknown)
        stop = st.stopped = Stop(tool, det.count, det.detector, message)
    return Step(Decision("block", message, det), "stop", stop, first)


def after(st: RunState, done: Done, now: float) -> Step:
    """Record a call's outcome (its hash ``None``: nothing to compare) at ``now``."""
    tool, sig, ckey, call_id, outcome, src = done
    if st.blocked and st.blocked.pop(ckey, None) is not None:
        return _NOT_RECORDED  # a blocked call's answer is not an outcome
    note = st.notes.pop(ckey, None) if st.notes else None
    result_hash = outcome.hash
    extra = st.extra
    if result_hash is None:
        if extra is not None:
            extra.finished(tool, sig, None, False, None, None, None)
        return QUIET if note is None else Step(note=note)
    window = st.window
    masked = None
    # Masked only when the call has an earlier, different outcome to compare with, and
    # (with the extra detectors) is one of the last few calls: a counter loop repeats
    # at once, and masking a long output costs several times hashing it.
    if src is not None and src[5] is not None and (extra is None or sig in extra.recent_sigs):
        stats = window.sigs.get(sig)
        if stats is not None and stats.hashed and stats.latest != result_hash:
            key = (tool, result_hash)
            masked = st.masked.get(key)
            if masked is None:
                masked = masked_hash(src) or result_hash
                if len(st.masked) >= MAX_MASKED:
                    st.masked.clear()
                st.masked[key] = masked
            if masked == result_hash:
                masked = None
            else:
                result_hash = masked
    unknown = outcome.unknown_tool_name
    rec = window.complete_pending(sig, call_id, result_hash, unknown)
    if rec is None:
        window.add(tool, sig, call_id, result_hash, unknown, now)
    if extra is not None:
        is_error = outcome.is_error
        error = None
        if src is not None and extra.failure is not None:
            is_error = failed(src, is_error)
            if is_error:
                error = error_excerpt(error_text(src))
        extra.finished(
            tool,
            sig,
            result_hash,
            is_error,
            error,
            None if rec is None else now - rec.timestamp,
            None if src is None else src[1],
        )
    guard = st.guard
    if st.stopped is None and guard.enabled:
        verdict = guard.step(tool, sig, result_hash)
        if verdict.should_abort:
            message = verdict.message or ""
            stop = st.stopped = Stop(tool, verdict.count, COMPACTION_LOOP_PERSISTED, message)
            return Step(event="abort", stop=stop, note=note, log=verdict.log, outcome_hash=masked)
        if verdict.log is not None:
            return Step(note=note, log=verdict.log, outcome_hash=masked)
    if masked is not None:
        return Step(note=note, outcome_hash=masked)
    return QUIET if note is None else Step(note=note)


def compacted(st: RunState) -> LogLine | None:
    """The runner compacted the context and retries: arm the post-compaction guard."""
    return st.guard.open()
