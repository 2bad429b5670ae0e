"""The runtime guard (SPEC section 6): what agent loops and integrations call.

:class:`LoopGuard` is created once (config, store, event sinks); each agent run
gets a :class:`RunGuard` from :meth:`LoopGuard.run`. Around every tool call::

    decision = run.before_call(tool, params, call_id=...)   # may raise CircuitBreakerTripped
    if decision.blocked:
        result = decision.message                            # tell the model; do not execute
    else:
        result = execute(...)
        note = run.after_call(tool, params, call_id=..., result=result)
        if note:                                             # may raise CompactionLoopPersisted
            result = f"{result}\\n\\n{note}"

Escalation: warn → block → stop the run. Internal failures never reach the
agent: they are logged and the call is allowed (or blocked, when fail-closed).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ._canonical import digest
from ._window import Record
from .config import ConfigSource, LoopDetectionConfig, load_config, normalize_agent_id
from .detection import GLOBAL_CIRCUIT_BREAKER, UNKNOWN_TOOL_REPEAT, Detection, detect_in_window
from .errors import CircuitBreakerTripped, CompactionLoopPersisted, LoopAbort
from .events import EventSink, JsonlRunRecord, LoopEvent, emit
from .hashing import MISSING, Outcome, hash_outcome, is_known_poll
from .history import normalize_run_id
from .profiles import ProfileRegistry
from .state import RunState
from .stores import InProcess, MemoryStore, Store, store_from_url

__all__ = ["Decision", "LoopGuard", "RunGuard", "block_result"]

from ._logging import logger

Action = Literal["allow", "warn", "block"]
T = TypeVar("T")


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


_ALLOW = Decision("allow")


def _unknown_guard_message(name: str, count: int) -> str:
    return (
        f"CRITICAL: loopwarden blocked this call: there is no tool named {name!r}, and it "
        f"has been attempted {count} times in a row. Do not call it again; continue with "
        "the tools that exist, or answer without it."
    )


def _stop_message(tool: str, count: int, detector: str) -> str:
    if detector == UNKNOWN_TOOL_REPEAT:
        return (
            f"CRITICAL: loopwarden stopped this run: the unavailable tool {tool!r} was "
            f"attempted {count} times in a row despite being blocked."
        )
    return (
        f"CRITICAL: the loopwarden global circuit breaker stopped this run: {tool} returned "
        f"identical no-progress outcomes {count} times in a row for identical arguments."
    )


class LoopGuard:
    """Loop detection for an agent application: config, state store and event sinks.

    Args:
        config: a whole config (path to a JSON5/JSON file, mapping in OpenClaw's
            layout, :class:`~loopwarden.config.Config`) or a single
            :class:`~loopwarden.config.LoopDetectionConfig`. ``None`` uses defaults.
        agent_id: the agent whose per-agent block applies (runs may override it).
        store: a :class:`~loopwarden.stores.Store` or a store URL; defaults to the
            config's ``loopwarden.store`` or an in-memory store.
        on_event: callbacks that receive every :class:`~loopwarden.events.LoopEvent`.
        fail_closed: on an internal error, block the call instead of allowing it.
        run_record: path of a JSONL run record (calls, outcomes, events); ``False``
            turns off a record the config asks for.
        log_params: include raw params and results in the run record.
    """

    def __init__(
        self,
        config: ConfigSource | LoopDetectionConfig = None,
        *,
        agent_id: str | None = None,
        store: Store | str | None = None,
        on_event: EventSink | Sequence[EventSink] | None = None,
        fail_closed: bool | None = None,
        run_record: str | os.PathLike[str] | Literal[False] | None = None,
        log_params: bool | None = None,
        session_id: str | None = None,
    ) -> None:
        if isinstance(config, LoopDetectionConfig):
            self._fixed: LoopDetectionConfig | None = config
            self.config = load_config(None)
        else:
            self._fixed = None
            self.config = load_config(config)
        settings = self.config.settings
        self.agent_id = agent_id
        self.session_id = session_id
        self.profiles: ProfileRegistry = settings.profile_registry()
        self.fail_closed = (
            fail_closed if fail_closed is not None else settings.fail_mode == "closed"
        )
        if store is None:
            store = settings.store or MemoryStore(ttl_seconds=settings.state_ttl_seconds)
        if isinstance(store, str):
            store = store_from_url(store, ttl_seconds=settings.state_ttl_seconds)
        self.store: Store = store
        sinks: list[EventSink] = []
        if callable(on_event):
            sinks.append(on_event)
        elif on_event is not None:
            sinks.extend(on_event)
        record_path = run_record if run_record is not None else settings.run_record
        self.run_record: JsonlRunRecord | None = None
        if record_path is not None and record_path is not False:
            self.run_record = JsonlRunRecord(
                record_path,
                log_params=log_params if log_params is not None else settings.log_params,
            )
            sinks.append(self.run_record)
        self.sinks: tuple[EventSink, ...] = tuple(sinks)

    def config_for(self, agent_id: str | None = None) -> LoopDetectionConfig:
        """The effective loop-detection config of an agent."""
        if self._fixed is not None:
            return self._fixed
        return self.config.for_agent(agent_id if agent_id is not None else self.agent_id)

    def run(
        self,
        run_id: str | None = None,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        tools: Iterable[str] | None = None,
    ) -> RunGuard:
        """A guard for one agent run. ``tools`` are the registered tool names, if known."""
        return RunGuard(
            self,
            run_id=normalize_run_id(run_id) or uuid.uuid4().hex,
            session_id=session_id if session_id is not None else self.session_id,
            agent_id=agent_id if agent_id is not None else self.agent_id,
            tools=tools,
        )

    def close(self) -> None:
        self.store.close()
        if self.run_record is not None:
            self.run_record.close()


class RunGuard:
    """The guard of one agent run; create it with :meth:`LoopGuard.run`.

    Thread-safe. ``before_call``/``after_call``/``on_compaction`` have async
    twins (``abefore_call``...) for frameworks that run tools on an event loop.
    """

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
        self._store = guard.store
        self._profiles = guard.profiles
        self._record = guard.run_record
        agent_key = normalize_agent_id(agent_id) if agent_id is not None else ""
        self.key = f"{agent_key}\x1f{session_id or ''}\x1f{run_id}"
        # call key -> args hash, so each call's params are hashed once.
        self._sigs: dict[str, tuple[str, Any]] = {}
        # In-process stores hand out the live state object: no per-call lookup.
        self.inline = isinstance(self._store, InProcess)
        """True when the store never blocks, so the sync methods are safe on an event loop."""
        self._attach = self._store.attach if isinstance(self._store, InProcess) else None
        self._state: RunState | None = None

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
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

    async def _arun(self, fn: Callable[..., T], *args: Any) -> T:
        if self._attach is not None:
            return self._run(fn, *args)
        return await self._store.atransact(self.key, self.config, lambda st: fn(st, *args))

    def set_tools(self, tools: Iterable[str] | None) -> None:
        """Set the registered tool names used by the unknown-tool guard."""
        self.tools = frozenset(tools) if tools is not None else None

    def __enter__(self) -> RunGuard:  # noqa: PYI034 - RunGuard is not meant to be subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def end(self) -> None:
        """The run is over: forget its state (and mark its end in the run record)."""
        try:
            self._store.delete(self.key)
        except Exception:
            logger.exception("loopwarden could not delete state of run %s", self.run_id)
        self._state = None
        if self._record is not None:
            self._record.write({"type": "run_end", "ts": time.time(), "run_id": self.run_id})

    # -- before a call -----------------------------------------------------
    def _prepare(
        self, tool: Any, params: Any, call_id: Any
    ) -> tuple[str, str, bool, str, str | None]:
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        call_id = None if call_id is None else str(call_id)
        sig = f"{tool}:{digest(params)}"
        poll = is_known_poll(tool, params, self._profiles)
        ckey = call_id if call_id is not None else sig
        sigs = self._sigs
        sigs[ckey if call_id is not None else f"{tool}\x1f{id(params)}"] = (sig, params)
        if len(sigs) > 256:  # calls that never reported back; keep the newest half
            self._sigs = dict(list(sigs.items())[128:])
        return tool, sig, poll, ckey, call_id

    def before_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        """Check a call the model wants to make. Raises :class:`CircuitBreakerTripped` to stop."""
        if self._off:
            return _ALLOW
        try:
            tool, sig, poll, ckey, cid = self._prepare(tool, params, call_id)
            unknown = self.tools is not None and tool not in self.tools
            outcome = self._run(self._before, tool, sig, poll, ckey, cid, unknown)
        except Exception as exc:
            return self._failed("before_call", exc)
        return self._finish_before(outcome, tool, sig, cid, params, poll)

    async def abefore_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        """Async form of :meth:`before_call`."""
        if self._off:
            return _ALLOW
        try:
            tool, sig, poll, ckey, cid = self._prepare(tool, params, call_id)
            unknown = self.tools is not None and tool not in self.tools
            outcome = await self._arun(self._before, tool, sig, poll, ckey, cid, unknown)
        except Exception as exc:
            return self._failed("before_call", exc)
        return self._finish_before(outcome, tool, sig, cid, params, poll)

    def before_call_hashed(
        self, tool: str, args_hash: str, *, call_id: str | None = None, poll: bool = False
    ) -> Decision:
        """:meth:`before_call` for a call known only by its args hash (trace replay)."""
        if self._off:
            return _ALLOW
        try:
            ckey = call_id if call_id is not None else args_hash
            unknown = self.tools is not None and tool not in self.tools
            outcome = self._run(self._before, tool, args_hash, poll, ckey, call_id, unknown)
        except Exception as exc:
            return self._failed("before_call", exc)
        return self._finish_before(outcome, tool, args_hash, call_id, None, poll)

    def _finish_before(
        self,
        outcome: tuple[Decision, LoopEvent | None, LoopAbort | None, bool],
        tool: str,
        sig: str,
        call_id: str | None,
        params: Any,
        poll: bool,
    ) -> Decision:
        decision, event, abort, first = outcome
        record = self._record
        if record is None and event is None and abort is None:
            return decision
        if record is not None:
            if first:
                self._write_start(record)
            record.write(
                {
                    "type": "call",
                    "ts": time.time(),
                    "run_id": self.run_id,
                    "call_id": call_id,
                    "tool": tool,
                    "args_hash": sig,
                    "poll": poll,
                    "params": record.raw(params),
                    "decision": decision.action if abort is None else "stop",
                }
            )
        if event is not None:
            emit((event,), self.guard.sinks)
        if abort is not None:
            raise abort
        return decision

    def _write_start(self, record: JsonlRunRecord) -> None:
        record.write(
            {
                "type": "run_start",
                "ts": time.time(),
                "run_id": self.run_id,
                "session_id": self.session_id,
                "agent_id": self.agent_id,
                "config": self.config.to_dict(),
            }
        )

    def _before(
        self,
        st: RunState,
        tool: str,
        sig: str,
        poll: bool,
        ckey: str,
        call_id: str | None,
        unknown: bool,
    ) -> tuple[Decision, LoopEvent | None, LoopAbort | None, bool]:
        first = not st.started
        st.started = True
        st.updated = now = time.time()
        cfg = self.config
        window = st.window
        if st.blocked:
            # A new call under a call id that was blocked before (callers need not
            # report blocked calls back, and scripted models reuse ids).
            st.blocked.pop(ckey, None)
        if st.stopped is not None:
            return self._stopped_again(st, tool, ckey, first)
        if unknown or self.tools is not None:
            det = self._unknown_guard(st, tool, unknown)
            if det is not None:
                return self._block(st, det, tool, sig, ckey, call_id, first)
        if cfg.enabled is True:
            det = detect_in_window(window, tool, sig, poll, cfg)
            if det is not None:
                if det.level == "critical":
                    return self._block(st, det, tool, sig, ckey, call_id, first)
                window.append(Record(tool, sig, call_id, None, None, None, now))
                if not st.should_deliver(det.warning_key, det.count, cfg.warning_threshold):
                    return _ALLOW, None, None, first
                st.add_note(ckey, det.message)
                event = self._event("warn", det, tool, call_id)
                return Decision("warn", det.message, det), event, None, first
        window.append(Record(tool, sig, call_id, None, None, None, now))
        return _ALLOW, None, None, first

    def _unknown_guard(self, st: RunState, tool: str, unknown: bool) -> Detection | None:
        """SPEC 6.4: count consecutive misses of an unregistered name; block past the threshold."""
        if not unknown:
            st.miss_name, st.miss_count = None, 0
            return None
        prior = st.miss_count if st.miss_name == tool else 0
        st.miss_name, st.miss_count = tool, prior + 1
        threshold = self.config.unknown_tool_threshold
        if prior < threshold:
            return None
        return Detection(
            "critical",
            UNKNOWN_TOOL_REPEAT,
            prior,
            _unknown_guard_message(tool, prior),
            f"unknown-tool:{tool}:{tool.lower()}",
            tool_name=tool,
            unknown_tool_name=tool.lower(),
        )

    def _escalates(self, det: Detection) -> bool:
        """Blocks that end the run: the global breaker, and unknown-tool retries that reach it."""
        if det.detector == GLOBAL_CIRCUIT_BREAKER:
            return True
        cfg = self.config
        return det.detector == UNKNOWN_TOOL_REPEAT and det.count >= max(
            cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold
        )

    def _block(
        self,
        st: RunState,
        det: Detection,
        tool: str,
        sig: str,
        ckey: str,
        call_id: str | None,
        first: bool,
    ) -> tuple[Decision, LoopEvent | None, LoopAbort | None, bool]:
        window = st.window
        # The veto repeats the blocked pattern's outcome, so retrying a blocked
        # call keeps climbing toward the circuit breaker (SPEC 6.2).
        repeated = det.latest_result_hash or window.no_progress(sig)[1] or "veto"
        window.append(
            Record(tool, sig, call_id, None, repeated, det.unknown_tool_name, time.time(), True)
        )
        st.mark_blocked(ckey)
        if not self._escalates(det):
            event = self._event("block", det, tool, call_id)
            return Decision("block", det.message, det), event, None, first
        message = _stop_message(det.unknown_tool_name or tool, det.count, det.detector)
        st.stopped = {
            "tool": tool,
            "count": det.count,
            "detector": det.detector,
            "message": message,
        }
        event = self._event("stop", det, tool, call_id, message)
        abort = CircuitBreakerTripped(
            message, tool_name=tool, count=det.count, detector=det.detector
        )
        return Decision("block", message, det), event, abort, first

    def _stopped_again(
        self, st: RunState, tool: str, ckey: str, first: bool
    ) -> tuple[Decision, LoopEvent | None, LoopAbort | None, bool]:
        """A call after the run was stopped: refuse it again the same way."""
        stopped = st.stopped or {}
        st.mark_blocked(ckey)
        message = str(stopped.get("message", "loopwarden stopped this run"))
        cls = (
            CompactionLoopPersisted
            if stopped.get("detector") == CompactionLoopPersisted.code
            else CircuitBreakerTripped
        )
        abort = cls(
            message,
            tool_name=str(stopped.get("tool", tool)),
            count=int(stopped.get("count", 0)),
            detector=str(stopped.get("detector", cls.code)),
        )
        return Decision("block", message), None, abort, first

    def _event(
        self,
        action: Literal["warn", "block", "stop", "abort"],
        det: Detection,
        tool: str,
        call_id: str | None,
        message: str | None = None,
    ) -> LoopEvent:
        return LoopEvent(
            time=time.time(),
            session_id=self.session_id,
            run_id=self.run_id,
            agent_id=self.agent_id,
            tool=tool,
            level=det.level,
            action=action,
            detector=det.detector,
            count=det.count,
            paired_tool=det.paired_tool,
            warning_key=det.warning_key,
            message=message or det.message,
            call_id=call_id,
        )

    # -- after a call --------------------------------------------------------
    def _prepare_outcome(
        self, tool: Any, params: Any, call_id: Any, result: Any, error: Any
    ) -> tuple[str, str, str, str | None, Outcome]:
        """Tool name, args hash (cached from ``before_call``), call key, call id, outcome."""
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        call_id = None if call_id is None else str(call_id)
        cached = self._sigs.pop(call_id if call_id is not None else f"{tool}\x1f{id(params)}", None)
        if cached is not None and (call_id is not None or cached[1] is params):
            sig = cached[0]
        else:
            sig = f"{tool}:{digest(params)}"
        outcome = hash_outcome(tool, params, result=result, error=error, profiles=self._profiles)
        return tool, sig, call_id if call_id is not None else sig, call_id, outcome

    def after_call(
        self,
        tool: str,
        params: Any,
        call_id: str | None = None,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> str | None:
        """Record a call's outcome; returns the warning note to append to its result, if any.

        Raises :class:`CompactionLoopPersisted` when the post-compaction guard aborts.
        """
        if self._off:
            return None
        try:
            tool, sig, ckey, cid, outcome = self._prepare_outcome(
                tool, params, call_id, result, error
            )
            done = self._run(self._after, tool, sig, ckey, cid, outcome)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        return self._finish_after(done, tool, sig, cid, outcome, result, error)

    async def aafter_call(
        self,
        tool: str,
        params: Any,
        call_id: str | None = None,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> str | None:
        """Async form of :meth:`after_call`."""
        if self._off:
            return None
        try:
            tool, sig, ckey, cid, outcome = self._prepare_outcome(
                tool, params, call_id, result, error
            )
            done = await self._arun(self._after, tool, sig, ckey, cid, outcome)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        return self._finish_after(done, tool, sig, cid, outcome, result, error)

    def after_call_hashed(
        self,
        tool: str,
        args_hash: str,
        outcome_hash: str | None,
        *,
        call_id: str | None = None,
        unknown_tool_name: str | None = None,
        is_error: bool = False,
    ) -> str | None:
        """:meth:`after_call` with precomputed hashes (trace replay)."""
        if self._off:
            return None
        outcome = Outcome(outcome_hash, unknown_tool_name, is_error)
        ckey = call_id if call_id is not None else args_hash
        try:
            done = self._run(self._after, tool, args_hash, ckey, call_id, outcome)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        return self._finish_after(done, tool, args_hash, call_id, outcome, None, None)

    def _after(
        self, st: RunState, tool: str, sig: str, ckey: str, call_id: str | None, outcome: Outcome
    ) -> tuple[str | None, LoopAbort | None, bool]:
        if st.blocked and st.blocked.pop(ckey, None) is not None:
            return None, None, False  # a blocked call's answer is not an outcome
        note = st.notes.pop(ckey, None) if st.notes else None
        h = outcome.hash
        if h is None:
            return note, None, True
        window = st.window
        rec = window.find_pending(sig, call_id)
        if rec is not None:
            window.complete(rec, h, outcome.unknown_tool_name)
        else:
            window.append(
                Record(tool, sig, call_id, None, h, outcome.unknown_tool_name, time.time())
            )
        if st.stopped is None and st.guard.enabled:
            verdict = st.guard.observe(tool, sig, h)
            if verdict.should_abort:
                message = verdict.message or ""
                st.stopped = {
                    "tool": tool,
                    "count": verdict.count,
                    "detector": CompactionLoopPersisted.code,
                    "message": message,
                }
                abort = CompactionLoopPersisted(message, tool_name=tool, count=verdict.count)
                return note, abort, True
        return note, None, True

    def _finish_after(
        self,
        done: tuple[str | None, LoopAbort | None, bool],
        tool: str,
        sig: str,
        call_id: str | None,
        outcome: Outcome,
        result: Any,
        error: Any,
    ) -> str | None:
        note, abort, recorded = done
        record = self._record
        if record is None and abort is None:
            return note
        if record is not None and recorded:
            record.write(
                {
                    "type": "outcome",
                    "ts": time.time(),
                    "run_id": self.run_id,
                    "call_id": call_id,
                    "tool": tool,
                    "args_hash": sig,
                    "outcome_hash": outcome.hash,
                    "is_error": outcome.is_error,
                    "unknown_tool": outcome.unknown_tool_name,
                    "result": record.raw(error if outcome.is_error else result),
                }
            )
        if abort is not None:
            event = LoopEvent(
                time=time.time(),
                session_id=self.session_id,
                run_id=self.run_id,
                agent_id=self.agent_id,
                tool=tool,
                level="critical",
                action="abort",
                detector=abort.code,
                count=abort.count,
                paired_tool=None,
                warning_key=None,
                message=abort.message,
                call_id=call_id,
            )
            emit((event,), self.guard.sinks)
            raise abort
        return note

    # -- compaction ------------------------------------------------------------
    def on_compaction(self) -> None:
        """The runner compacted the context and is retrying: arm the post-compaction guard."""
        if self._off:
            return
        try:
            self._run(_arm)
        except Exception as exc:
            self._failed("on_compaction", exc)
            return
        self._write_compaction()

    async def aon_compaction(self) -> None:
        """Async form of :meth:`on_compaction`."""
        if self._off:
            return
        try:
            await self._arun(_arm)
        except Exception as exc:
            self._failed("on_compaction", exc)
            return
        self._write_compaction()

    def _write_compaction(self) -> None:
        if self._record is not None:
            self._record.write({"type": "compaction", "ts": time.time(), "run_id": self.run_id})

    # -- failure policy ----------------------------------------------------------
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
            return Decision(
                "block",
                "loopwarden could not check this call and is configured to fail closed, so the "
                f"call was not run ({type(exc).__name__}). Try again later or report the problem.",
            )
        return _ALLOW

    # -- introspection -----------------------------------------------------------
    def snapshot(self) -> Mapping[str, Any]:
        """A summary of this run's state (for debugging and tests)."""

        def read(st: RunState) -> dict[str, Any]:
            return {
                "records": [r.to_dict() for r in st.window],
                "stopped": st.stopped,
                "post_compaction_armed": st.guard.armed,
                "remaining_attempts": st.guard.remaining_attempts,
                "unknown_misses": st.miss_count,
            }

        return self._run(read)


def _arm(st: RunState) -> None:
    st.guard.arm()
