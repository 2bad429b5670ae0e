"""What the entry points of a :class:`~loopwarden.guard.RunGuard` share.

Every entry point hashes its inputs, runs one policy function of
:mod:`loopwarden.engine.runtime` in one store transaction, and acts on the
returned :class:`~loopwarden.engine.runtime.Step` only after the commit: the
run record, events, log lines and the exception that ends a run happen once,
even when a store runs the transaction twice. The sync and async twins differ
in the transaction alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._canonical import digest
from ._logging import logger, write_line
from .config import normalize_agent_id
from .engine.compaction import LogLine
from .engine.messages import fail_closed
from .engine.runtime import ALLOW, Call, Decision, Done, Step
from .engine.state import RunState
from .errors import LoopAbort
from .events import LoopEvent, emit
from .hashing import hash_outcome, is_known_poll
from .runrecord import CALL, COMPACTION, OUTCOME, RUN_START

if TYPE_CHECKING:
    from .guard import LoopGuard

__all__ = ["RunBase"]

T = TypeVar("T")
# Calls checked by before_call whose after_call has not come yet (blocked calls
# never get one): their args hashes are kept for at most this many.
_MAX_PENDING = 256


def _any_masked(profiles: Any) -> bool:
    """Some tool's profile turns the volatile-counter profile on by itself."""
    return any(p.volatile_counters for p in profiles.profiles.values())


