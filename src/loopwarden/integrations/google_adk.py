"""Google ADK integration: loop detection as a runner plugin.

::

    from google.adk.runners import InMemoryRunner
    from loopwarden.integrations.google_adk import LoopGuardPlugin

    runner = InMemoryRunner(agent=agent, plugins=[LoopGuardPlugin("loopwarden.json5")])

What the plugin does, all through the runtime guard (:mod:`loopwarden.guard`):

* ``before_tool_callback`` checks every call before it runs. A blocked call is
  not executed: the plugin answers it with ``{"error": message}``. Names the
  agent has no tool for reach this callback with ADK's placeholder tool and are
  counted by the unknown-tool guard (misses of one unregistered name in a row).
* ``after_tool_callback`` records the outcome (ADK also runs it for calls a
  before-callback answered; those are skipped by call id) and appends a
  warning to the result; ``on_tool_error_callback`` records failures.
* ``before_run_callback`` / ``before_model_callback`` arm the post-compaction
  guard when ADK's event compaction (``App(events_compaction_config=...)``)
  added a compaction event: after the previous invocation, or during this one.
* The circuit breaker and the post-compaction guard raise
  :class:`~loopwarden.errors.CircuitBreakerTripped` /
  :class:`~loopwarden.errors.CompactionLoopPersisted` from the callback; ADK
  ends the run and re-raises it as ``RuntimeError("Error in plugin ...")``
  chained to ours, which :func:`loop_abort` digs out. ADK logs that as a
  crash, three tracebacks at ERROR; the plugin's log filter on those three
  ADK loggers (:data:`ADK_LOGGERS`) turns such records into one INFO line
  each, without the traceback (loopwarden has logged the stop itself).

Run identity: an ADK invocation (``invocation_id``) is a loopwarden run, the
ADK session id is the session id, and each agent of the invocation has its own
history and per-agent config (agent name = agent id).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stores import InProcess
from ._base import RunRegistry, append_note, learn_tool, require, resolve_guard

require("google.adk", "google-adk")

from google.adk.agents.callback_context import CallbackContext  # noqa: E402 - after the check
from google.adk.agents.invocation_context import InvocationContext  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402

__all__ = ["ADK_LOGGERS", "WARNING_KEY", "LoopGuardPlugin", "loop_abort"]

WARNING_KEY = "loopwarden_warning"
"""The key under which a warning is added to a dict tool result."""

# Invocations whose after-run callback never came (a caller that stopped
# iterating, a crash) are dropped beyond this many.
_MAX_INVOCATIONS = 1024

ADK_LOGGERS = (
    "google_adk.google.adk.plugins.plugin_manager",
    "google_adk.google.adk.workflow._node_runner",
    "google_adk.google.adk.runners",
)
"""The ADK loggers that report an exception from a plugin callback as a crash (ADK 2.x)."""


class _StopIsNotACrash(logging.Filter):
    """ADK's records of a loopwarden stop: one INFO line each, without the traceback.

    Other records pass unchanged. The stop itself is logged by loopwarden
    (``loopwarden stop: ...`` at ERROR) and raised to the caller.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if info and info[1] is not None and LoopAbort.find(info[1]) is not None:
            record.exc_info = None
            record.exc_text = None
            record.levelno = logging.INFO
            record.levelname = logging.getLevelName(logging.INFO)
        return True


_STOP_FILTER = _StopIsNotACrash()


def _quiet_adk_stops() -> None:
    for name in ADK_LOGGERS:
        log = logging.getLogger(name)
        if _STOP_FILTER not in log.filters:
            log.addFilter(_STOP_FILTER)


def loop_abort(exc: BaseException | None) -> LoopAbort | None:
    """The loopwarden stop behind an exception ADK raised, or ``None``.

    ADK wraps an exception raised in a plugin callback in ``RuntimeError``;
    this follows the chain (``__cause__`` / ``__context__``) back to loopwarden's
    :class:`~loopwarden.errors.CircuitBreakerTripped` or
    :class:`~loopwarden.errors.CompactionLoopPersisted`.
    """
    return LoopAbort.find(exc)


class _Invocation:
    """loopwarden's view of one ADK invocation: one :class:`RunGuard` per agent."""

    __slots__ = ("arm", "blocked", "guards", "run_id", "scanned", "session_id")

    def __init__(self, run_id: str, session_id: str | None) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.guards: dict[str, RunGuard] = {}
        self.blocked: set[str] = set()  # ids of calls answered by the before-callback
        self.arm = False  # a compaction was seen: arm guards created from now on too
        self.scanned = 0  # session events already looked at for compaction events


def _end_guards(inv: _Invocation) -> None:
    for rg in inv.guards.values():
        rg.end()


def _is_placeholder(tool: BaseTool) -> bool:
    # ADK hands before-callbacks a bare BaseTool for a name it could not
    # resolve; a real tool is always a subclass (BaseTool cannot run).
    return type(tool) is BaseTool


def _with_note(result: Any, note: str) -> Any:
    """The tool result with loopwarden's warning added where the model reads it."""
    if isinstance(result, str):
        return append_note(result, note)
    if isinstance(result, dict):
        return {**result, WARNING_KEY: note}
    return {"result": result, WARNING_KEY: note}


def _has_compaction(event: Any) -> bool:
    actions = getattr(event, "actions", None)
    return actions is not None and getattr(actions, "compaction", None) is not None


