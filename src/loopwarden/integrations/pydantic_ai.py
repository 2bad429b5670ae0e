"""Pydantic AI integration: loop detection as an agent capability.

::

    from pydantic_ai import Agent
    from loopwarden.integrations.pydantic_ai import LoopGuardCapability

    agent = Agent(model, capabilities=[LoopGuardCapability("loopwarden.json5")])

What the capability does, all through the runtime guard (:mod:`loopwarden.guard`):

* ``for_run``: one loopwarden run per agent run, keyed by ``ctx.run_id``; the
  conversation id is the session id and the agent's ``name`` the agent id.
* ``wrap_tool_execute``: checks every tool call before it runs. A warning is
  appended to a string result, or delivered with ``ctx.enqueue`` right after
  the call's result for any other result; a blocked call is not executed and
  is answered with ``ToolFailed`` (a failed tool result the model reads, no
  retry budget used); the circuit breaker and the post-compaction guard raise
  :class:`~loopwarden.errors.CircuitBreakerTripped` /
  :class:`~loopwarden.errors.CompactionLoopPersisted` out of ``run``.
* ``after_model_request``: tool calls to names that are not registered never
  reach the tool hooks, so they are counted here (unknown-tool guard); a
  ``CompactionPart`` in the response (provider compaction) or a new one in the
  request history (a summary written by a history processor) arms the
  post-compaction guard.
* ``wrap_run``: forgets the run's state when it ends, however it ends.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ._base import aguarded_call, append_note, parse_arguments, require, resolve_guard

require("pydantic_ai", "pydantic-ai")

from pydantic_ai.capabilities import AbstractCapability  # noqa: E402 - after the extra check
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (  # noqa: E402
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
)
from pydantic_ai.tools import RunContext, ToolDefinition  # noqa: E402

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import (
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult

__all__ = ["LoopGuardCapability"]

# Not outcomes: the call was deferred for approval or for an external executor.
_DEFERRALS = (CallDeferred, ApprovalRequired)


class LoopGuardCapability(AbstractCapability[Any]):
    """Tool-loop detection for Pydantic AI agents.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
        agent_id: the agent whose per-agent config block applies; defaults to
            the agent's ``name``.
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.

    List it first in ``capabilities`` so that it sees each tool call once,
    around whatever other capabilities do with it.
    """

    def __init__(
        self,
        config_or_guard: LoopGuard | ConfigSource = None,
        *,
        agent_id: str | None = None,
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id
        # Per-run fields, set on the copy that for_run() returns.
        self._run: RunGuard | None = None
        self._tool_names: frozenset[str] | None = None
        self._scanned = 0
        self._last_summary: CompactionPart | None = None

    async def for_run(self, ctx: RunContext[Any]) -> LoopGuardCapability:
        bound = copy.copy(self)
        bound._tool_names = None
        try:
            agent_id = self.agent_id
            if agent_id is None and ctx.agent is not None:
                agent_id = ctx.agent.name
            # A summary already in the history the run starts from is not a compaction of it.
            bound._last_summary = _latest_request_summary(ctx.messages, 0)
            bound._scanned = len(ctx.messages)
            bound._run = self.guard.run(
                ctx.run_id, session_id=ctx.conversation_id, agent_id=agent_id
            )
        except Exception:
            logger.exception("loopwarden could not start a Pydantic AI run; not guarding it")
            bound._run = None
        return bound

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:
            if self._run is not None:
                self._run.end()

    # -- model responses: unknown tools and compaction ------------------------------
    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        run = self._run
        if run is None:
            return response
        try:
            compacted = self._request_compacted(request_context.messages)
            calls: list[ToolCallPart] = []
            for part in response.parts:
                if isinstance(part, ToolCallPart):
                    calls.append(part)
                elif isinstance(part, CompactionPart):
                    compacted = True
            unknown = self._unknown_calls(run, request_context, calls) if calls else calls
        except Exception:
            logger.exception("loopwarden could not inspect a Pydantic AI model response")
            return response
        if compacted:
            await run.aon_compaction()
        for call in unknown:
            try:
                await self._unknown_call(ctx, run, call)
            except LoopAbort:
                raise
            except Exception:
                logger.exception("loopwarden could not guard a call of an unknown tool")
        return response

    def _unknown_calls(
        self, run: RunGuard, request_context: ModelRequestContext, calls: list[ToolCallPart]
    ) -> list[ToolCallPart]:
        """The calls of tools the model was not offered (function tools are the guard's tools)."""
        params = request_context.model_request_parameters
        tools = params.function_tools
        known = self._tool_names
        # Tools rarely change within a run: rebuild the names only when they may have.
        if (
            known is None
            or len(tools) != len(known)
            or any(call.tool_name not in known for call in calls)
        ):
            names = frozenset(tool.name for tool in tools)
            if names != known:
                self._tool_names = known = names
                run.set_tools(names)
        unknown = [call for call in calls if call.tool_name not in known]
        if unknown and params.output_tools:
            outputs = {tool.name for tool in params.output_tools}
            unknown = [call for call in unknown if call.tool_name not in outputs]
        return unknown

    def _request_compacted(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether the request history holds a summary (CompactionPart) this run has not seen."""
        count = len(messages)
        # Only messages added since the last request, unless the history got shorter
        # (rewritten by a processor).
        start = self._scanned if count >= self._scanned else 0
        self._scanned = count
        summary = _latest_request_summary(messages, start)
        if summary is None or summary == self._last_summary:
            return False
        self._last_summary = summary
        return True

    async def _unknown_call(self, ctx: RunContext[Any], run: RunGuard, call: ToolCallPart) -> None:
        """A call of an unregistered tool: Pydantic AI answers it with a retry prompt itself."""
        name, call_id = call.tool_name, call.tool_call_id
        args = parse_arguments(call.args)
        decision = await run.abefore_call(name, args, call_id)
        if decision.action == "block":
            _enqueue(ctx, decision.message)  # the guard keeps the veto: nothing to report back
            return
        outcome = ToolOutcome(error=f"Unknown tool name: {name!r}", unknown_tool=name)
        _enqueue(ctx, await run.aafter_call(name, args, call_id, result=outcome))

    # -- tool calls ---------------------------------------------------------------------
    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        run = self._run
        if run is None:
            return await handler(args)
        name, call_id = call.tool_name, call.tool_call_id
        # The arguments as the model sent them: what a loop repeats.
        params = parse_arguments(call.args) if call.args is not None else args
        answer = await aguarded_call(
            run,
            name,
            params,
            call_id,
            handler,
            args,
            failure=_failure,
            on_failure_note=lambda note: _enqueue(ctx, note),
        )
        if answer.blocked:
            raise ToolFailed(answer.decision.message or "")
        result, note = answer.value, answer.note
        if note is None:
            return result
        if isinstance(result, str):
            return append_note(result, note)
        _enqueue(ctx, note)
        return result


# -- helpers --------------------------------------------------------------------------
def _latest_request_summary(messages: Sequence[ModelMessage], start: int) -> CompactionPart | None:
    """The newest CompactionPart in a request message at or after ``start``."""
    for index in range(len(messages) - 1, start - 1, -1):
        message = messages[index]
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, CompactionPart):
                    return part
    return None


def _failure(exc: BaseException) -> ToolOutcome:
    """The outcome of a tool run that ended by an exception."""
    if isinstance(exc, _DEFERRALS):
        return ToolOutcome()  # deferred for approval or an external executor: no outcome yet
    if isinstance(exc, SkipToolExecution):
        return ToolOutcome(exc.result)
    return ToolOutcome(error=_error_text(exc))


def _error_text(exc: BaseException) -> Any:
    """The failure the model reads, for the outcome hash."""
    if isinstance(exc, (ToolRetryError, ToolFailedError)):
        return str(exc)
    if isinstance(exc, (ModelRetry, ToolFailed)):
        return exc.message
    return exc


def _enqueue(ctx: RunContext[Any], note: str | None) -> None:
    """Deliver a note to the model next to the current call's result."""
    if not note:
        return
    try:
        ctx.enqueue(note)
    except Exception:
        logger.exception("loopwarden could not deliver a note to the Pydantic AI model")
