"""LlamaIndex integration: loop detection for agent workflows.

::

    from llama_index.core.agent.workflow import FunctionAgent
    from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex

    guard = LoopGuardForLlamaIndex("loopwarden.json5")
    agent = guard.protect(FunctionAgent(tools=[...], llm=llm, name="support_bot"))
    await agent.run("...")  # a stopped run ends with the model's last answer

What :meth:`LoopGuardForLlamaIndex.protect` installs on a ``FunctionAgent``,
``ReActAgent``, ``CodeActAgent`` (any ``BaseWorkflowAgent``) or an
``AgentWorkflow``, all through the runtime guard (:mod:`loopwarden.guard`):

* Its ``call_tool`` step (the one every ``ToolCall`` event goes through, with
  the model's call id) is wrapped on the instance, keeping the step's
  declaration. A call is checked before the step runs it; a blocked call is not
  run and is answered with ``ToolOutput(is_error=True)`` carrying the block
  message, which the model reads as the tool message. A warning is appended to
  the tool output's text. Names the agent has no tool for (the step answers
  "Tool X not found") are counted by the unknown-tool guard.
* When loopwarden stops the run (``on_stop``, else ``loopwarden.onStop``, else
  ``answer``: LlamaIndex cannot tell whether the caller answers questions):

  - ``answer``: the stopped call is answered with the stop's message, and the
    agent's next ``take_step`` (wrapped on the instance, each agent of an
    ``AgentWorkflow`` too) is its last: no tools, and the final-answer
    instruction. Its text, with the stop's summary as the last paragraph, is
    the run's ``AgentOutput``, which holds the report under ``"loopwarden"``
    (``stopping.fallback_answer`` when that call fails or still asks for tools).
  - ``ask``: the stopped call waits in the workflow's own human-in-the-loop
    flow: an ``InputRequiredEvent`` with the question on the event stream, and
    ``ctx.wait_for_event(HumanResponseEvent)`` for the answer, applied with
    :meth:`~loopwarden.RunGuard.resume`.
  - ``raise``: the step fails, and awaiting the handler raises
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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import (
    OnStop,
    StopReport,
    ask_options,
    ask_question,
    choose_on_stop,
    fallback_answer,
    final_answer_request,
)
from ._base import (
    MAX_ASKS,
    Answer,
    RunRegistry,
    aguarded_call,
    append_note,
    learn_tool,
    read_answer,
    require,
    resolve_guard,
    stop_report,
    text_question,
    with_summary,
)

require("llama_index.core.agent.workflow", "llamaindex")

from llama_index.core.agent.react.types import ObservationReasoningStep  # noqa: E402
from llama_index.core.agent.workflow import (  # noqa: E402 - after the extra check on purpose
    AgentOutput,
    AgentWorkflow,
    BaseWorkflowAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ChatMessage, TextBlock  # noqa: E402
from llama_index.core.tools import BaseTool, ToolOutput  # noqa: E402
from llama_index_instrumentation.dispatcher import active_instrument_tags  # noqa: E402
from workflows import Context  # noqa: E402
from workflows.events import HumanResponseEvent, InputRequiredEvent  # noqa: E402

__all__ = ["METADATA_KEY", "LoopGuardForLlamaIndex"]

METADATA_KEY = "loopwarden"
"""The key of the stop's report in a last answer's ``AgentOutput`` (``output["loopwarden"]``)
and of loopwarden's question in an ``InputRequiredEvent``."""

