"""The runtime guard: what agent loops and integrations call.

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

Escalation: warn → block → stop the run. The policy lives in
:mod:`loopwarden.engine.runtime`; this module is its driver: it hashes the
inputs, runs the policy inside one store transaction, and only after the
commit writes the run record, emits events, logs and raises. Internal
failures never reach the agent: they are logged and the call is allowed (or
blocked, when fail-closed).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._canonical import digest
from ._logging import logger, write_line
from ._util import MAX_NAME_CHARS, guard_text
from .config import ConfigSource, LoopDetectionConfig, load_config, log_repairs, normalize_agent_id
from .engine.compaction import LogLine
from .engine.detectors import Call
from .engine.history import normalize_run_id
from .engine.messages import fail_closed
from .engine.runtime import ALLOW, QUIET, Decision, Done, Step, after, before, compacted, resume
from .engine.state import RunState, Stop
from .errors import LoopAbort
from .events import EventSink, LoopEvent, emit
from .hashing import MISSING, Outcome, ToolOutcome, hash_outcome, is_known_poll
from .profiles import ProfileRegistry
from .runrecord import CALL, COMPACTION, OUTCOME, RUN_END, RUN_START, JsonlRunRecord
from .stopping import Choice, StopReport, parse_choice, person_note
from .stores import InProcess, MemoryStore, Store, store_from_url

if TYPE_CHECKING:
    from .telemetry import Telemetry

__all__ = ["Decision", "LoopGuard", "RunGuard"]

Clock = Callable[[], float]
T = TypeVar("T")
# Calls checked by before_call whose after_call has not come yet (blocked calls
# never get one): their args hashes are kept for at most this many.
_MAX_PENDING = 256
# Built for every call: from a tuple, without the Python frame of a NamedTuple's __new__.
_new_done: Callable[[tuple[Any, ...]], Done] = functools.partial(tuple.__new__, Done)
_new_outcome: Callable[[tuple[Any, ...]], Outcome] = functools.partial(tuple.__new__, Outcome)
_new = object.__new__


def _any_masked(profiles: ProfileRegistry) -> bool:
    """Some tool's profile turns the volatile-counter profile on by itself."""
    return any(p.volatile_counters for p in profiles.profiles.values())


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
        clock: seconds since the epoch (default :func:`time.time`); tests pass a
            :class:`~loopwarden.testing.FakeClock` to pin time.
        telemetry: OpenTelemetry span events and metrics (``loopwarden[otel]``):
            ``True``, a ready :class:`~loopwarden.telemetry.Telemetry`, or ``False``;
            ``None`` follows the config's ``loopwarden.telemetry`` (off by default).
            See ``docs/observability.md``.
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
        clock: Clock = time.time,
        telemetry: bool | Telemetry | None = None,
    ) -> None:
        if isinstance(config, LoopDetectionConfig):
            self._fixed: LoopDetectionConfig | None = config
            self.config = load_config(None)
            log_repairs(config.repairs)
        else:
            self._fixed = None
            self.config = load_config(config)
        settings = self.config.settings
        self._with_rules: dict[int, tuple[LoopDetectionConfig, LoopDetectionConfig]] = {}
        self.agent_id = agent_id
        self.session_id = session_id
        self.clock = clock
        self.profiles: ProfileRegistry = settings.profile_registry()
        self.fail_closed = (
            fail_closed if fail_closed is not None else settings.fail_mode == "closed"
        )
        if store is None:
            store = settings.store or MemoryStore(
                ttl_seconds=settings.state_ttl_seconds, clock=clock
            )
        if isinstance(store, str):
            store = store_from_url(store, ttl_seconds=settings.state_ttl_seconds)
        self.store: Store = store
        # Capabilities are checked here, once: an in-process store hands out live
        # state, so runs skip the per-call store lookup.
        self._attach = store.attach if isinstance(store, InProcess) else None
        sinks: list[EventSink] = []
        if callable(on_event):
            sinks.append(on_event)
        elif on_event is not None:
            sinks.extend(on_event)
        # Off (the default) imports nothing: runs are plain RunGuards.
        self.telemetry: Telemetry | None = None
        self._run_class: type[RunGuard] = RunGuard
        if telemetry is None:
            telemetry = settings.telemetry.enabled
        if telemetry is not False:
            from .telemetry import resolve_telemetry

            self.telemetry = resolve_telemetry(telemetry, settings.telemetry)
            if self.telemetry is not None:
                self._run_class = _traced_run()
                self._open_calls: dict[tuple[str, Any], float | None] = {}
                sinks.append(self.telemetry.on_event)
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
        """The effective loop-detection config of an agent, with the ``loopwarden`` block's
        rules (unless the config chose its own)."""
        if self._fixed is not None:
            cfg = self._fixed
        else:
            cfg = self.config.for_agent(agent_id if agent_id is not None else self.agent_id)
        if cfg.rules is not None:
            return cfg
        with_rules = self._with_rules.get(id(cfg))
        if with_rules is None or with_rules[0] is not cfg:
            with_rules = (cfg, dataclasses.replace(cfg, rules=self.config.settings.rules))
            if len(self._with_rules) > 256:
                self._with_rules.clear()
            self._with_rules[id(cfg)] = with_rules
        return with_rules[1]

    def run(
        self,
        run_id: str | None = None,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        tools: Iterable[str] | None = None,
    ) -> RunGuard:
        """A guard for one agent run. ``tools`` are the registered tool names, if known."""
        return self._run_class(
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

    Every entry point hashes its inputs, runs one policy function of
    :mod:`loopwarden.engine.runtime` in one store transaction, and acts on the
    returned :class:`~loopwarden.engine.runtime.Step` only after the commit: the
    run record, events, log lines and the exception that ends a run happen once,
    even when a store runs the transaction twice. The sync and async twins differ
    in the transaction alone.
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
        # Text from the model or the agent is made safe once, here and in _call/_outcome:
        # valid UTF-8 for every store and encoder, bounded in length (_util.guard_text).
        self.guard = guard
        self.run_id: str = _id(run_id)
        self.session_id: str | None = _id(session_id)
        self.agent_id: str | None = _id(agent_id)
        self.config = guard.config_for(agent_id)
        self.tools: frozenset[str] | None = _names(tools)
        self._off = self.config.enabled is False
        # Outcomes carry their source only when something reads it: masking or the rules.
        rules = self.config.rules
        self._sourced = self.config.enabled is True and (
            guard.profiles.masker is not None
            or bool(guard.profiles.profiles and _any_masked(guard.profiles))
            or rules is not None
        )
        self._store = guard.store
        self._profiles = guard.profiles
        self._record = guard.run_record
        self._clock = guard.clock
        agent_key = normalize_agent_id(agent_id) if agent_id is not None else ""
        self.key = f"{agent_key}\x1f{self.session_id or ''}\x1f{self.run_id}"
        # call key -> args hash, so each call's params are hashed once.
        self._sigs: dict[str, str | tuple[str, Any]] = {}
        """Pending calls' signatures: by call id, or (signature, params) by params identity."""
        self._maskers: dict[str, Any] = {}  # tool -> its masker (None: not masked)
        self._polls: dict[str, bool] = {}  # tool -> a known poll (not for `process`)
        self._attach = guard._attach
        self.inline = self._attach is not None
        """True when the store never blocks, so the sync methods are safe on an event loop."""
        self._state: RunState | None = None

    def set_tools(self, tools: Iterable[str] | None) -> None:
        """Set the registered tool names used by the unknown-tool guard."""
        self.tools = _names(tools)

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
            self._record.line(RUN_END, self._clock(), self.run_id)

    # -- the entry points ------------------------------------------------------------
    def before_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        """Check a call the model wants to make. Raises :class:`CircuitBreakerTripped` to stop."""
        if self._off:
            return ALLOW
        try:
            call = self._call(tool, params, call_id)
            now = self._clock()
            step = self._transact(before, call, now)
        except Exception as exc:
            return self._failed("before_call", exc)
        if step is QUIET and self._record is None:  # most calls: nothing to do after commit
            return ALLOW
        return self._decided(step, call, params, now)

    async def abefore_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        """Async form of :meth:`before_call`."""
        if self._off:
            return ALLOW
        try:
            call = self._call(tool, params, call_id)
            now = self._clock()
            step = await self._atransact(before, call, now)
        except Exception as exc:
            return self._failed("before_call", exc)
        return self._decided(step, call, params, now)

    def before_call_hashed(
        self, tool: str, args_hash: str, *, call_id: str | None = None, poll: bool = False
    ) -> Decision:
        """:meth:`before_call` for a call known only by its args hash (trace replay)."""
        if self._off:
            return ALLOW
        if len(tool) > MAX_NAME_CHARS or not tool.isascii():
            tool = guard_text(tool)
        if call_id is not None and (len(call_id) > MAX_NAME_CHARS or not call_id.isascii()):
            call_id = guard_text(call_id)
        key = call_id if call_id is not None else args_hash
        tools = self.tools
        call: Call = _new(Call)  # field by field, as in _call: no __init__ frame
        call.tool, call.sig, call.poll, call.key, call.call_id = tool, args_hash, poll, key, call_id
        call.unregistered = None if tools is None else tool not in tools
        try:
            now = self._clock()
            state = self._state
            if state is not None and state.lock is None and not state.detached:
                step = before(state, call, now)  # _transact on a one-thread store (replay's)
            else:
                step = self._transact(before, call, now)
        except Exception as exc:
            return self._failed("before_call", exc)
        if step is QUIET and self._record is None:  # most calls: nothing to do after commit
            return ALLOW
        return self._decided(step, call, None, now)

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
            done = self._outcome(tool, params, call_id, result, error)
            now = self._clock()
            step = self._transact(after, done, now)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        if step is QUIET and self._record is None:
            return None
        return self._recorded(step, done, _raw(done, result, error), now)

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
            done = self._outcome(tool, params, call_id, result, error)
            now = self._clock()
            step = await self._atransact(after, done, now)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        return self._recorded(step, done, _raw(done, result, error), now)

    def after_call_hashed(
        self,
        tool: str,
        args_hash: str,
        outcome_hash: str | None,
        *,
        call_id: str | None = None,
        unknown_tool_name: str | None = None,
        is_error: bool = False,
        params: Any = MISSING,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> str | None:
        """:meth:`after_call` with precomputed hashes (trace replay).

        ``params``, ``result`` and ``error``, when the caller has them, let the guard
        mask volatile counters and see failures and waits as :meth:`after_call` does
        (read during the call only, never stored).
        """
        if self._off:
            return None
        if len(tool) > MAX_NAME_CHARS or not tool.isascii():
            tool = guard_text(tool)
        if call_id is not None and (len(call_id) > MAX_NAME_CHARS or not call_id.isascii()):
            call_id = guard_text(call_id)
        if unknown_tool_name is not None:
            unknown_tool_name = guard_text(unknown_tool_name)
        outcome = _new_outcome((outcome_hash, unknown_tool_name, is_error))
        profiles = self._profiles
        sourced = self._sourced and (result is not MISSING or error is not MISSING)
        masker = None
        if sourced:  # the tool's masker, looked up once per tool (as in _outcome)
            maskers = self._maskers
            masker = maskers.get(tool, maskers)
            if masker is maskers:
                masker = profiles.masker_for(tool)
                if len(maskers) < 256:
                    maskers[tool] = masker
        params = None if params is MISSING else params
        key = call_id if call_id is not None else args_hash
        done = _new_done(
            (
                tool,
                args_hash,
                key,
                call_id,
                outcome,
                sourced,
                params,
                result,
                error,
                profiles,
                masker,
            )
        )
        try:
            now = self._clock()
            state = self._state
            if state is not None and state.lock is None and not state.detached:
                step = after(state, done, now)  # _transact on a one-thread store (replay's)
            else:
                step = self._transact(after, done, now)
        except Exception as exc:
            self._failed("after_call", exc)
            return None
        if step is QUIET and self._record is None:
            return None
        return self._recorded(step, done, None, now)

    def on_compaction(self) -> None:
        """The runner compacted the context and is retrying: arm the post-compaction guard."""
        if self._off:
            return
        try:
            line = self._transact(compacted)
        except Exception as exc:
            self._failed("on_compaction", exc)
            return
        self._compacted(line)

    async def aon_compaction(self) -> None:
        """Async form of :meth:`on_compaction`."""
        if self._off:
            return
        try:
            line = await self._atransact(compacted)
        except Exception as exc:
            self._failed("on_compaction", exc)
            return
        self._compacted(line)

    # -- introspection -----------------------------------------------------------
    def snapshot(self) -> Mapping[str, Any]:
        """A summary of this run's state (for debugging and tests)."""
        return self._transact(_snapshot)

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
        """A call about to run: its tool, args hash, poll flag, key, id and registration."""
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        # Whether a tool is a known poll depends on its params only for `process`. The
        # cache holds names already made safe, so a name found there needs no check.
        polls = self._polls
        poll = polls.get(tool)
        if poll is None:
            if len(tool) > MAX_NAME_CHARS or not tool.isascii():
                tool = guard_text(tool)
            poll = is_known_poll(tool, params, self._profiles)
            if tool != "process" and len(polls) < 256:
                polls[tool] = poll
        if call_id is not None:
            if type(call_id) is not str:
                call_id = str(call_id)
            if len(call_id) > MAX_NAME_CHARS or not call_id.isascii():
                call_id = guard_text(call_id)
        sig = f"{tool}:{digest(params)}"
        key = call_id if call_id is not None else sig
        sigs = self._sigs  # so that after_call need not hash the params again
        if call_id is not None:
            sigs[key] = sig  # the params themselves are not kept (memory)
        else:  # kept to match after_call's params by identity
            sigs[f"{tool}\x1f{id(params)}"] = (sig, params)
        if len(sigs) > _MAX_PENDING:  # calls that never reported back; keep the newest half
            self._sigs = dict(list(sigs.items())[_MAX_PENDING // 2 :])
        tools = self.tools
        # Built field by field, as the window builds its records: no __init__ frame.
        call: Call = _new(Call)
        call.tool, call.sig, call.poll, call.key, call.call_id = tool, sig, poll, key, call_id
        call.unregistered = None if tools is None else tool not in tools
        return call

    def _outcome(self, tool: Any, params: Any, call_id: Any, result: Any, error: Any) -> Done:
        """A finished call: its args hash (cached by ``before_call``), key, id and outcome."""
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        if tool not in self._polls and (len(tool) > MAX_NAME_CHARS or not tool.isascii()):
            tool = guard_text(tool)  # (names in the poll cache are safe already)
        if call_id is None:
            cached = self._sigs.pop(f"{tool}\x1f{id(params)}", None)
        else:
            if type(call_id) is not str:
                call_id = str(call_id)
            # before_call kept the signature under the safe id: found, this id is safe.
            cached = self._sigs.pop(call_id, None)
            if cached is None and (len(call_id) > MAX_NAME_CHARS or not call_id.isascii()):
                call_id = guard_text(call_id)
                cached = self._sigs.pop(call_id, None)
        if type(cached) is str:
            sig = cached
        elif cached is not None and cached[1] is params:
            sig = cached[0]
        else:
            sig = f"{tool}:{digest(params)}"
        profiles = self._profiles
        outcome = hash_outcome(tool, params, result=result, error=error, profiles=profiles)
        masker = None
        sourced = self._sourced
        if sourced:
            maskers = self._maskers
            masker = maskers.get(tool, maskers)
            if masker is maskers:
                masker = profiles.masker_for(tool)
                if len(maskers) < 256:
                    maskers[tool] = masker
        key = call_id if call_id is not None else sig
        return _new_done(
            (tool, sig, key, call_id, outcome, sourced, params, result, error, profiles, masker)
        )

    # -- after the commit ----------------------------------------------------------
    def _decided(self, step: Step, call: Call, params: Any, now: float) -> Decision:
        """After the commit: the log line, the run record, the event, the stop."""
        stop = step.stop
        if stop is not None or step.decision.blocked:  # it will not run: no after_call
            pending = call.call_id if call.call_id is not None else f"{call.tool}\x1f{id(params)}"
            self._sigs.pop(pending, None)
        if step.log is not None:
            write_line(step.log)
        record = self._record
        if record is not None:
            if step.started:
                config = self.config.to_dict()
                record.line(RUN_START, now, self.run_id, self.session_id, self.agent_id, config)
            action = step.decision.action if stop is None else "stop"
            raw = record.raw(params)
            record.line(
                CALL, now, self.run_id, call.call_id, call.tool, call.sig, call.poll, raw, action
            )
        if step.event is not None:
            emit((self._event(step, call.tool, call.call_id, now),), self.guard.sinks)
        if stop is not None:
            raise self._stop_error(step, call.call_id, call.key)
        return step.decision

    def _recorded(self, step: Step, done: Done, raw: Any, now: float) -> str | None:
        """After the commit: the log line, the run record, the abort."""
        if step.log is not None:
            write_line(step.log)
        record = self._record
        out = done.outcome
        if record is not None and step.recorded:
            # The hash the guard compared (masked, when it was), so a replay of the
            # record sees what the live guard saw.
            used = step.outcome_hash or out.hash
            details = (used, out.is_error, out.unknown_tool_name, record.raw(raw))
            record.line(OUTCOME, now, self.run_id, done.call_id, done.tool, done.sig, *details)
        stop = step.stop
        if stop is not None:
            emit((self._event(step, done.tool, done.call_id, now),), self.guard.sinks)
            raise self._stop_error(step, None, None)
        return step.note

    def _stop_error(self, step: Step, call_id: str | None, key: str | None) -> LoopAbort:
        """The exception that ends the run, with its report (``call_id``: the call the stop
        refused; ``None`` when the stop came after a call ran)."""
        stop = step.stop
        assert stop is not None
        error = stop.error()
        calls, refused = step.tally or (0, 0)
        error.report = StopReport(
            stop.code, stop.tool, stop.count, stop.message, calls, refused, self.run_id
        )
        error.call_id = call_id
        error._key = key
        return error

    # -- a person's answer to a stop (onStop: ask) ------------------------------------
    def resume(self, stop: LoopAbort, choice: Choice | str, note: str | None = None) -> Decision:
        """Apply a person's answer to ``stop``, raised by this run (``onStop: ask``).

        ``allow_once``: returns an ``allow`` decision; run the refused call and report its
        outcome with :meth:`after_call` as usual (the next repeat stops the run again).
        ``continue``: returns a ``block`` decision whose message carries ``note`` for the
        model (the call is not run); the run goes on with a clean slate.
        ``stop``: raises ``stop`` again, as does any answer to a stop no person may lift
        (``stop.askable`` is false: the post-compaction abort).
        """
        parsed = _choice(choice)
        try:
            stands = self._transact(resume, parsed, stop._key, _stop_of(stop))
        except Exception as exc:
            self._failed("resume", exc)
            raise stop from None
        return self._resumed(stop, parsed, stands, note)

    async def aresume(
        self, stop: LoopAbort, choice: Choice | str, note: str | None = None
    ) -> Decision:
        """Async form of :meth:`resume`."""
        parsed = _choice(choice)
        try:
            stands = await self._atransact(resume, parsed, stop._key, _stop_of(stop))
        except Exception as exc:
            self._failed("resume", exc)
            raise stop from None
        return self._resumed(stop, parsed, stands, note)

    def _resumed(
        self, stop: LoopAbort, choice: Choice, stands: Stop | None, note: str | None
    ) -> Decision:
        if stands is not None:
            raise stop
        what = (
            "let the refused call run once more"
            if choice == "allow_once"
            else "let the run go on" + (" with a note for the model" if note else "")
        )
        event = LoopEvent(
            time=self._clock(),
            session_id=self.session_id,
            run_id=self.run_id,
            agent_id=self.agent_id,
            tool=stop.tool_name,
            level="warning",
            action="resume",
            detector=stop.code,
            count=stop.count,
            paired_tool=None,
            warning_key=None,
            message=f"a person answered the stop: {what}",
            call_id=stop.call_id,
        )
        emit((event,), self.guard.sinks)
        if choice == "allow_once":
            return ALLOW
        return Decision("block", person_note(note))

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
            message = (det.log_message or det.message) if stop is None else stop.message
        else:  # a stop after an outcome: all it has is its stop
            assert stop is not None
            level, detector, count, paired, key = "critical", stop.code, stop.count, None, None
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


def _stop_of(stop: LoopAbort) -> Stop:
    """The run state's record of a stop, from the exception that reported it."""
    return Stop(stop.tool_name, stop.count, stop.code, stop.message)


def _choice(choice: Choice | str) -> Choice:
    parsed = parse_choice(choice)
    if parsed is None:
        raise ValueError(f"unknown answer to a stop {choice!r}: allow_once, stop or continue")
    return parsed


def _names(tools: Iterable[str] | None) -> frozenset[str] | None:
    """Registered tool names as the guard keeps the names of calls (the same set object
    when every name is kept as it is, so callers may compare by identity)."""
    if tools is None:
        return None
    names = frozenset(tools)
    if all(type(t) is not str or (len(t) <= MAX_NAME_CHARS and t.isascii()) for t in names):
        return names
    return frozenset(guard_text(t) if type(t) is str else t for t in names)


def _id(value: Any) -> Any:
    """A run, session or agent id as the guard keeps it (None stays None)."""
    return None if value is None else guard_text(value if type(value) is str else str(value))


def _raw(done: Done, result: Any, error: Any) -> Any:
    """What the run record keeps of an outcome (when params logging is on)."""
    failed = done.outcome.is_error
    if type(result) is ToolOutcome:
        return result.error if failed else result.content
    return error if failed else result


@functools.cache
def _traced_run() -> type[RunGuard]:
    """RunGuard with telemetry mixed in, made on first use (telemetry is imported then)."""
    from .telemetry._run import Traced

    class TracedRun(Traced, RunGuard):
        """A run guard that reports each call to its guard's Telemetry."""

    return TracedRun


def _snapshot(st: RunState) -> dict[str, Any]:
    return {
        "records": [r.to_dict() for r in st.window],
        "stopped": None if st.stopped is None else st.stopped.to_json(),
        "post_compaction_armed": st.guard.armed,
        "remaining_attempts": st.guard.remaining_attempts,
        "unknown_misses": st.miss_count,
    }
