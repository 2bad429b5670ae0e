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
from typing import TYPE_CHECKING, Any, Literal

from ._logging import logger
from ._runbase import RunBase
from .config import ConfigSource, LoopDetectionConfig, load_config, log_repairs
from .engine.history import normalize_run_id
from .engine.runtime import ALLOW, QUIET, Decision, after, before, block_result, compacted
from .engine.state import RunState
from .events import EventSink
from .hashing import MISSING, Outcome, ToolOutcome
from .profiles import ProfileRegistry
from .runrecord import RUN_END, JsonlRunRecord
from .stores import InProcess, MemoryStore, Store, store_from_url

if TYPE_CHECKING:
    from .telemetry import Telemetry

__all__ = ["Decision", "LoopGuard", "RunGuard", "block_result"]

Clock = Callable[[], float]


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
        self._with_extras: dict[int, tuple[LoopDetectionConfig, LoopDetectionConfig]] = {}
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
        extra detectors (unless the config chose its own)."""
        if self._fixed is not None:
            cfg = self._fixed
        else:
            cfg = self.config.for_agent(agent_id if agent_id is not None else self.agent_id)
        if cfg.extras is not None:
            return cfg
        with_extras = self._with_extras.get(id(cfg))
        if with_extras is None or with_extras[0] is not cfg:
            with_extras = (cfg, dataclasses.replace(cfg, extras=self.config.settings.extras))
            if len(self._with_extras) > 256:
                self._with_extras.clear()
            self._with_extras[id(cfg)] = with_extras
        return with_extras[1]

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


class RunGuard(RunBase):
    """The guard of one agent run; create it with :meth:`LoopGuard.run`.

    Thread-safe. ``before_call``/``after_call``/``on_compaction`` have async
    twins (``abefore_call``...) for frameworks that run tools on an event loop.
    """

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
            self._record.line(RUN_END, self._clock(), self.run_id)

    def before_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        """Check a call the model wants to make. Raises :class:`CircuitBreakerTripped` to stop."""
        if self._off:
            return ALLOW
        try:
            call = self._call(tool, params, call_id)
            now = self._clock()
            step = self._transact(before, call, self.config, self.tools, now)
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
            step = await self._atransact(before, call, self.config, self.tools, now)
        except Exception as exc:
            return self._failed("before_call", exc)
        return self._decided(step, call, params, now)

    def before_call_hashed(
        self, tool: str, args_hash: str, *, call_id: str | None = None, poll: bool = False
    ) -> Decision:
        """:meth:`before_call` for a call known only by its args hash (trace replay)."""
        if self._off:
            return ALLOW
        call = (tool, args_hash, poll, call_id if call_id is not None else args_hash, call_id)
        try:
            now = self._clock()
            step = self._transact(before, call, self.config, self.tools, now)
        except Exception as exc:
            return self._failed("before_call", exc)
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
        failed = done[4].is_error
        if type(result) is ToolOutcome:  # what the run record keeps (params logging on)
            return self._recorded(step, done, result.error if failed else result.content, now)
        return self._recorded(step, done, error if failed else result, now)

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
        failed = done[4].is_error
        if type(result) is ToolOutcome:  # what the run record keeps (params logging on)
            return self._recorded(step, done, result.error if failed else result.content, now)
        return self._recorded(step, done, error if failed else result, now)

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
        outcome = Outcome(outcome_hash, unknown_tool_name, is_error)
        src = None
        if self._extras and (result is not MISSING or error is not MISSING):
            profiles = self._profiles
            src = (
                tool,
                None if params is MISSING else params,
                result,
                error,
                profiles,
                profiles.masker_for(tool),
            )
        key = call_id if call_id is not None else args_hash
        done = (tool, args_hash, key, call_id, outcome, src)
        try:
            now = self._clock()
            step = self._transact(after, done, now)
        except Exception as exc:
            self._failed("after_call", exc)
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
