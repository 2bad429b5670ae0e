"""AG2 integration (``ag2`` 1.x, ``import ag2``): loop detection as agent middleware.

::

    from ag2 import Agent
    from loopwarden.integrations.ag2 import LoopGuardMiddleware

    agent = Agent("support-bot", config=config, tools=[...],
                  middleware=[LoopGuardMiddleware("loopwarden.json5")])

What the middleware does, all through the runtime guard (:mod:`loopwarden.guard`):

* One loopwarden run per turn (``agent.ask``/``agent.run``, ``reply.ask``);
  the stream (conversation) id is the session id, the agent's ``name`` the
  agent id.
* ``on_tool_execution`` checks every call before it runs. A warning is
  appended to the tool result the model reads; a blocked call is not executed
  and is answered with a ``ToolErrorEvent`` whose text is loopwarden's message.
* Calls of names the agent has no tool for never reach tool middleware: AG2
  answers them with a ``ToolNotFoundEvent``, which the middleware intercepts
  on the stream (an interrupter) to count the miss, and to answer with the
  block message once the unknown-tool guard blocks.
* A stop (circuit breaker, post-compaction guard) answers the stopping call
  with the stop message, so the conversation stays well formed, and raises
  :class:`~loopwarden.errors.LoopAbort` (``.code`` names the rule) out of
  ``ask`` before the model is called again. (AG2 turns exceptions inside tool
  execution into tool errors, so the stop leaves from the next model call.)
* AG2 compacts a conversation after a turn (``KnowledgeConfig(compact=...)``):
  its ``CompactionCompleted`` event arms the post-compaction guard of the
  next turn on that stream. Put the middleware in ``Agent(middleware=[...])``,
  outside AG2's own compaction, to see the event.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import LoopAbort, LoopwardenError
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, ToolOutcome
from ..stores import InProcess
from ._base import (
    RunRegistry,
    aguarded_call,
    append_note,
    learn_tool,
    parse_arguments,
    require,
    resolve_guard,
)

require("ag2", "ag2")

from ag2.annotations import Context  # noqa: E402 - after the extra check on purpose
from ag2.events import (  # noqa: E402
    BaseEvent,
    ClientToolCallEvent,
    CompactionCompleted,
    DataInput,
    ModelResponse,
    TextInput,
    ToolCallEvent,
    ToolErrorEvent,
    ToolNotFoundEvent,
    ToolResult,
    ToolResultEvent,
)
from ag2.middleware import BaseMiddleware, MiddlewareDescription  # noqa: E402
from ag2.middleware.base import AgentTurn, LLMCall, ToolExecution, ToolResultType  # noqa: E402

__all__ = ["LoopGuardMiddleware", "ToolBlocked"]

_AGENT_KEY = "__ag2_agent__"  # where AG2 puts the running agent in context.dependencies
_MAX_CONVERSATIONS = 4096  # conversations remembered as compacted until their next turn


class ToolBlocked(LoopwardenError):
    """The error of a call loopwarden answered instead of running it (the model reads the text)."""


class LoopGuardMiddleware:
    """Tool-loop detection for AG2 agents: pass it in ``Agent(middleware=[...])``.

    A middleware factory: AG2 calls it once per turn for that turn's
    middleware, which holds the turn's loopwarden run.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
        agent_id: the agent id whose per-agent config applies; by default the
            agent's ``name``.
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.
    """

    def __init__(
        self,
        config_or_guard: LoopGuard | ConfigSource = None,
        *,
        agent_id: str | None = None,
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        # An in-process store never waits: the plain methods spare the coroutines.
        self.inline = isinstance(self.guard.store, InProcess)
        # Streams whose last turn ended with a compaction: their next turn is armed.
        self.compacted: RunRegistry[Any, bool] = RunRegistry(_MAX_CONVERSATIONS)

    def __call__(self, event: BaseEvent, context: Context) -> BaseMiddleware:
        return _Turn(event, context, self)

    def describe(self) -> MiddlewareDescription:
        """What AG2 shows for this middleware (no config values: they may hold paths)."""
        return MiddlewareDescription(kind=type(self).__qualname__, complete=False)


class _Turn(BaseMiddleware):
    """The middleware of one turn: one loopwarden run."""

    def __init__(self, event: BaseEvent, context: Context, owner: LoopGuardMiddleware) -> None:
        super().__init__(event, context)
        self.owner = owner
        self.run: RunGuard | None = None
        self.stop: LoopAbort | None = None  # a stop waiting for the next model call
        self.calls: dict[str, ToolCallEvent] = {}  # the latest model response's calls, by id
        try:
            agent = context.dependencies.get(_AGENT_KEY)
            name = getattr(agent, "name", None)
            guard = owner.guard
            self.run = guard.run(
                uuid.uuid4().hex,
                session_id=str(context.stream.id),
                agent_id=owner.agent_id if owner.agent_id is not None else name,
                tools=(),
            )
        except Exception:
            logger.exception("loopwarden could not start a run for an AG2 turn")

    # -- the turn -----------------------------------------------------------------------
    async def on_turn(self, call_next: AgentTurn, event: BaseEvent, context: Context) -> Any:
        run = self.run
        if run is None:
            return await call_next(event, context)
        stream = context.stream
        try:
            if self.owner.compacted.forget(stream.id):
                await self._arm(run)
            missing = stream.where(ToolNotFoundEvent).sub_scope(self._unknown, interrupt=True)
            compaction = stream.where(CompactionCompleted).sub_scope(self._compacted)
        except Exception:
            logger.exception("loopwarden could not watch an AG2 turn")
            return await call_next(event, context)
        try:
            with missing, compaction:
                response = await call_next(event, context)
            if self.stop is not None:  # the turn ended without another model call
                raise self.stop
            return response
        finally:
            run.end()

    async def _compacted(self, event: CompactionCompleted, context: Context) -> None:
        self.owner.compacted.get_or_create(context.stream.id, lambda: True)

    async def _arm(self, run: RunGuard) -> None:
        if self.owner.inline:
            run.on_compaction()
        else:
            await run.aon_compaction()

    async def on_llm_call(
        self, call_next: LLMCall, events: Sequence[BaseEvent], context: Context
    ) -> ModelResponse:
        if self.stop is not None:
            raise self.stop  # the stopping call is answered; the model is not asked again
        response = await call_next(events, context)
        try:
            tool_calls = response.tool_calls
            self.calls = {call.id: call for call in tool_calls.calls} if tool_calls else {}
        except Exception:
            logger.exception("loopwarden could not read an AG2 model response")
        return response

    # -- tool calls -----------------------------------------------------------------------
    async def on_tool_execution(
        self, call_next: ToolExecution, event: ToolCallEvent, context: Context
    ) -> ToolResultType:
        run = self.run
        if run is None or self.stop is not None:
            return await call_next(event, context)
        name, call_id = event.name, event.id
        try:
            if name not in (run.tools or ()):
                learn_tool(run, name, True)
            params = parse_arguments(event.arguments)
        except Exception:
            logger.exception("loopwarden could not check an AG2 call of %s; allowing it", name)
            return await call_next(event, context)

        async def execute(call: ToolCallEvent) -> ToolResultType:
            return await call_next(call, context)

        try:
            answer = await aguarded_call(run, name, params, call_id, execute, event, read=_outcome)
        except LoopAbort as stop:
            self.stop = stop
            return _answer(event, stop.message)
        if answer.blocked:
            return _answer(event, answer.decision.message or "")
        result = answer.value
        assert result is not None  # not blocked: the tool ran
        if answer.note and isinstance(result, ToolResultEvent):
            return _with_note(result, answer.note)
        return result

    async def _unknown(self, event: ToolNotFoundEvent, context: Context) -> ToolNotFoundEvent:
        """AG2's answer to a name the agent has no tool for: count it, or block it."""
        run = self.run
        if run is None or self.stop is not None:
            return event
        name, call_id = event.name or "", event.parent_id
        try:
            learn_tool(run, name, False)
            call = self.calls.get(call_id)
            params = parse_arguments(call.arguments) if call is not None else {}
        except Exception:
            logger.exception("loopwarden could not count an AG2 call of unknown %s", name)
            return event
        inline = self.owner.inline
        try:
            decision = (
                run.before_call(name, params, call_id)
                if inline
                else await run.abefore_call(name, params, call_id)
            )
            if decision.blocked:
                return _replace(event, decision.message or "")
            outcome = ToolOutcome(error=event.error, unknown_tool=name)
            note = (
                run.after_call(name, params, call_id, result=outcome)
                if inline
                else await run.aafter_call(name, params, call_id, result=outcome)
            )
        except LoopAbort as stop:
            # Raised here AG2 would turn it into a tool error: stop at the next model call.
            self.stop = stop
            return _replace(event, stop.message)
        if note:
            return _replace(event, append_note(_text(event.result), note))
        return event


