"""The runtime policy: every registered rule, run through one path.

:func:`before` decides about a call the model wants to make, :func:`after` records its
outcome and :func:`compacted` tells the rules the context was compacted. Each changes
only the :class:`~loopwarden.engine.state.RunState` it is given and returns a
:class:`Step`: what the caller answers, and what it has to do once the store has
committed the change (emit an event, end the run, write a log line). They read no clock
(``now`` is an argument) and do no I/O, so a store may run them twice for one update
(optimistic concurrency) without anything happening twice.

Precedence, before a call (docs/detection.md has the table):

1. A stopped run refuses every call.
2. The rules whose triggers hold for the call are asked, in order. Among OpenClaw's
   rules the first finding wins (OpenClaw's own rule order); among loopwarden's the most
   severe (a stop over a block over a warning, the earlier on a tie); loopwarden's
   replaces OpenClaw's only when it is more severe (a block over a warning, a stop over
   a block; never over the global circuit breaker).
3. The arbiters re-decide the winner, in order: the unknown-tool rule names a loop on a
   missing tool as one; blocks in a row turn a block into a stop; the post-compaction
   guard holds a stop back to a block while it is deciding the same loop itself.
4. A warning is delivered once per bucket of ``every``; a block records a veto that
   repeats the blocked pattern's outcome (so retrying climbs on), which every rule
   observes; a stop ends the run with the rule's name as its code.

After a call, every rule observes the outcome (volatile counters masked first, when the
call repeats a recent one whose outcome differs); an observer may end the run (the
post-compaction guard's abort).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..hashing import Outcome, error_text, failed, is_wait_command, masked_hash
from ..profiles.volatile import error_excerpt
from . import messages
from .compaction import COMPACTION_LOOP_PERSISTED, LogLine
from .detectors import (
    UNKNOWN_TOOL_REPEAT,
    Call,
    Detection,
    Observed,
    Plan,
    Trigger,
    Verdict,
    is_poll_name,
)
from .state import MAX_MASKED, RunState, Stop
from .waits import track_wait
from .window import RECENT_CALLS, RunWindow

if TYPE_CHECKING:
    from ..profiles import ProfileRegistry
    from ..profiles.volatile import VolatileMasker

__all__ = [
    "ALLOW",
    "QUIET",
    "Call",
    "Decision",
    "Done",
    "Step",
    "after",
    "before",
    "compacted",
    "decide",
    "observe",
    "resume",
]

Action = Literal["allow", "warn", "block"]
EventAction = Literal["warn", "block", "stop", "abort"]


class Done(NamedTuple):
    """A finished call, as the engine records it, with what its outcome came from (for
    masking, failures and waits: a :class:`~loopwarden.hashing.Source`)."""

    tool: str
    sig: str
    key: str
    call_id: str | None
    outcome: Outcome
    sourced: bool
    """``params``, ``result`` and ``error`` are known (``False``: only hashes are)."""
    params: Any
    result: Any
    error: Any
    profiles: ProfileRegistry
    masker: VolatileMasker | None
    """The tool's volatile-counter masker (``None``: its outcomes are not masked)."""


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


ALLOW = Decision("allow")


class Step(NamedTuple):
    """What one policy function decided, and what is left to do after the commit."""

    decision: Decision = ALLOW
    """The answer to the call (:func:`before`; ``allow`` for the others)."""
    event: EventAction | None = None
    """The event to emit: its detection is ``decision.detection``, or the stop's."""
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
    tally: tuple[int, int] | None = None
    """With a stop: the run's calls and refused calls so far (for the stop's report)."""


# The common answers, built once: most calls allocate no Step at all.
QUIET = Step()
_QUIET_FIRST = Step(started=True)
_NOT_RECORDED = Step(recorded=False)

# Trigger facts as plain ints: enum flag arithmetic runs Python code.
_ANY = int(Trigger.ANY)
_SEEN = int(Trigger.SEEN)
_PAIRED = int(Trigger.PAIRED)
_POLL = int(Trigger.POLL)
_FAILING = int(Trigger.FAILING)
_MISSING = int(Trigger.MISSING)
_SEVERITY = {"warning": 1, "critical": 2}


