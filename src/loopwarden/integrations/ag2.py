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
  with the stop message, so the conversation stays well formed, then does what
  ``on_stop`` says (``on_stop``, else ``loopwarden.onStop``, else ``ask``, which
  acts as ``answer`` where AG2 has no human-input hook for the turn):

  - ``answer``: the next model call is the turn's last: made with no tools and
    the final-answer instruction; its text, with the stop's summary as the last
    paragraph, is ``ask``'s reply, and the report is in the reply's
    ``response.metadata["loopwarden"]`` (``stopping.fallback_answer`` when that
    call fails or still asks for tools).
  - ``ask``: AG2's own human input: a ``ToolApprovalRequest`` for the stopped
    call, answered by the agent's ``hitl_hook`` with ``allow_once``, ``stop`` or
    ``continue: <note>``, applied with :meth:`~loopwarden.RunGuard.resume`.
    Without a hook (AG2 raises ``HumanInputNotProvidedError``) it acts as ``answer``.
  - ``raise``: :class:`~loopwarden.errors.LoopAbort` (``.code`` names the rule)
    out of ``ask`` before the model is called again. (AG2 turns exceptions
    inside tool execution into tool errors, so the stop leaves from the next
    model call.)
* AG2 compacts a conversation after a turn (``KnowledgeConfig(compact=...)``):
  its ``CompactionCompleted`` event arms the post-compaction guard of the
  next turn on that stream. Put the middleware in ``Agent(middleware=[...])``,
  outside AG2's own compaction, to see the event.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Sequence
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort, LoopwardenError
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, ToolOutcome
from ..stopping import (
    OnStop,
    StopReport,
    choose_on_stop,
    fallback_answer,
    final_answer_request,
)
from ..stores import InProcess
from ._base import (
    MAX_ASKS,
    RunRegistry,
    aguarded_call,
    append_note,
    learn_tool,
    parse_arguments,
    read_answer,
    require,
    resolve_guard,
    stop_report,
    text_question,
    with_summary,
)

require("ag2", "ag2")

from ag2.annotations import Context  # noqa: E402 - after the extra check on purpose
from ag2.events import (  # noqa: E402
    BaseEvent,
    ClientToolCallEvent,
    CompactionCompleted,
    DataInput,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextInput,
    ToolApprovalRequest,
    ToolCallEvent,
    ToolErrorEvent,
    ToolNotFoundEvent,
    ToolResult,
    ToolResultEvent,
    Usage,
)
from ag2.exceptions import HumanInputError, HumanInputNotProvidedError  # noqa: E402
from ag2.middleware import BaseMiddleware, MiddlewareDescription  # noqa: E402
from ag2.middleware.base import AgentTurn, LLMCall, ToolExecution, ToolResultType  # noqa: E402

__all__ = ["METADATA_KEY", "LoopGuardMiddleware", "ToolBlocked"]

METADATA_KEY = "loopwarden"
"""Where a last answer's ``ModelMessage.metadata`` holds the stop's report."""

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
        on_stop: what a stop does: ``"answer"`` (a last model call without tools
            writes the turn's reply), ``"ask"`` (AG2's human input asks whether to
            let the call run once more, stop, or continue with a note; without a
            human-input hook it acts as ``"answer"``) or ``"raise"``. ``None``: the
            config's ``loopwarden.onStop``, else ``"ask"``.
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
        # An in-process store never waits: the plain methods spare the coroutines.
        self.inline = isinstance(self.guard.store, InProcess)
        # Streams whose last turn ended with a compaction: their next turn is armed.
        self.compacted: RunRegistry[Any, bool] = RunRegistry(_MAX_CONVERSATIONS)

    def __call__(self, event: BaseEvent, context: Context) -> BaseMiddleware:
        return _Turn(event, context, self)

    def describe(self) -> MiddlewareDescription:
        """What AG2 shows for this middleware (no config values: they may hold paths)."""
        return MiddlewareDescription(kind=type(self).__qualname__, complete=False)

    def mode(self) -> OnStop:
        """What a stop does. Whether a person can be asked is known only by asking (AG2
        says so when the turn has no human-input hook): ``ask`` is the default, and acts as
        ``answer`` where nobody answers."""
        return choose_on_stop(self.on_stop, self.guard.config.settings.on_stop, person=True)