class RunBase:
    """Identity, store access and post-commit effects of one run's guard."""

    def __init__(
        self,
        guard: LoopGuard,
        *,
        run_id: str,
        session_id: str | None,
        agent_id: str | None,
        tools: Iterable[str] | None,
    ) -> None:
        self.guard = guard
        self.run_id = run_id
        self.session_id = session_id
        self.agent_id = agent_id
        self.config = guard.config_for(agent_id)
        self.tools: frozenset[str] | None = frozenset(tools) if tools is not None else None
        self._off = self.config.enabled is False
        # Outcomes carry their source only when something reads it: masking or the extras.
        extras = self.config.extras
        self._extras = self.config.enabled is True and (
            guard.profiles.masker is not None
            or bool(guard.profiles.profiles and _any_masked(guard.profiles))
            or (extras is not None and extras.active)
        )
        self._store = guard.store
        self._profiles = guard.profiles
        self._record = guard.run_record
        self._clock = guard.clock
        agent_key = normalize_agent_id(agent_id) if agent_id is not None else ""
        self.key = f"{agent_key}\x1f{session_id or ''}\x1f{run_id}"
        # call key -> args hash, so each call's params are hashed once.
        self._sigs: dict[str, tuple[str, Any]] = {}
        self._maskers: dict[str, Any] = {}  # tool -> its masker (None: not masked)
        self._attach = guard._attach
        self.inline = self._attach is not None
        """True when the store never blocks, so the sync methods are safe on an event loop."""
        self._state: RunState | None = None

    # -- the store transaction ---------------------------------------------------
    def _transact(self, fn: Callable[..., T], *args: Any) -> T:
        """Apply ``fn(state, *args)`` to this run's state atomically."""
        state = self._state
        if state is None or state.detached:
            if self._attach is None:
                return self._store.transact(self.key, self.config, lambda st: fn(st, *args))
            state = self._state = self._attach(self.key, self.config)
        lock = state.lock
        if lock is None:  # a single-threaded store
            return fn(state, *args)
        with lock:
            return fn(state, *args)

    async def _atransact(self, fn: Callable[..., T], *args: Any) -> T:
        if self._attach is not None:
            return self._transact(fn, *args)
        return await self._store.atransact(self.key, self.config, lambda st: fn(st, *args))

    # -- inputs ------------------------------------------------------------------
    def _call(self, tool: Any, params: Any, call_id: Any) -> Call:
        """Tool name, args hash, poll flag, call key and call id of a call about to run."""
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        call_id = None if call_id is None else str(call_id)
        sig = f"{tool}:{digest(params)}"
        poll = is_known_poll(tool, params, self._profiles)
        ckey = call_id if call_id is not None else sig
        sigs = self._sigs  # so that after_call need not hash the params again
        if call_id is not None:
            sigs[ckey] = (sig, None)  # the params themselves are not kept (memory)
        else:  # kept to match after_call's params by identity
            sigs[f"{tool}\x1f{id(params)}"] = (sig, params)
        if len(sigs) > _MAX_PENDING:  # calls that never reported back; keep the newest half
            self._sigs = dict(list(sigs.items())[_MAX_PENDING // 2 :])
        return tool, sig, poll, ckey, call_id

    def _outcome(self, tool: Any, params: Any, call_id: Any, result: Any, error: Any) -> Done:
        """Tool name, args hash (cached by ``before_call``), call key, call id and outcome."""
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        call_id = None if call_id is None else str(call_id)
        cached = self._sigs.pop(call_id if call_id is not None else f"{tool}\x1f{id(params)}", None)
        if cached is not None and (call_id is not None or cached[1] is params):
            sig = cached[0]
        else:
            sig = f"{tool}:{digest(params)}"
        profiles = self._profiles
        outcome = hash_outcome(tool, params, result=result, error=error, profiles=profiles)
        if self._extras:
            maskers = self._maskers
            masker = maskers.get(tool, maskers)
            if masker is maskers:
                masker = profiles.masker_for(tool)
                if len(maskers) < 256:
                    maskers[tool] = masker
            src = (tool, params, result, error, profiles, masker)
        else:
            src = None
        return tool, sig, call_id if call_id is not None else sig, call_id, outcome, src

    # -- after the commit ----------------------------------------------------------
    def _decided(self, step: Step, call: Call, params: Any, now: float) -> Decision:
        """After the commit: the run record, the event, the stop."""
        tool, sig, poll, _, call_id = call
        stop = step.stop
        if stop is not None or step.decision.blocked:  # it will not run: no after_call
            self._sigs.pop(call_id if call_id is not None else f"{tool}\x1f{id(params)}", None)
        record = self._record
        if record is not None:
            if step.started:
                config = self.config.to_dict()
                record.line(RUN_START, now, self.run_id, self.session_id, self.agent_id, config)
            action = step.decision.action if stop is None else "stop"
            raw = record.raw(params)
            record.line(CALL, now, self.run_id, call_id, tool, sig, poll, raw, action)
        if step.event is not None:
            emit((self._event(step, tool, call_id, now),), self.guard.sinks)
        if stop is not None:
            raise stop.error()
        return step.decision

    def _recorded(self, step: Step, done: Done, raw: Any, now: float) -> str | None:
        """After the commit: the log line, the run record, the abort."""
        tool, sig, _, call_id, out, _src = done
        if step.log is not None:
            write_line(step.log)
        record = self._record
        if record is not None and step.recorded:
            # The hash the guard compared (masked, when it was), so a replay of the
            # record sees what the live guard saw.
            used = step.outcome_hash or out.hash
            details = (used, out.is_error, out.unknown_tool_name, record.raw(raw))
            record.line(OUTCOME, now, self.run_id, call_id, tool, sig, *details)
        stop = step.stop
        if stop is not None:
            emit((self._event(step, tool, call_id, now),), self.guard.sinks)
            raise stop.error()
        return step.note

    def _compacted(self, line: LogLine | None) -> None:
        if line is not None:
            write_line(line)
        if self._record is not None:
            self._record.line(COMPACTION, self._clock(), self.run_id)

    def _event(self, step: Step, tool: str, call_id: str | None, now: float) -> LoopEvent:
        det, stop = step.decision.detection, step.stop
        level: Literal["warning", "critical"]
        if det is not None:
            level, detector, count = det.level, det.detector, det.count
            paired, key = det.paired_tool, det.warning_key
            message = det.message if stop is None else stop.message
        else:  # an abort after an outcome: all it has is its stop
            assert stop is not None
            level, detector, count, paired, key = "critical", stop.detector, stop.count, None, None
            message = stop.message
        return LoopEvent(
            time=now,
            session_id=self.session_id,
            run_id=self.run_id,
            agent_id=self.agent_id,
            tool=tool,
            level=level,
            action=step.event or "abort",
            detector=detector,
            count=count,
            paired_tool=paired,
            warning_key=key,
            message=message,
            call_id=call_id,
        )

    def _failed(self, where: str, exc: Exception) -> Decision:
        if isinstance(exc, LoopAbort):
            raise exc
        logger.error(
            "loopwarden internal error in %s (run %s); %s the call",
            where,
            self.run_id,
            "blocking" if self.guard.fail_closed else "allowing",
            exc_info=exc,
        )
        if self.guard.fail_closed and where == "before_call":
            return Decision("block", fail_closed(type(exc).__name__))
        return ALLOW