def _severity(det: Detection) -> tuple[bool, int]:
    return det.stop, _SEVERITY[det.level]


def _outranks(own: Detection, spec: Detection | None) -> bool:
    """loopwarden's finding replaces OpenClaw's only when it is more severe."""
    if spec is None:
        return True
    if spec.level == "critical":
        return own.stop and not spec.stop
    return own.level == "critical"


def decide(st: RunState, call: Call, arbitrate: bool = True) -> Detection | None:
    """The finding for a call about to run, after precedence (``None``: nothing to say).
    ``arbitrate=False`` leaves out the arbiters (the engine API's OpenClaw semantics)."""
    window = st.window
    sig, tool = call.sig, call.tool
    facts = _ANY
    if sig in window.sigs:
        facts |= _SEEN
    if sig == window.pp_other:
        facts |= _PAIRED
    if call.poll:
        facts |= _POLL
    if tool == st.failed_tool:
        facts |= _FAILING
    unregistered = call.unregistered
    if unregistered or (unregistered is not None and st.miss_count):
        facts |= _MISSING
    else:
        records = window.records
        if records:
            last = records[-1]
            if last.unknown_tool_name is not None and last.tool_name == tool:
                facts |= _MISSING
    asked = st.checks.get(facts)
    if asked is None:
        asked = st.checks_for(facts)
    if not asked:
        return None
    spec: Detection | None = None
    own: Detection | None = None
    for openclaw, check in asked:
        if openclaw:
            if spec is None:  # OpenClaw's rules: the first that matches decides
                spec = check(st, call)
            continue
        found = check(st, call)
        if found is not None and (own is None or _severity(found) > _severity(own)):
            own = found
    det = own if own is not None and _outranks(own, spec) else spec
    if det is None or not arbitrate:
        return det
    detectors = st.detectors
    for i in st.plan.arbiters:
        det = detectors[i].arbitrate(st, call, det)
    return det


def before(st: RunState, call: Call, now: float) -> Step:
    """Decide about a call at ``now``."""
    first = not st.started
    st.started = True
    st.updated = now
    st.calls += 1
    key = call.key
    if st.blocked:
        # A new call under a call id that was blocked before (callers need not
        # report blocked calls back, and scripted models reuse ids).
        st.blocked.pop(key, None)
    stopped = st.stopped
    if stopped is not None:  # refuse every call of a stopped run the same way
        st.mark_blocked(key)
        st.refused += 1
        return Step(
            Decision("block", stopped.message or messages.RUN_STOPPED),
            None,
            stopped,
            first,
            tally=(st.calls, st.refused),
        )
    if call.poll:
        st.note_poll(call.sig)
    det = decide(st, call)
    if det is not None and det.level == "critical":
        return _block(st, call, det, first, now)
    st.blocks = 0
    st.window.add(call.tool, call.sig, call.call_id, None, None, now)
    if det is None or not st.should_deliver(det.warning_key, det.count, det.every):
        return _QUIET_FIRST if first else QUIET
    st.add_note(key, det.message)
    return Step(Decision("warn", det.message, det), "warn", None, first)


def _block(st: RunState, call: Call, det: Detection, first: bool, now: float) -> Step:
    tool, sig = call.tool, call.sig
    # The veto repeats the blocked pattern's outcome, so retrying a blocked call keeps
    # climbing (and every rule sees the attempt).
    repeated = st.veto_outcome(sig, det)
    st.window.add(tool, sig, call.call_id, repeated, det.unknown_tool_name, now, True)
    st.mark_blocked(call.key)
    st.refused += 1
    if det.detector != UNKNOWN_TOOL_REPEAT:
        st.blocks += 1
    failing = tool == st.failed_tool
    verdict = observe(st, Observed(tool, sig, repeated, failing, None, False, True))
    log = None if verdict is None else verdict.log
    if verdict is not None and verdict.stop is not None:
        ended = verdict.stop
        stop = st.stopped = Stop(tool, ended.count, ended.detector, ended.message)
        tally = (st.calls, st.refused)
        return Step(
            Decision("block", ended.message, ended), "abort", stop, first, log=log, tally=tally
        )
    if det.stop:
        stop = st.stopped = Stop(tool, det.count, det.detector, det.log_message or det.message)
        tally = (st.calls, st.refused)
        return Step(Decision("block", det.message, det), "stop", stop, first, log=log, tally=tally)
    return Step(Decision("block", det.message, det), "block", None, first, log=log)


