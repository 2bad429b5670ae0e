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
  retry budget used); a stop (the circuit breaker, the post-compaction guard)
  does what ``on_stop`` says (below).
* When loopwarden stops the run (``on_stop``, else ``loopwarden.onStop``, else
  ``ask`` when the agent's output type admits ``DeferredToolRequests`` and
  ``answer`` when it does not):

  - ``answer``: the stopped call fails with the stop's message, and the run's
    next model request is its last: ``prepare_tools`` leaves no function tools,
    ``before_model_request`` drops the output tools (when the output may be
    text) and adds the final-answer instruction, and ``after_model_request``
    makes the response the final answer: its text with the stop's summary as its
    last paragraph (``stopping.fallback_answer`` when it still asks for tools or
    the request fails), the report in its ``metadata["loopwarden"]`` and in the
    run result's ``metadata["loopwarden"]``.
  - ``ask``: the stopped call raises ``ApprovalRequired`` with the question,
    the choices and the report in its metadata, so the run ends with
    ``DeferredToolRequests``; :func:`answer_stop` turns the person's choice into
    the ``DeferredToolResults`` that resume it, and the resumed call applies it
    with :meth:`~loopwarden.RunGuard.resume` in the same loopwarden run.
  - ``raise``: :class:`~loopwarden.errors.CircuitBreakerTripped` /
    :class:`~loopwarden.errors.CompactionLoopPersisted` out of ``run``.
* ``after_model_request``: tool calls to names that are not registered never
  reach the tool hooks, so they are counted here (unknown-tool guard); a
  ``CompactionPart`` in the response (provider compaction) or a new one in the
  request history (a summary written by a history processor) arms the
  post-compaction guard.
* ``wrap_run``: forgets the run's state when it ends, however it ends (but
  keeps a run that waits for a person's answer).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from .._logging import logger