class LoopGuardPlugin(BasePlugin):
    """Loop detection for every agent a Google ADK runner runs.

    Register it with ``Runner(..., plugins=[...])``, ``InMemoryRunner(...,
    plugins=[...])`` or ``App(plugins=[...])``, ideally first: ADK stops
    running after-tool callbacks at the first plugin that returns a result.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults. (``guard=``,
            its old name, still works and warns.)
        name: the plugin name (unique per runner).
        agent_id: the agent id whose per-agent config applies to every agent; by
            default each agent's ``name`` is its agent id.
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.
    """

    def __init__(
        self,
        config_or_guard: LoopGuard | ConfigSource = None,
        *,
        name: str = "loopwarden",
        agent_id: str | None = None,
        **guard_kwargs: Any,
    ) -> None:
        super().__init__(name=name)
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        # An in-process store never waits: on the per-call path the plain methods
        # spare the coroutine layers of their async twins.
        self._inline = isinstance(self.guard.store, InProcess)
        self._invocations: RunRegistry[str, _Invocation] = RunRegistry(
            _MAX_INVOCATIONS, on_evict=_end_guards
        )
        _quiet_adk_stops()

    # -- invocation bookkeeping ------------------------------------------------
    def _invocation(self, invocation_id: str, session: Any) -> _Invocation:
        inv = self._invocations.get(invocation_id)
        if inv is None:
            inv = self._invocations.get_or_create(
                invocation_id,
                lambda: _Invocation(
                    invocation_id or uuid.uuid4().hex, getattr(session, "id", None)
                ),
            )
        return inv

    def _end(self, invocation_id: str) -> None:
        inv = self._invocations.forget(invocation_id)
        if inv is not None:
            _end_guards(inv)

    async def _new_guard(self, inv: _Invocation, agent: str) -> RunGuard:
        rg = inv.guards[agent] = self.guard.run(
            inv.run_id,
            session_id=inv.session_id if inv.session_id is not None else self.guard.session_id,
            agent_id=self.agent_id if self.agent_id is not None else agent,
            tools=(),
        )
        if inv.arm:
            await rg.aon_compaction()
        return rg

    async def _arm(self, inv: _Invocation) -> None:
        inv.arm = True
        for rg in list(inv.guards.values()):
            await rg.aon_compaction()

    # -- run lifecycle -----------------------------------------------------------
    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        try:
            inv = self._invocation(invocation_context.invocation_id, invocation_context.session)
            events = invocation_context.session.events
            inv.scanned = len(events)
            # Post-invocation compaction appends its event after the previous
            # invocation's last event: the latest event before this invocation.
            current = invocation_context.invocation_id
            for event in reversed(events):
                if event.invocation_id != current:
                    if _has_compaction(event):
                        await self._arm(inv)
                    break
        except Exception:
            logger.exception("loopwarden could not look for ADK compaction events")

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        # A token-threshold compaction runs right before the model request.
        try:
            inv = self._invocations.get(callback_context.invocation_id)
            if inv is None:
                return None
            events = callback_context.session.events
            fresh = events[inv.scanned :]
            inv.scanned = len(events)
            if any(_has_compaction(event) for event in fresh):
                await self._arm(inv)
        except Exception:
            logger.exception("loopwarden could not look for ADK compaction events")
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        self._end(invocation_context.invocation_id)

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        self._end(invocation_context.invocation_id)

    # -- tool calls -----------------------------------------------------------------
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        try:
            inv = self._invocation(tool_context.invocation_id, tool_context.session)
            agent = tool_context.agent_name
            rg = inv.guards.get(agent)
            if rg is None:
                rg = await self._new_guard(inv, agent)
            name = tool.name
            registered = not _is_placeholder(tool)
            if registered != (name in (rg.tools or ())):
                learn_tool(rg, name, registered)
            call_id = tool_context.function_call_id
        except Exception:
            logger.exception("loopwarden could not check a call of %s; allowing it", tool.name)
            return None
        # CircuitBreakerTripped propagates: ADK ends the run with it.
        if self._inline:
            decision = rg.before_call(name, tool_args, call_id)
        else:
            decision = await rg.abefore_call(name, tool_args, call_id)
        if decision.blocked:
            if call_id is not None:
                inv.blocked.add(call_id)
            return {"error": decision.message}
        return None

    def _guard_of(self, tool_context: ToolContext) -> RunGuard | None:
        inv = self._invocations.get(tool_context.invocation_id)
        if inv is None:
            return None
        call_id = tool_context.function_call_id
        if call_id is not None and call_id in inv.blocked:
            inv.blocked.discard(call_id)  # our own block answer, not an outcome
            return None
        return inv.guards.get(tool_context.agent_name)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        try:
            rg = self._guard_of(tool_context)
        except Exception:
            logger.exception("loopwarden could not record an outcome of %s", tool.name)
            return None
        if rg is None:
            return None
        # CompactionLoopPersisted propagates: ADK ends the run with it.
        call_id = tool_context.function_call_id
        if self._inline:
            note = rg.after_call(tool.name, tool_args, call_id, result=result)
        else:
            note = await rg.aafter_call(tool.name, tool_args, call_id, result=result)
        if not note:
            return None
        changed: dict[str, Any] = _with_note(result, note)
        return changed

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        if isinstance(error, asyncio.CancelledError):
            return None  # a cancelled call has no outcome
        try:
            rg = self._guard_of(tool_context)
        except Exception:
            logger.exception("loopwarden could not record a failure of %s", tool.name)
            return None
        if rg is None:
            return None
        placeholder = _is_placeholder(tool)
        # ADK's placeholder tool says the name is unknown: no wording to recognise.
        outcome = ToolOutcome(error=error, unknown_tool=tool.name if placeholder else None)
        note = await rg.aafter_call(
            tool.name, tool_args, tool_context.function_call_id, result=outcome
        )
        if note and placeholder:
            # ADK answers an unknown name with an error response unless a
            # callback does; answering it here is the only way to add the note.
            return {"error": append_note(str(error), note)}
        return None