# -- helpers --------------------------------------------------------------------------
def _outcome(value: Any, call_id: str | None) -> Any:
    """What a tool execution produced, as loopwarden records it."""
    if isinstance(value, ToolErrorEvent):
        return ToolOutcome(error=value.error)
    if isinstance(value, ClientToolCallEvent) or not isinstance(value, ToolResultEvent):
        return MISSING  # run by the client, not here: no outcome yet
    parts = value.result.parts
    items = [_part_value(part) for part in parts]
    return items[0] if len(items) == 1 else items


def _part_value(part: Any) -> Any:
    if isinstance(part, TextInput):
        return part.content
    if isinstance(part, DataInput):
        return part.data
    return part


def _text(result: ToolResult) -> str:
    return "\n\n".join(str(_part_value(part)) for part in result.parts)


def _answer(call: ToolCallEvent, message: str) -> ToolErrorEvent:
    """A failed tool result the model reads as ``message`` (the call did not run)."""
    return ToolErrorEvent(
        parent_id=call.id,
        name=call.name,
        error=ToolBlocked(message),
        result=ToolResult(message),
    )


def _replace(event: ToolNotFoundEvent, message: str) -> ToolNotFoundEvent:
    changed = copy.copy(event)
    changed.result = ToolResult(message)
    return changed


def _with_note(event: ToolResultEvent, note: str) -> ToolResultEvent:
    """The tool result with loopwarden's warning where the model reads it."""
    result = event.result
    parts = list(result.parts)
    if parts and isinstance(parts[-1], TextInput):
        parts[-1] = TextInput(append_note(parts[-1].content, note))
    elif result.final:
        return event  # a final answer must stay one part: nothing to append to
    else:
        parts.append(TextInput(note))
    changed = copy.copy(event)  # the same kind of event (a ToolErrorEvent keeps its error)
    changed.result = ToolResult(parts=parts, final=result.final, metadata=result.metadata)
    return changed