def observe(st: RunState, ev: Observed) -> Verdict | None:
    """Show every rule a finished (or blocked) call; the first verdict that ends the run
    wins, and the engine's facts move on."""
    verdict: Verdict | None = None
    for fn in st.observers:
        found = fn(st, ev)
        if found is not None and (verdict is None or verdict.stop is None):
            verdict = found
    failed_tool = st.failed_tool
    if st.failure_observers and (ev.is_error or failed_tool is not None):
        for fn in st.failure_observers:
            found = fn(st, ev)
            if found is not None and (verdict is None or verdict.stop is None):
                verdict = found
    if ev.is_error:
        st.failed_tool = ev.tool
    elif failed_tool is not None and (ev.veto or ev.outcome is not None or ev.tool != failed_tool):
        st.failed_tool = None
    return verdict


def quiet(
    st: RunState, sig: str, duration: float | None, params: object, read_command: bool
) -> bool:
    """Whether a finished call looked like a wait: it took ``waitSeconds`` or longer, it is
    a poll the run made, or (when ``read_command``) its command sleeps, watches or waits."""
    if duration is not None and duration >= st.plan.wait_seconds:
        return True
    if st.polls and sig in st.polls:
        return True
    return read_command and params is not None and is_wait_command(params)


def after(st: RunState, done: Done, now: float) -> Step:
    """Record a call's outcome (its hash ``None``: nothing to compare) at ``now``."""
    tool, sig, key, call_id, outcome, sourced, params, result, _, _, masker = done
    if st.blocked and st.blocked.pop(key, None) is not None:
        return _NOT_RECORDED  # a blocked call's answer is not an outcome
    note = st.notes.pop(key, None) if st.notes else None
    result_hash = outcome.hash
    plan: Plan = st.plan
    if result_hash is None:
        observe(st, Observed(tool, sig, None, False, None, False, False))
        return QUIET if note is None else Step(note=note)
    window = st.window
    stats = window.sigs.get(sig)
    # window.repeats_recent(sig), inline (every outcome passes here)
    recent = (
        plan.own
        and stats is not None
        and stats.hashed > 0
        and window.next_seq - stats.newest_seq <= RECENT_CALLS + 1
    )
    masked = None
    # Masked only when the call has an earlier, different outcome to compare with, and
    # (with loopwarden's rules) repeats a recent call: a counter loop repeats at once,
    # and masking a long output costs several times hashing it.
    if (
        sourced
        and masker is not None
        and (recent or not plan.own)
        and stats is not None
        and stats.hashed
        and stats.latest != result_hash
    ):
        memo = (tool, result_hash)
        masked = st.masked.get(memo)
        if masked is None:
            masked = masked_hash(done) or result_hash
            if len(st.masked) >= MAX_MASKED:
                st.masked.clear()
            st.masked[memo] = masked
        if masked == result_hash:
            masked = None
        else:
            result_hash = masked
    # A poll of a job that still runs: its timing words the poll's warning and block.
    if sourced and (
        (st.polls and sig in st.polls)
        or (sig in st.waits if st.waits else False)
        or (stats is not None and stats.latest == result_hash and is_poll_name(tool))
    ):
        track_wait(st, sig, result, done.error, now)
    unknown = outcome.unknown_tool_name
    rec = window.complete_pending(sig, call_id, result_hash, unknown)
    if rec is None:
        window.add(tool, sig, call_id, result_hash, unknown, now)
    is_error = outcome.is_error or unknown is not None
    error = None
    if sourced and plan.errors:
        # failed(result, is_error), its common answers inline: only a dict has exit codes
        if not is_error and type(result) is dict:
            is_error = failed(result, False)
        if is_error:
            error = error_excerpt(error_text(done))
    # A command is read for a wait only where it can matter: a call that repeats a recent
    # one, or a failure (a server that is still starting fails while the agent waits).
    waited = False
    if plan.own:  # quiet(), inline
        if (rec is not None and now - rec.timestamp >= plan.wait_seconds) or (
            st.polls and sig in st.polls
        ):
            waited = True
        elif (recent or is_error) and sourced and params is not None:
            waited = is_wait_command(params)
    # One Observed per run, refilled for each outcome (rules read it during observe only).
    ev = st.ev
    ev.tool, ev.sig, ev.outcome, ev.is_error, ev.error, ev.quiet = (
        tool,
        sig,
        result_hash,
        is_error,
        error,
        waited,
    )
    if is_error or st.failed_tool is not None:
        verdict = observe(st, ev)
    else:  # observe(), the common case inline: no failure to follow
        verdict = None
        for fn in st.observers:
            found = fn(st, ev)
            if found is not None and (verdict is None or verdict.stop is None):
                verdict = found
    if verdict is not None:
        ended = verdict.stop
        if ended is not None:
            stop = st.stopped = Stop(tool, ended.count, ended.detector, ended.message)
            event: EventAction = "abort" if ended.detector == COMPACTION_LOOP_PERSISTED else "stop"
            return Step(
                event=event,
                stop=stop,
                note=note,
                log=verdict.log,
                outcome_hash=masked,
                tally=(st.calls, st.refused),
            )
        if verdict.log is not None:
            return Step(note=note, log=verdict.log, outcome_hash=masked)
    if masked is not None:
        return Step(note=note, outcome_hash=masked)
    return QUIET if note is None else Step(note=note)


