"""LlamaIndex integration: loop detection for agent workflows.

::

    from llama_index.core.agent.workflow import FunctionAgent
    from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex

    guard = LoopGuardForLlamaIndex("loopwarden.json5")
    agent = guard.protect(FunctionAgent(tools=[...], llm=llm, name="support_bot"))
    await agent.run("...")  # raises CircuitBreakerTripped / CompactionLoopPersisted on a stop

What :meth:`LoopGuardForLlamaIndex.protect` installs on a ``FunctionAgent``,
``ReActAgent``, ``CodeActAgent`` (any ``BaseWorkflowAgent``) or an
``AgentWorkflow``, all through the runtime guard (:mod:`loopwarden.guard`):

* Its ``call_tool`` step (the one every ``ToolCall`` event goes through, with
  the model's call id) is wrapped on the instance, keeping the step's
  declaration. A call is checked before the step runs it; a blocked call is not
  run and is answered with ``ToolOutput(is_error=True)`` carrying the block
  message, which the model reads as the tool message. A warning is appended to
  the tool output's text. Names the agent has no tool for (the step answers
  "Tool X not found") are counted by the unknown-tool guard. A stop raised in
  the step ends the workflow run: awaiting the handler raises
  :class:`~loopwarden.errors.CircuitBreakerTripped` or
  :class:`~loopwarden.errors.CompactionLoopPersisted`.
* Its ``run`` is wrapped to forget a run's state once the run has finished.

Run identity: a workflow run (``handler.run_id``) is a loopwarden run; each
agent of an ``AgentWorkflow`` has its own history and per-agent config (agent
name = agent id). Runs of one agent at the same time never share counts.
LlamaIndex does not compact a run's context (memory limits apply to earlier
turns, not to the run's own tool calls), so the post-compaction guard is not armed.
Tool calls made inside a ``CodeActAgent``'s generated code are not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ._base import RunRegistry, aguarded_call, append_note, learn_tool, require, resolve_guard

require("llama_index.core.agent.workflow", "llamaindex")

from llama_index.core.agent.workflow import (  # noqa: E402 - after the extra check on purpose
    AgentWorkflow,
    BaseWorkflowAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import TextBlock  # noqa: E402
from llama_index.core.tools import BaseTool, ToolOutput  # noqa: E402
from llama_index_instrumentation.dispatcher import active_instrument_tags  # noqa: E402
from workflows import Context  # noqa: E402

__all__ = ["LoopGuardForLlamaIndex"]

Workflow = BaseWorkflowAgent | AgentWorkflow
CallTool = Callable[[Any, Context, ToolCall], Awaitable[ToolCallResult]]

_MARK = "_loopwarden_binding"
# The tag LlamaIndex puts on everything a workflow run does: the handler's run_id.
_RUN_TAG = "llamaindex.run_id"


class LoopGuardForLlamaIndex:
    """Loop detection for LlamaIndex agent workflows: :meth:`protect` each one once.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
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
        agent_id: str | None = None,
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        self._runs: RunRegistry[str, _Run] = RunRegistry(on_evict=_end_guards)
        self._watchers: set[asyncio.Task[None]] = set()

    def protect(self, workflow: Workflow) -> Workflow:
        """Install loopwarden on an agent or an ``AgentWorkflow``; returns it. Idempotent."""
        if not isinstance(workflow, (BaseWorkflowAgent, AgentWorkflow)):
            raise TypeError(
                "loopwarden guards LlamaIndex agents (FunctionAgent, ReActAgent, ...) and "
                f"AgentWorkflow, not {type(workflow).__name__}"
            )
        installed = getattr(vars(workflow).get("call_tool"), _MARK, None)
        if installed is not None:
            if installed is not self:
                raise ValueError("this workflow is already protected by another loopwarden guard")
            return workflow
        original: CallTool = type(workflow).call_tool

        @functools.wraps(original)  # keeps the step's declaration (its accepted events)
        async def call_tool(wf: Any, ctx: Context, ev: ToolCall) -> ToolCallResult:
            return await self._call_tool(original, wf, ctx, ev)

        setattr(call_tool, _MARK, self)
        run = workflow.run

        def guarded_run(*args: Any, **kwargs: Any) -> Any:
            handler = run(*args, **kwargs)
            self._watch(handler)
            return handler

        # Pydantic agents refuse unknown attributes: set them past the validation.
        object.__setattr__(workflow, "call_tool", types.MethodType(call_tool, workflow))
        object.__setattr__(workflow, "run", guarded_run)
        return workflow

    # -- runs ---------------------------------------------------------------------------
    def _watch(self, handler: Any) -> None:
        """Forget the run's state once it is over, however it ends."""
        try:
            run_id = str(handler.run_id)
            task = asyncio.ensure_future(self._ended(handler, run_id))
        except Exception:
            logger.exception("loopwarden could not follow a LlamaIndex run; its state stays")
            return
        self._watchers.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._watchers.discard)

    async def _ended(self, handler: Any, run_id: str) -> None:
        # However it ended, the caller sees it when it awaits the handler.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await handler
        entry = self._runs.forget(run_id)
        if entry is not None:
            _end_guards(entry)

    def _guard_for(self, agent: str) -> RunGuard:
        tags = active_instrument_tags.get()
        run_id = tags.get(_RUN_TAG) if tags else None
        if not run_id:
            _warn_unscoped()
        key = str(run_id) if run_id else ""
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs.get_or_create(key, lambda: _Run(key or uuid.uuid4().hex))
        rg = entry.guards.get(agent)
        if rg is None:
            rg = entry.guards[agent] = self.guard.run(
                entry.run_id,
                agent_id=self.agent_id if self.agent_id is not None else agent,
                tools=(),
            )
        return rg

    # -- the call_tool step --------------------------------------------------------------
    async def _call_tool(
        self, original: CallTool, wf: Any, ctx: Context, ev: ToolCall
    ) -> ToolCallResult:
        name = ev.tool_name
        try:
            multi = isinstance(wf, AgentWorkflow)
            agent = str(await ctx.store.get("current_agent_name")) if multi else wf.name
            rg = self._guard_for(agent)
            known = await _has_tool(wf, agent, name)
            if known != (name in (rg.tools or ())):
                learn_tool(rg, name, known)
        except Exception:
            logger.exception("loopwarden could not guard a call of %s; running it", name)
            return await original(wf, ctx, ev)

        def execute(event: ToolCall) -> Awaitable[ToolCallResult]:
            return original(wf, ctx, event)

        def read(result: ToolCallResult, call_id: str | None) -> ToolOutcome:
            output = result.tool_output
            if not output.is_error:
                return ToolOutcome(content=output.content)
            # The step said the name is unknown: no need to recognise its wording.
            return ToolOutcome(error=output.content, unknown_tool=None if known else name)

        # A stop propagates: the step fails and the workflow run ends with it.
        answer = await aguarded_call(
            rg,
            name,
            ev.tool_kwargs,
            ev.tool_id,
            execute,
            ev,
            read=read,
            failure=_not_an_outcome,  # the step handles tool errors; this is a pause or a bug
        )
        if answer.blocked:
            return _blocked(ctx, ev, answer.decision.message or "")
        result = answer.value
        assert result is not None  # not blocked: what the step returned
        if answer.note:
            _add_note(result.tool_output, answer.note)
        return result