class _Turn(BaseMiddleware):
    """The middleware of one turn: one loopwarden run."""

    def __init__(self, event: BaseEvent, context: Context, owner: LoopGuardMiddleware) -> None:
        super().__init__(event, context)
        self.owner = owner
        self.run: RunGuard | None = None
        self.stop: LoopAbort | None = None  # a stop waiting for the next model call
        self.ending = False  # that stop ends the turn with a last answer (not raised)
        self.asking = False  # a question about a stop is open
        self.calls: dict[str, ToolCallEvent] = {}  # the latest model response's calls, by id
        self.tokens: float | None = None  # the turn's model usage so far (for the report)
        self.turns = 0
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
            stop = self.stop
            if stop is not None:  # the turn ended without another model call
                if not self.ending:
                    raise stop
                return _final(self._report(stop), None)
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
        stop = self.stop
        if stop is not None:
            if not self.ending:
                raise stop  # the stopping call is answered; the model is not asked again
            return await self._last_answer(stop, call_next, events, context)
        response = await call_next(events, context)
        try:
            self.turns += 1
            total = response.usage.total_tokens
            if total:
                self.tokens = (self.tokens or 0) + total
            tool_calls = response.tool_calls
            self.calls = {call.id: call for call in tool_calls.calls} if tool_calls else {}
        except Exception:
            logger.exception("loopwarden could not read an AG2 model response")
        return response

    def _report(self, stop: LoopAbort) -> StopReport:
        tokens = self.tokens
        return stop_report(stop).with_usage(
            tokens=int(tokens) if tokens else None, turns=self.turns or None
        )

    async def _last_answer(
        self, stop: LoopAbort, call_next: LLMCall, events: Sequence[BaseEvent], context: Context
    ) -> ModelResponse:
        """The turn's last model call: no tools, and the instruction to write the reply."""
        self.stop = None  # once: the reply ends the turn
        report = self._report(stop)
        response: ModelResponse | None = None
        last = _without_tools(call_next)
        if last is None:
            logger.error("loopwarden could not call AG2's model without tools; ending the turn")
        else:
            instruction = ModelRequest([TextInput(final_answer_request(report))])
            try:
                response = await last([*events, instruction], context)
            except Exception:
                logger.exception(
                    "loopwarden's last model call failed; ending with the stop's summary"
                )
        structured = last is not None and last.keywords.get("response_schema") is not None
        return _final(report, response, structured=structured)

    # -- tool calls -----------------------------------------------------------------------
    async def on_tool_execution(
        self, call_next: ToolExecution, event: ToolCallEvent, context: Context
    ) -> ToolResultType:
        run = self.run
        if run is None:
            return await call_next(event, context)
        if self.stop is not None:
            if self.ending:  # a call of the stopped turn: refused, the turn ends
                return _answer(event, self.stop.message)
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
            return await self._on_stop(run, stop, event, context, params, execute)
        return self._deliver(answer, event)

    def _deliver(self, answer: Any, event: ToolCallEvent) -> ToolResultType:
        if answer.blocked:
            return _answer(event, answer.decision.message or "")
        result = answer.value
        assert result is not None  # not blocked: the tool ran
        if answer.note and isinstance(result, ToolResultEvent):
            return _with_note(result, answer.note)
        return result  # type: ignore[no-any-return]  # what the tool execution returned

    # -- when loopwarden stops the run (onStop) --------------------------------------------
    def _hold(self, stop: LoopAbort, ending: bool) -> None:
        """Keep the stop for the next model call (the first stop of the turn)."""
        if self.stop is None:
            self.stop = stop
            self.ending = ending

    async def _on_stop(
        self,
        run: RunGuard,
        stop: LoopAbort,
        event: ToolCallEvent,
        context: Context,
        params: Any,
        execute: Any,
    ) -> ToolResultType:
        try:
            mode = self.owner.mode()
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            mode = "raise"
        if mode == "raise":
            self._hold(stop, False)
            return _answer(event, stop.message)
        if mode != "ask" or not stop.askable or stop.call_id is None:
            self._hold(stop, True)
            return _answer(event, stop.message)
        if self.asking:  # one question at a time: a parallel call is refused
            return _answer(event, stop.message)
        self.asking = True
        try:
            reply = await self._ask(stop, context, event)
        finally:
            self.asking = False
        if reply is None:  # nobody answered: the turn ends as under answer
            self._hold(stop, True)
            return _answer(event, stop.message)
        choice, note = reply
        try:
            decision: Decision = (
                run.resume(stop, choice, note)
                if self.owner.inline
                else await run.aresume(stop, choice, note)
            )
        except LoopAbort as final:  # "stop"
            self._hold(final, True)
            return _answer(event, final.message)
        if decision.action != "allow":  # "continue": the note answers the call
            return ToolResultEvent.from_call(event, result=decision.message or "")
        try:
            answer = await aguarded_call(
                run, event.name, params, event.id, execute, event, read=_outcome, decided=decision
            )
        except LoopAbort as again:  # a stop after the call ran: nobody can lift it
            self._hold(again, self.owner.mode() != "raise")
            return _answer(event, again.message)
        return self._deliver(answer, event)

    async def _ask(
        self, stop: LoopAbort, context: Context, event: ToolCallEvent
    ) -> tuple[Any, str | None] | None:
        """AG2's human input for the stopped call: the person's (choice, note), or ``None``
        when nobody can answer (no hook, a timeout, a failed channel) or no answer was
        understood after :data:`MAX_ASKS` tries (then the run stops)."""
        tokens = self.tokens
        report = stop_report(stop).with_usage(
            tokens=int(tokens) if tokens else None, turns=self.turns or None
        )
        error: str | None = None
        for _ in range(MAX_ASKS):
            request = ToolApprovalRequest(text_question(report, error), tool_call_id=event.id)
            try:
                given = await context.ask(request)
            except HumanInputNotProvidedError:
                return None  # no human-input hook: nobody to ask
            except HumanInputError:
                logger.warning("nobody answered loopwarden's question; the run ends", exc_info=True)
                return None
            reply = read_answer(given)
            if reply is not None:
                return reply
            error = f"loopwarden did not understand the answer {given[:80]!r}."
        return ("stop", None)

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
            # A call AG2 answers itself cannot be put to a person: ask acts as answer.
            try:
                ending = self.owner.mode() != "raise"
            except Exception:
                logger.exception("loopwarden could not handle a stop (onStop); raising it")
                ending = False
            self._hold(stop, ending)
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