Workflow = BaseWorkflowAgent | AgentWorkflow
CallTool = Callable[[Any, Context, ToolCall], Awaitable[ToolCallResult]]
TakeStep = Callable[..., Awaitable[AgentOutput]]
Guarded = Callable[["Decision | None"], Awaitable[Answer[ToolCallResult]]]

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
        on_stop: what a stop does: ``"answer"`` (a last model call without tools
            writes the run's final answer), ``"ask"`` (an ``InputRequiredEvent``
            asks the person; your code answers it with a ``HumanResponseEvent``)
            or ``"raise"``. ``None``: the config's ``loopwarden.onStop``, else
            ``"answer"`` (LlamaIndex cannot tell whether anyone answers).
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.
    """

    def __init__(
        self,
        config_or_guard: LoopGuard | ConfigSource = None,
        *,
        agent_id: str | None = None,
        on_stop: OnStop | None = None,
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        # Checked now, so that a wrong value fails here and not at the first stop.
        choose_on_stop(on_stop, self.guard.config.settings.on_stop, person=True)
        self.on_stop = on_stop
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
        agents = workflow.agents.values() if isinstance(workflow, AgentWorkflow) else [workflow]
        for agent in agents:
            self._wrap_take_step(agent)
        return workflow

    def _wrap_take_step(self, agent: BaseWorkflowAgent) -> None:
        """The agent's model step: its last one after a stop is made without tools."""
        if getattr(vars(agent).get("take_step"), _MARK, None) is not None:
            return  # protected already (alone, or in another workflow)
        original: TakeStep = type(agent).take_step

        @functools.wraps(original)
        async def take_step(
            wf: Any, ctx: Context, llm_input: list[ChatMessage], tools: Any, memory: Any
        ) -> AgentOutput:
            ending = self._ending(wf.name) if self._runs else None
            if ending is None:
                return await original(wf, ctx, llm_input, tools, memory)
            return await self._last_answer(original, wf, ctx, llm_input, memory, ending)

        setattr(take_step, _MARK, self)
        object.__setattr__(agent, "take_step", types.MethodType(take_step, agent))

    def _mode(self) -> OnStop:
        """What a stop does. Nobody can be asked unless you say so: the code that streams a
        run's events is what answers its questions, and LlamaIndex cannot tell whether it
        does."""
        chosen = self.on_stop if self.on_stop is not None else self.guard.config.settings.on_stop
        return choose_on_stop(
            self.on_stop, self.guard.config.settings.on_stop, person=chosen == "ask"
        )

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

    def _entry(self) -> _Run:
        """The current workflow run's entry (by the run id LlamaIndex tags it with)."""
        tags = active_instrument_tags.get()
        run_id = tags.get(_RUN_TAG) if tags else None
        if not run_id:
            _warn_unscoped()
        key = str(run_id) if run_id else ""
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs.get_or_create(key, lambda: _Run(key or uuid.uuid4().hex))
        return entry

    def _ending(self, agent: str) -> LoopAbort | None:
        """The stop that makes this model step the agent's last (taken: once)."""
        try:
            tags = active_instrument_tags.get()
            run_id = tags.get(_RUN_TAG) if tags else None
            entry = self._runs.get(str(run_id) if run_id else "")
            return None if entry is None else entry.ending.pop(agent, None)
        except Exception:
            logger.exception("loopwarden could not look up a LlamaIndex run's stop")
            return None

    def _guard_for(self, agent: str) -> tuple[_Run, RunGuard]:
        entry = self._entry()
        rg = entry.guards.get(agent)
        if rg is None:
            rg = entry.guards[agent] = self.guard.run(
                entry.run_id,
                agent_id=self.agent_id if self.agent_id is not None else agent,
                tools=(),
            )
        return entry, rg

    # -- the call_tool step --------------------------------------------------------------
    async def _call_tool(
        self, original: CallTool, wf: Any, ctx: Context, ev: ToolCall
    ) -> ToolCallResult:
        name = ev.tool_name
        try:
            multi = isinstance(wf, AgentWorkflow)
            agent = str(await ctx.store.get("current_agent_name")) if multi else wf.name
            entry, rg = self._guard_for(agent)
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

        def guarded(decided: Decision | None = None) -> Awaitable[Answer[ToolCallResult]]:
            return aguarded_call(
                rg,
                name,
                ev.tool_kwargs,
                ev.tool_id,
                execute,
                ev,
                read=read,
                failure=_not_an_outcome,  # the step handles tool errors; this is a pause or a bug
                decided=decided,
            )

        try:
            if entry.asking and agent in entry.asking:
                # The step runs again with the person's answer (LlamaIndex replays a step
                # that waited for an event): the guard is not asked again.
                answer = await self._asked(ctx, ev, entry, rg, agent, guarded)
            else:
                answer = await guarded()
        except LoopAbort as stop:
            answer = await self._on_stop(ctx, ev, entry, rg, agent, stop, guarded)
        if isinstance(answer, ToolCallResult):
            return answer
        return self._deliver(ctx, ev, answer)

    def _deliver(
        self, ctx: Context, ev: ToolCall, answer: Answer[ToolCallResult]
    ) -> ToolCallResult:
        if answer.blocked:
            return _answered(ctx, ev, answer.decision.message or "")
        result = answer.value
        assert result is not None  # not blocked: what the step returned
        if answer.note:
            _add_note(result.tool_output, answer.note)
        return result

    # -- when loopwarden stops the run (onStop) ------------------------------------------
    async def _on_stop(
        self,
        ctx: Context,
        ev: ToolCall,
        entry: _Run,
        rg: RunGuard,
        agent: str,
        stop: LoopAbort,
        guarded: Guarded,
    ) -> Answer[ToolCallResult] | ToolCallResult:
        """What a stop does to the call it refused; a stop it raises ends the run."""
        try:
            mode = self._mode()
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            raise stop from None
        if mode == "raise":
            raise stop
        if mode != "ask" or not stop.askable or stop.call_id is None:
            entry.ending.setdefault(agent, stop)
            return _refused(stop)
        if agent in entry.asking:  # one question at a time: a parallel call is refused
            return _refused(stop)
        # Kept until the answer comes: without its traceback, which holds the step's frames.
        entry.asking[agent] = _Question(stop.call_id, stop.with_traceback(None))
        return await self._asked(ctx, ev, entry, rg, agent, guarded)

    async def _asked(
        self,
        ctx: Context,
        ev: ToolCall,
        entry: _Run,
        rg: RunGuard,
        agent: str,
        guarded: Guarded,
    ) -> Answer[ToolCallResult] | ToolCallResult:
        """The person's answer to the question of this run's agent, applied. The first time
        (and after an answer that is none of the three) ``wait_for_event`` pauses the step;
        LlamaIndex runs it again when a ``HumanResponseEvent`` comes."""
        question = entry.asking[agent]
        stop = question.stop
        if question.call_id != ev.tool_id:  # another call of the turn, while one is asked
            return _refused(stop)
        reply = None
        while reply is None and question.asked < MAX_ASKS:
            report = stop_report(stop).with_usage(**await _usage(ctx))
            fields: dict[str, Any] = {
                "prefix": text_question(report, question.error),
                METADATA_KEY: True,
                "question": ask_question(report),
                "options": ask_options(),
                "tool": stop.tool_name,
                "call_id": stop.call_id,
                "report": report.to_dict(),
                "error": question.error,
            }
            waiter = InputRequiredEvent(**fields)
            response = await ctx.wait_for_event(
                HumanResponseEvent,
                waiter_event=waiter,
                waiter_id=f"loopwarden-{stop.call_id}-{question.asked}",
                timeout=None,
            )
            given = response.get("choice")
            value = {"choice": given, "note": response.get("note")} if given else response.response
            reply = read_answer(value)
            if reply is None:
                question.asked += 1
                shown = given if given else response.response
                question.error = f"loopwarden did not understand the answer {str(shown)[:80]!r}."
        entry.asking.pop(agent, None)
        choice, note = reply if reply is not None else ("stop", None)
        try:
            decision = (
                rg.resume(stop, choice, note) if rg.inline else await rg.aresume(stop, choice, note)
            )
        except LoopAbort as final:  # "stop": the run ends with the last answer
            entry.ending.setdefault(agent, final)
            return _refused(final)
        if decision.action != "allow":  # "continue": the note answers the call
            return _answered(ctx, ev, decision.message or "", is_error=False)
        try:
            return await guarded(decision)
        except LoopAbort as again:  # a stop after the call ran: nobody can lift it
            if self._mode() == "raise":
                raise
            entry.ending.setdefault(agent, again)
            return _refused(again)

    async def _last_answer(
        self,
        original: TakeStep,
        wf: Any,
        ctx: Context,
        llm_input: list[ChatMessage],
        memory: Any,
        stop: LoopAbort,
    ) -> AgentOutput:
        """The agent's last model step after a stop: no tools, and the instruction."""
        report = stop_report(stop)
        output: AgentOutput | None = None
        try:
            report = report.with_usage(**await _usage(ctx))
            async with _instruction(wf, ctx, llm_input, final_answer_request(report)) as given:
                output = await original(wf, ctx, given, [], memory)
        except Exception:
            logger.exception("loopwarden's last model call failed; ending with the stop's summary")
        try:
            await _spare_iteration(ctx)
            return await _final(wf, ctx, report, output)
        except Exception:
            logger.exception("loopwarden could not finish a LlamaIndex run's last answer")
            text = fallback_answer(report)
            fallback = AgentOutput(
                response=ChatMessage(role="assistant", content=text), current_agent_name=wf.name
            )
            fallback[METADATA_KEY] = report.to_dict()
            return fallback