class _Run:
    """One workflow run: a guard per agent."""

    __slots__ = ("guards", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.guards: dict[str, RunGuard] = {}


def _end_guards(entry: _Run) -> None:
    for rg in entry.guards.values():
        rg.end()


def _not_an_outcome(exc: BaseException) -> None:
    return None


def _in(agent: BaseWorkflowAgent, name: str) -> bool:
    # The agent turned plain functions into FunctionTools when it was made.
    return any(isinstance(t, BaseTool) and t.metadata.name == name for t in agent.tools or ())


async def _has_tool(wf: Any, agent: str, name: str) -> bool:
    """Whether the step will find a tool named ``name``, as ``call_tool`` looks it up."""
    if isinstance(wf, AgentWorkflow):
        if _in(wf.agents[agent], name):
            return True
        tools = await wf.get_tools(agent, name)  # retrieved tools, the handoff tool
    else:
        if _in(wf, name):
            return True
        if wf.tool_retriever is None:
            return False
        tools = await wf.get_tools(name)
    return any(tool.metadata.name == name for tool in tools)


@functools.cache
def _warn_unscoped() -> None:
    logger.warning(
        "loopwarden found no LlamaIndex run id (the %r tag); runs without one share a history",
        _RUN_TAG,
    )


def _blocked(ctx: Context, ev: ToolCall, message: str) -> ToolCallResult:
    """The step's answer to a call loopwarden blocked, with the events the step would write."""
    ctx.write_event_to_stream(
        ToolCall(tool_name=ev.tool_name, tool_kwargs=ev.tool_kwargs, tool_id=ev.tool_id)
    )
    output = ToolOutput(
        content=message,
        tool_name=ev.tool_name,
        raw_input=ev.tool_kwargs,
        raw_output=None,
        is_error=True,
    )
    result = ToolCallResult(
        tool_name=ev.tool_name,
        tool_kwargs=ev.tool_kwargs,
        tool_id=ev.tool_id,
        tool_output=output,
        return_direct=False,
    )
    ctx.write_event_to_stream(result)
    return result


def _add_note(output: ToolOutput, note: str) -> None:
    """Append the warning to the text the model reads, keeping other blocks."""
    blocks = list(output.blocks)
    if blocks and isinstance(blocks[-1], TextBlock):
        blocks[-1] = TextBlock(text=append_note(blocks[-1].text, note))
    else:
        blocks.append(TextBlock(text=note))
    output.blocks = blocks