def _without_tools(call: Any) -> functools.partial[Any] | None:
    """``call`` (AG2's chain of middleware around its model client) with the client's tools
    taken away, or ``None`` when the chain is not the one AG2 builds.

    AG2 binds the turn's tools to the client with ``functools.partial`` and wraps each
    middleware's ``on_llm_call`` around it the same way: the chain is rebuilt with
    ``tools=[]`` at its end, so inner middleware still sees the last call.
    """
    if not isinstance(call, functools.partial):
        return None
    if "tools" in call.keywords:
        return functools.partial(call.func, *call.args, **{**call.keywords, "tools": []})
    if not call.args:
        return None
    inner = _without_tools(call.args[0])
    if inner is None:
        return None
    return functools.partial(call.func, inner, *call.args[1:], **call.keywords)


def _final(
    report: StopReport, response: ModelResponse | None, *, structured: bool = False
) -> ModelResponse:
    """The turn's reply: the model's text with the stop's summary as its last paragraph (a
    structured reply keeps its text), the report in its metadata; the fallback text when
    the last call failed or still asked for tools."""
    found = report.to_dict()
    message = response.message if response is not None else None
    text = message.content if message is not None else None
    usage = response.usage if response is not None else Usage()
    if response is None or response.tool_calls or not text or not text.strip():
        final = ModelMessage(fallback_answer(report), metadata={METADATA_KEY: found})
        return ModelResponse(final, usage=usage)
    assert message is not None
    content = text if structured else with_summary(text, report)
    final = ModelMessage(content, metadata={**message.metadata, METADATA_KEY: found})
    return ModelResponse(
        final,
        usage=usage,
        files=list(response.files),
        model=response.model,
        provider=response.provider,
        finish_reason=response.finish_reason,
        response_id=response.response_id,
    )