class _Run:
    """One workflow run: a guard per agent, and what a stop left for each agent."""

    __slots__ = ("asking", "ending", "guards", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.guards: dict[str, RunGuard] = {}
        self.ending: dict[str, LoopAbort] = {}  # agent -> the stop its next step answers
        self.asking: dict[str, _Question] = {}  # agent -> the question it waits on


class _Question:
    """A stop put to a person: the call it refused, and the answers not understood."""

    __slots__ = ("asked", "call_id", "error", "stop")

    def __init__(self, call_id: str, stop: LoopAbort) -> None:
        self.call_id = call_id
        self.stop = stop
        self.asked = 0
        self.error: str | None = None


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


def _answered(ctx: Context, ev: ToolCall, message: str, *, is_error: bool = True) -> ToolCallResult:
    """The step's answer to a call loopwarden did not run (a block, a stop, a person's
    note), with the events the step would write."""
    ctx.write_event_to_stream(
        ToolCall(tool_name=ev.tool_name, tool_kwargs=ev.tool_kwargs, tool_id=ev.tool_id)
    )
    output = ToolOutput(
        content=message,
        tool_name=ev.tool_name,
        raw_input=ev.tool_kwargs,
        raw_output=None,
        is_error=is_error,
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


def _refused(stop: LoopAbort) -> Answer[ToolCallResult]:
    """A call the stop refused, answered with the stop's message (as a block is)."""
    return Answer(None, None, Decision("block", stop.message), True)


async def _usage(ctx: Context) -> dict[str, Any]:
    """The run's model steps so far and its ``max_iterations`` (what it reports)."""
    turns = await ctx.store.get("num_iterations", default=None)
    limit = await ctx.store.get("max_iterations", default=None)
    return {
        "turns": turns if isinstance(turns, int) and turns > 0 else None,
        "turn_limit": limit if isinstance(limit, int) else None,
        "limit_name": "max_iterations",
    }


async def _spare_iteration(ctx: Context) -> None:
    """LlamaIndex counts a model step against ``max_iterations`` once it has run: the last
    answer must not be the step that reaches the limit (the run would fail with
    ``WorkflowRuntimeError``, or ``early_stopping_method="generate"`` would replace it)."""
    turns = await ctx.store.get("num_iterations", default=0)
    limit = await ctx.store.get("max_iterations", default=None)
    if isinstance(turns, int) and isinstance(limit, int) and turns + 1 >= limit:
        await ctx.store.set("num_iterations", max(limit - 2, 0))


async def _final(
    wf: Any, ctx: Context, report: StopReport, output: AgentOutput | None
) -> AgentOutput:
    """The run's last answer: the model's text with the stop's summary as its last
    paragraph, or the fallback text when the call failed or still asked for tools (the
    agent's scratchpad then keeps the fallback, so its memory has no unanswered calls)."""
    found = report.to_dict()
    text = output.response.content if output is not None else None
    if output is None or output.tool_calls or output.retry_messages or not (text or "").strip():
        message = ChatMessage(role="assistant", content=fallback_answer(report))
        key = getattr(wf, "scratchpad_key", None)
        if isinstance(key, str) and output is not None:
            scratchpad = await ctx.store.get(key, default=[])
            if scratchpad and scratchpad[-1] is output.response:
                scratchpad[-1] = message
                await ctx.store.set(key, scratchpad)
        final = AgentOutput(
            response=message,
            current_agent_name=wf.name,
            raw=output.raw if output is not None else None,
        )
        final[METADATA_KEY] = found
        return final
    # A copy: the agent's memory keeps the model's own message.
    response = output.response.model_copy(deep=True)
    _set_text(response, with_summary(text or "", report))
    final = AgentOutput(
        response=response,
        structured_response=output.structured_response,
        current_agent_name=output.current_agent_name,
        raw=output.raw,
    )
    final[METADATA_KEY] = found
    return final


@contextlib.asynccontextmanager
async def _instruction(
    wf: Any, ctx: Context, llm_input: list[ChatMessage], text: str
) -> AsyncIterator[list[ChatMessage]]:
    """The model input of the last step, with the instruction as its last message. The
    agents put their step's own messages after ``llm_input`` (a ``FunctionAgent``'s
    scratchpad, a ``ReActAgent``'s reasoning): the instruction goes at the end of those for
    the call, and out of them afterwards, so the agent's memory does not keep it."""
    scratchpad = getattr(wf, "scratchpad_key", None)
    reasoning = getattr(wf, "reasoning_key", None)
    key = scratchpad if isinstance(scratchpad, str) else reasoning
    if not isinstance(key, str):
        yield [*llm_input, ChatMessage(role="user", content=text)]
        return
    added: Any = (
        ChatMessage(role="user", content=text)
        if key == scratchpad
        else ObservationReasoningStep(observation=text)
    )
    steps = list(await ctx.store.get(key, default=[]))
    await ctx.store.set(key, [*steps, added])
    try:
        yield llm_input
    finally:
        kept = [step for step in await ctx.store.get(key, default=[]) if step is not added]
        await ctx.store.set(key, kept)


def _set_text(message: ChatMessage, text: str) -> None:
    """Put ``text`` in the message's text block (the last one), keeping other blocks."""
    blocks = list(message.blocks)
    for index in range(len(blocks) - 1, -1, -1):
        if isinstance(blocks[index], TextBlock):
            blocks[index] = TextBlock(text=text)
            others = [b for i, b in enumerate(blocks) if i == index or not isinstance(b, TextBlock)]
            message.blocks = others
            return
    message.blocks = [*blocks, TextBlock(text=text)]