def compacted(st: RunState) -> LogLine | None:
    """The runner compacted the context and retries: tell the rules (the post-compaction
    guard arms)."""
    line = None
    for i in st.plan.compactors:
        found = st.detectors[i].compacted(st)
        if found is not None:
            line = found
    return line


def resume(st: RunState, choice: str, key: str | None, stop: Stop) -> Stop | None:
    """A person answered ``stop``, the stop of this run (``onStop: ask``); returns the stop
    that stands (``choice == "stop"``, or a stop no person may lift) or ``None``.

    ``allow_once``: the refused call (``key``) may run once; its outcome is recorded like
    any other, and the rules keep their counts, so the next repeat stops the run again.
    ``continue``: the run goes on from a clean slate (the window, every rule's state and
    the warnings delivered are forgotten; the post-compaction guard keeps its window), so
    a loop the model falls back into is caught again from the start.
    ``stop``: the run stays stopped, even where another answer (from another process)
    had lifted the stop meanwhile: the newest answer wins.
    """
    stopped = st.stopped
    if choice == "stop":
        if stopped is None:
            stopped = st.stopped = stop
        return stopped
    if stopped is None:
        return None
    if stopped.code == COMPACTION_LOOP_PERSISTED:
        return stopped
    st.stopped = None
    st.blocks = 0
    if choice == "allow_once":
        if key is not None:
            st.blocked.pop(key, None)
        return None
    st.window = RunWindow(st.window.capacity)
    st.detectors = dets = st.plan.fresh()
    st.observers = tuple(dets[i].observe for i in st.plan.observers)
    st.failure_observers = tuple(dets[i].observe for i in st.plan.failure_observers)
    st.dumpers = None  # bound to the rules just replaced
    st.checks.clear()
    st.buckets.clear()
    st.notes.clear()
    st.blocked.clear()
    st.masked.clear()
    st.waits.clear()
    st.polls.clear()
    st.miss_name, st.miss_count = None, 0
    st.failed_tool = None
    return None