from ..config import ConfigSource
from ..errors import CircuitBreakerTripped, LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import (
    Choice,
    OnStop,
    StopReport,
    ask_options,
    ask_question,
    choose_on_stop,
    fallback_answer,
    final_answer_request,
    parse_choice,
)
from ._base import (
    Answer,
    RunRegistry,
    aguarded_call,
    append_note,
    parse_arguments,
    require,
    resolve_guard,
    stop_report,
)

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
    TextPart,
    ToolCallPart,
)
from pydantic_ai.tools import (  # noqa: E402
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDefinition,
)

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import (
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult

__all__ = ["KEY", "LoopGuardCapability", "answer_stop"]

# Not outcomes: the call was deferred for approval or for an external executor.
_DEFERRALS = (CallDeferred, ApprovalRequired)
KEY = "loopwarden"
"""The key of loopwarden's entry in deferred-call, response and run-result metadata."""
# Added to final_answer_request when the run's output is structured: the last request
# keeps the output tools (or format), since the output must still be of its type.
_STRUCTURED = (
    " Give that answer as your final result, in the output format you were given "
    "(the final result tool, where you have one)."
)


class LoopGuardCapability(AbstractCapability[Any]):
    """Tool-loop detection for Pydantic AI agents.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
        agent_id: the agent whose per-agent config block applies; defaults to
            the agent's ``name``.
        on_stop: what a stop does: ``"answer"`` (a last model request without
            tools writes the run's output), ``"ask"`` (the run ends with
            ``DeferredToolRequests`` for a person to answer; needs an output type
            that admits them, else it acts as ``"answer"``) or ``"raise"``.
            ``None``: the config's ``loopwarden.onStop``, else ``"ask"`` when the
            agent's ``output_type`` admits ``DeferredToolRequests`` and
            ``"answer"`` when it does not.
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
        on_stop: OnStop | None = None,
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id
        # Checked now, so that a wrong value fails here and not at the first stop.
        choose_on_stop(on_stop, self.guard.config.settings.on_stop, person=True)
        self.on_stop = on_stop
        # Stops put to a person, by the asked call's id, until the run that brings the
        # answer (shared by every run's copy: the answer comes in a later run).
        self._asks: RunRegistry[str, LoopAbort] = RunRegistry()
        # Per-run fields, set on the copy that for_run() returns.
        self._run: RunGuard | None = None
        self._tool_names: frozenset[str] | None = None
        self._scanned = 0
        self._last_summary: CompactionPart | None = None
        self._mode: OnStop = "raise"
        # This run ends with a question for a person (its loopwarden run is kept).
        self._asked = False
        # This run ends with a last answer: the stop and its report.
        self._stop: _Ending | None = None

    async def for_run(self, ctx: RunContext[Any]) -> LoopGuardCapability:
        bound = copy.copy(self)
        bound._tool_names = None
        bound._asked = False
        bound._stop = None
        try:
            agent_id = self.agent_id
            if agent_id is None and ctx.agent is not None:
                agent_id = ctx.agent.name
            person = ctx.agent is not None and _admits_deferred(ctx.agent.output_type)
            bound._mode = choose_on_stop(
                self.on_stop, self.guard.config.settings.on_stop, person=person
            )
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
            result = await handler()
            if self._stop is not None:
                _tag_result(result, self._stop.report)
            return result
        finally:
            # A run that asked a person keeps its state: the run that brings the answer
            # goes on with it (or the store's TTL forgets it).
            if self._run is not None and not self._asked:
                self._run.end()

    # -- the last model request after a stop (onStop "answer") -------------------------
    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        return [] if self._stop is not None else tool_defs

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        ending = self._stop
        if ending is None:
            return request_context
        try:
            params = request_context.model_request_parameters
            ending.plain = params.allow_text_output and params.output_object is None
            changes: dict[str, Any] = {"function_tools": [], "native_tools": []}
            if ending.plain:
                changes["output_tools"] = []  # the output may be text: no tools at all
            last = dataclasses.replace(
                request_context, model_request_parameters=dataclasses.replace(params, **changes)
            )
        except Exception:  # prepare_tools has removed the function tools all the same
            logger.exception("loopwarden could not prepare the last model request")
            return request_context
        if not ending.instructed:  # once, even if the request is made again
            ending.instructed = True
            instruction = final_answer_request(ending.report)
            _enqueue(ctx, instruction if ending.plain else instruction + _STRUCTURED)
        return last

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        ending = self._stop
        if ending is None:
            raise error
        logger.error("loopwarden's last model request failed (%s); ending with the summary", error)
        if not ending.plain:
            raise ending.stop from error  # no output of the run's type to give
        report = ending.report
        return ModelResponse(
            parts=[TextPart(fallback_answer(report))], metadata={KEY: report.to_dict()}
        )

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
        if self._stop is not None:
            return _final(request_context, response, self._stop)
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
            except LoopAbort as stop:
                if self._mode == "raise":
                    raise
                # No tool runs, so there is no call to defer for a person: whatever the
                # mode, Pydantic AI answers this call and the next request is the last.
                if self._stop is None:
                    self._stop = _Ending(stop, _with_usage(ctx, stop_report(stop)))
                break
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
        try:
            if ctx.tool_call_approved and (
                call_id in self._asks or _answer_of(ctx.tool_call_metadata) is not None
            ):
                return await self._resumed(ctx, call, params, args, handler)
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
        except LoopAbort as stop:
            self._on_stop(ctx, run, call, stop)
        if answer.note is None and not answer.blocked:
            return answer.value  # the common case, inline
        return _delivered(ctx, answer)

    # -- when loopwarden stops the run (onStop) ----------------------------------------
    def _on_stop(
        self, ctx: RunContext[Any], run: RunGuard, call: ToolCallPart, stop: LoopAbort
    ) -> NoReturn:
        """Raise what the stop becomes: the stop itself (``raise``), a deferral for a
        person (``ask``), or the failed call that makes the next request the last."""
        mode = self._mode
        if mode == "raise":
            raise stop
        try:
            report = _with_usage(ctx, stop_report(stop))
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            raise stop from None
        if mode == "ask" and stop.askable and stop.call_id is not None:
            # One question per run: the call of the stopped tool that gets here first.
            if not self._asked and call.tool_name == stop.tool_name:
                self._asked = True
                stop.report = report  # what the run had used, for the answer "stop"
                self._asks[stop.call_id] = stop.with_traceback(None)  # not its frames
                raise ApprovalRequired(metadata={KEY: _question(report, stop)})
            raise ToolFailed(stop.message)  # a parallel call: the run waits for the answer
        self._end_with_answer(stop, report)

    def _end_with_answer(self, stop: LoopAbort, report: StopReport) -> NoReturn:
        """Fail the stopped call; the run's next model request is its last."""
        if self._stop is None:
            self._stop = _Ending(stop, report)
        raise ToolFailed(stop.message)

    async def _resumed(
        self,
        ctx: RunContext[Any],
        call: ToolCallPart,
        params: Any,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """A call loopwarden put to a person, approved with their answer (:func:`answer_stop`;
        a bare ``ToolApproved()`` lets it run once): applied in the run that asked."""
        call_id = call.tool_call_id
        given = _answer_of(ctx.tool_call_metadata) or {}
        choice = parse_choice(given.get("choice", "allow_once"))
        if choice is None:
            raise ValueError(
                f"loopwarden: unknown answer {given.get('choice')!r} for call {call_id!r}: "
                "allow_once, stop or continue"
            )
        stop = self._asks.forget(call_id) or _rebuilt_stop(given, call)
        if stop is None:  # an answer to a question this process never asked, without a report
            raise ValueError(f"loopwarden: no question was asked about call {call_id!r}")
        run = self._adopt(ctx, stop)
        note = given.get("note")
        try:
            decision = await run.aresume(stop, choice, None if note is None else str(note))
        except LoopAbort as final:  # "stop", or a stop no person may lift
            self._end_with_answer(final, stop_report(final))
        if decision.action != "allow":
            return decision.message or ""  # "continue": the person's note answers the call
        answer = await aguarded_call(
            run,
            call.tool_name,
            params,
            call_id,
            handler,
            args,
            failure=_failure,
            on_failure_note=lambda text: _enqueue(ctx, text),
            decided=decision,
        )
        return _delivered(ctx, answer)

    def _adopt(self, ctx: RunContext[Any], stop: LoopAbort) -> RunGuard:
        """Go on with the loopwarden run that asked (this agent run started a fresh one)."""
        current = self._run
        assert current is not None  # wrap_tool_execute checked
        asked = stop.report.run_id if stop.report is not None else None
        if asked is None or current.run_id == asked:
            return current
        run = self.guard.run(asked, session_id=ctx.conversation_id, agent_id=current.agent_id)
        current.end()  # nothing ran in it: the answered calls come first in a resumed run
        self._run = run
        self._tool_names = None
        return run


class _Ending:
    """A run that ends with a last answer: the stop, its report, its last request."""

    __slots__ = ("instructed", "plain", "report", "stop")

    def __init__(self, stop: LoopAbort, report: StopReport) -> None:
        self.stop = stop
        self.report = report
        # The run's output may be text: the summary is appended, the fallback is text.
        self.plain = True
        self.instructed = False


def answer_stop(
    requests: DeferredToolRequests,
    choice: Choice | str,
    note: str | None = None,
    *,
    results: DeferredToolResults | None = None,
) -> DeferredToolResults:
    """The ``DeferredToolResults`` that resume a run loopwarden ended to ask a person.

    ``choice``: ``"allow_once"`` (the call runs once more), ``"stop"`` (the run ends
    with a last answer) or ``"continue"`` (the model reads ``note`` instead of the
    call's result, and the run goes on). Each of loopwarden's questions in ``requests``
    is approved with the choice in its metadata, for the capability to apply; other
    approvals are left to you, in ``results`` if given (updated and returned).
    """
    parsed = parse_choice(choice)
    if parsed is None:
        raise ValueError(f"unknown answer to a stop {choice!r}: allow_once, stop or continue")
    out = results if results is not None else DeferredToolResults()
    answered = 0
    for part in requests.approvals:
        call_id = part.tool_call_id
        asked = (requests.metadata.get(call_id) or {}).get(KEY)
        if not isinstance(asked, Mapping):
            continue
        out.approvals[call_id] = ToolApproved()
        given: dict[str, Any] = {"choice": parsed, "report": asked.get("report")}
        if note is not None:
            given["note"] = note
        out.metadata[call_id] = {**out.metadata.get(call_id, {}), KEY: given}
        answered += 1
    if not answered:
        raise ValueError("these DeferredToolRequests hold no question from loopwarden")
    return out


# -- helpers --------------------------------------------------------------------------
def _admits_deferred(spec: Any) -> bool:
    """Whether an output type (a type, or a sequence or union of them) admits
    ``DeferredToolRequests``: only then can a run end with a question for a person."""
    if spec is DeferredToolRequests:
        return True
    if isinstance(spec, (list, tuple)):
        return any(_admits_deferred(item) for item in spec)
    if typing.get_origin(spec) in (typing.Union, types.UnionType):
        return any(_admits_deferred(item) for item in typing.get_args(spec))
    return False


def _with_usage(ctx: RunContext[Any], report: StopReport) -> StopReport:
    """The report with the run's usage: its tokens and model requests, and its request
    limit (Pydantic AI's ``UsageLimits.request_limit``, 50 unless set)."""
    usage = ctx.usage
    if not usage.requests:  # a resumed run: its answered calls come before any request
        return report
    limits = ctx.usage_limits
    return report.with_usage(
        tokens=usage.total_tokens,
        turns=usage.requests,
        turn_limit=limits.request_limit if limits is not None else None,
        limit_name="request_limit",
    )


def _question(report: StopReport, stop: LoopAbort) -> dict[str, Any]:
    """What ``DeferredToolRequests.metadata[call_id]["loopwarden"]`` holds."""
    return {
        "question": ask_question(report),
        "options": ask_options(),
        "tool": stop.tool_name,
        "report": report.to_dict(),
    }


def _answer_of(metadata: Any) -> Mapping[str, Any] | None:
    """loopwarden's entry in an approved call's metadata (:func:`answer_stop`)."""
    if not isinstance(metadata, Mapping):
        return None
    found = metadata.get(KEY)
    return found if isinstance(found, Mapping) else None


def _rebuilt_stop(given: Mapping[str, Any], call: ToolCallPart) -> LoopAbort | None:
    """The asked stop, from the report an answer carries back (the question was asked in
    another process; the run is found through a shared store)."""
    report = given.get("report")
    if not isinstance(report, Mapping) or not report.get("run_id"):
        return None
    stop = CircuitBreakerTripped(
        str(report.get("message") or ""),
        tool_name=str(report.get("tool") or call.tool_name),
        count=int(report.get("count") or 0),
        detector=str(report.get("code") or "") or None,
    )
    stop.report = StopReport(
        stop.code,
        stop.tool_name,
        stop.count,
        stop.message,
        int(report.get("calls") or 0),
        int(report.get("refused") or 0),
        str(report["run_id"]),
        _count(report.get("tokens")),
        _count(report.get("turns")),
        _count(report.get("turn_limit")),
        "request_limit" if report.get("turn_limit") is not None else None,
    )
    stop.call_id = call.tool_call_id
    stop._key = call.tool_call_id  # a refused call's key in the run state is its id
    return stop


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _final(
    request_context: ModelRequestContext, response: ModelResponse, ending: _Ending
) -> ModelResponse:
    """The run's last response: its text with the summary as the last paragraph (the
    fallback text when it still asks for tools), the report in its metadata."""
    if response.metadata and KEY in response.metadata:
        return response  # the fallback for a failed request (on_model_request_error)
    report = ending.report
    metadata = {**(response.metadata or {}), KEY: report.to_dict()}
    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    if not ending.plain:
        outputs = {t.name for t in request_context.model_request_parameters.output_tools}
        if any(call.tool_name not in outputs for call in calls):
            raise ending.stop  # no output of the run's type: the stop, as under "raise"
        return dataclasses.replace(response, metadata=metadata)
    texts = [p for p in response.parts if isinstance(p, TextPart)]
    if calls or not any(p.content.strip() for p in texts):
        return dataclasses.replace(
            response, parts=[TextPart(fallback_answer(report))], metadata=metadata
        )
    last = texts[-1]
    summarised = TextPart(f"{last.content}\n\n{report.summary()}")
    parts = [summarised if p is last else p for p in response.parts]
    return dataclasses.replace(response, parts=parts, metadata=metadata)


def _tag_result(result: AgentRunResult[Any], report: StopReport) -> None:
    """The report in the run result's ``metadata["loopwarden"]``."""
    try:
        # AgentRunResult.metadata reads the run state's metadata, which the agent
        # resolves again as the run ends: it is set on that state, once the run ended.
        state = result._state
        state.metadata = {**(state.metadata or {}), KEY: report.to_dict()}
    except Exception:
        logger.exception("loopwarden could not add its report to the run result's metadata")


def _delivered(ctx: RunContext[Any], answer: Answer[Any]) -> Any:
    """A guarded call's result as the model reads it: a blocked call fails with the
    block message; a warning follows the result."""
    if answer.blocked:
        raise ToolFailed(answer.decision.message or "")
    result, note = answer.value, answer.note
    if note is None:
        return result
    if isinstance(result, str):
        return append_note(result, note)
    _enqueue(ctx, note)
    return result


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
