"""LangChain 1.x / LangGraph integration: loop detection as agent middleware.

::

    from langchain.agents import create_agent
    from loopwarden.integrations.langchain import LoopGuardMiddleware

    agent = create_agent(model, tools, middleware=[LoopGuardMiddleware("loopwarden.json5")])

What the middleware does, all through the runtime guard (:mod:`loopwarden.guard`):

* ``wrap_tool_call`` / ``awrap_tool_call``: checks every tool call before it
  runs. A warning is appended to the ``ToolMessage`` the model reads; a blocked
  call is not executed and is answered with ``ToolMessage(status="error")``;
  a stop (the circuit breaker, the post-compaction guard) does what ``on_stop``
  says (below). Tool names the ToolNode does not know (``request.tool is None``)
  are counted by the unknown-tool guard.
* When loopwarden stops the run (``on_stop``, else ``loopwarden.onStop``, else
  ``ask`` when the graph has a checkpointer and ``answer`` when it has none):

  - ``answer``: the stopped call is answered with a ``ToolMessage`` whose
    ``response_metadata["loopwarden"]`` holds the stop's report, and
    ``wrap_model_call`` (which finds that message at the tail of the history)
    makes one last model call with no tools and the final-answer instruction.
    Its ``AIMessage`` ends the run, the report in its
    ``response_metadata["loopwarden"]`` and the stop's summary as its last
    paragraph (``stopping.fallback_answer`` when that call fails or still asks
    for tools).
  - ``ask``: LangGraph's ``interrupt()`` from inside the tool wrapper, with the
    question, the three choices and the report; ``Command(resume={"choice": ...,
    "note": ...})`` (or a plain choice string) applies the answer through
    :meth:`~loopwarden.RunGuard.resume`. ``stop`` ends the run as ``answer`` does.
  - ``raise``: :class:`~loopwarden.errors.CircuitBreakerTripped` /
    :class:`~loopwarden.errors.CompactionLoopPersisted` out of ``invoke``.
* ``before_agent``: starts a new loopwarden run for every invocation (the run
  id is the ``run_id`` of the invocation's config when given, else a fresh
  one) and keeps it in private graph state, so a run resumed after an
  interrupt keeps its counts while the next invocation on the same thread
  starts afresh. The thread id is the session id.
* A new ``SummarizationMiddleware`` summary at the head of the history arms
  the post-compaction guard (checked at the next tool call).
* ``after_agent``: forgets the finished run's state.
* After a stop under ``raise``, the stopped turn's tool calls have no answers
  in a checkpointed thread (the ToolNode failed). The next invocation on the
  thread answers them first, with the stop message as a
  ``ToolMessage(status="error")`` placed right after the calls, so that the
  thread continues with a history every provider accepts.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, cast

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, ToolOutcome
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
    guarded_call,
    learn_tool,
    require,
    resolve_guard,
    stop_report,
)

require("langchain.agents", "langchain")
require("langgraph", "langchain")

from typing import NotRequired  # noqa: E402

from langchain.agents.middleware import (  # noqa: E402 - after the extra check on purpose
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import PrivateStateAttr  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.config import get_config  # noqa: E402
from langgraph.errors import GraphBubbleUp  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402
from langgraph.prebuilt.tool_node import ToolCallRequest  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

__all__ = ["LoopGuardMiddleware", "LoopGuardState"]

RUN_KEY = "loopwarden_run_id"
SUMMARY_KEY = "loopwarden_summary_id"
# SummarizationMiddleware marks the summary message it puts at the head of the history.
_SUMMARY_SOURCE = "summarization"
# LangChain's own answer to a call of a tool the ToolNode does not have.
_NOT_A_TOOL = "is not a valid tool"

ToolResult = ToolMessage | Command[Any]
ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
# Where LangGraph puts the run's checkpointer in a task's config (None without one): an
# interrupt can only be answered in a graph that has one. Read, not imported: LangGraph
# keeps the name among its backward-compatible constants only.
_CHECKPOINTER_KEY = "__pregel_checkpointer"
# The action in a ToolMessage's response_metadata["loopwarden"] that makes the next model
# call the run's last (onStop "answer", or a person's "stop").
_STOP = "stop"


class LoopGuardState(AgentState[Any]):
    """Agent state with loopwarden's private keys (never part of input or output)."""

    loopwarden_run_id: NotRequired[Annotated[str | None, PrivateStateAttr]]
    loopwarden_summary_id: NotRequired[Annotated[str | None, PrivateStateAttr]]


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any, Any]):
    """Tool-loop detection for ``create_agent`` agents.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
        agent_id: the agent whose per-agent config block applies; defaults to
            the ``name`` given to ``create_agent``.
        on_stop: what a stop does: ``"answer"`` (a last model call without tools
            writes the run's final answer), ``"ask"`` (LangGraph ``interrupt()``:
            the caller resumes with the person's choice; needs a checkpointer,
            else it acts as ``"answer"``) or ``"raise"``. ``None``: the config's
            ``loopwarden.onStop``, else ``"ask"`` when the graph has a
            checkpointer and ``"answer"`` when it has none.
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.

    List it before middleware that catches tool exceptions or retries tools
    (``ToolRetryMiddleware``, ``ToolErrorMiddleware``), so that loopwarden's
    stop reaches the caller and retries count as one call. Its place relative
    to ``SummarizationMiddleware`` does not matter.
    """

    state_schema = LoopGuardState

    def __init__(
        self,
        config_or_guard: LoopGuard | ConfigSource = None,
        *,
        agent_id: str | None = None,
        on_stop: OnStop | None = None,
        **guard_kwargs: Any,
    ) -> None:
        super().__init__()
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id
        # Checked now, so that a wrong value fails here and not at the first stop.
        choose_on_stop(on_stop, self.guard.config.settings.on_stop, person=True)
        self.on_stop = on_stop
        self._runs: RunRegistry[tuple[str, str | None], _Run] = RunRegistry()
        self._lock = threading.Lock()
        # Names the ToolNode does not have but some inner middleware answered.
        self._answered: set[str] = set()
        # Runs waiting for a person's answer (onStop "ask"): (run id, session) -> the
        # asked call's id and its stop. The asked call runs again when the graph resumes.
        self._asking: RunRegistry[tuple[str, str | None], tuple[str, LoopAbort]] = RunRegistry()

    # -- run identity -----------------------------------------------------------
    def _tool_run(self, request: ToolCallRequest) -> RunGuard:
        """The run guard of the invocation a tool call belongs to (created on first use).

        Also arms its post-compaction guard when a summary this run has not seen
        heads the history: checked here rather than in a model hook because every
        ``wrap_*`` hook costs a traced call in LangChain.
        """
        state = request.state
        runtime = request.runtime
        config = runtime.config
        if type(state) is dict:  # what create_agent passes: no helper call per tool call
            run_id, messages = state.get(RUN_KEY), state.get("messages")
        else:
            run_id, messages = _state_get(state, RUN_KEY), _state_get(state, "messages")
        thread = (config.get("configurable") or {}).get("thread_id")
        session = None if thread is None else str(thread)
        if not run_id:
            # State from before this middleware was added: one run per thread.
            run_id = f"thread-{session}" if session is not None else "default"
        key = (run_id, session)
        entry = self._runs.get(key)
        if entry is None:
            agent_id = self.agent_id
            if agent_id is None:
                agent_id = (config.get("metadata") or {}).get("lc_agent_name")

            def create() -> _Run:
                # The ToolNode's tools, and tools other middleware answered: a name
                # outside them is an unknown tool.
                tools = getattr(runtime, "tools", None)
                run = self.guard.run(
                    run_id,
                    session_id=session,
                    agent_id=agent_id,
                    tools=None if tools is None else [*(t.name for t in tools), *self._answered],
                )
                return _Run(run, _state_get(state, SUMMARY_KEY))

            entry = self._runs.get_or_create(key, create)
        summary = _summary_of(messages)
        if summary is not None and summary != entry.summary:
            with self._lock:  # parallel calls of one turn: arm once, before any of them runs
                if summary != entry.summary:
                    entry.summary = summary
                    entry.run.on_compaction()
        return entry.run

    def _start(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        try:
            info = getattr(runtime, "execution_info", None)
            given = getattr(info, "run_id", None)
            update: dict[str, Any] = {RUN_KEY: str(given) if given else uuid.uuid4().hex}
            # A summary from an earlier invocation is not a compaction of this run.
            summary = _summary_id(state)
            if summary != _state_get(state, SUMMARY_KEY):
                update[SUMMARY_KEY] = summary
            repaired = self._answer_stopped_calls(state, runtime)
            if repaired is not None:
                update["messages"] = repaired
            return update
        except Exception:
            logger.exception("loopwarden could not start a LangChain run; guarding without it")
            return None

    def _answer_stopped_calls(self, state: Any, runtime: Runtime[Any]) -> list[Any] | None:
        """The history rewritten so that a stopped turn's unanswered calls have answers.

        ``None`` (most invocations) when the latest tool-calling turn is fully
        answered, or when its calls were left unanswered by something other
        than a loopwarden stop (an interrupt the caller chose not to resume).
        """
        messages = _state_get(state, "messages")
        if not messages:
            return None
        at, missing = _unanswered(messages)
        if not missing:
            return None
        previous = _state_get(state, RUN_KEY)
        if not previous:
            return None
        config = runtime.config if hasattr(runtime, "config") else get_config()
        thread = (config.get("configurable") or {}).get("thread_id")
        session = None if thread is None else str(thread)
        agent_id = self.agent_id
        if agent_id is None:
            agent_id = (config.get("metadata") or {}).get("lc_agent_name")
        old = self.guard.run(previous, session_id=session, agent_id=agent_id)
        stopped = old.snapshot()["stopped"]
        # Either way that run is over: a stopped one's calls are answered now, and an
        # interrupted one the caller did not resume cannot be resumed any more.
        old.end()
        self._runs.forget((previous, session))
        self._asking.forget((previous, session))
        if stopped is None:
            return None
        text = str(stopped["message"])
        answers = [
            ToolMessage(
                content=text,
                name=call["name"],
                tool_call_id=call["id"] or "",
                status="error",
                response_metadata={
                    "loopwarden": {
                        "action": "stop",
                        "detector": stopped["code"],
                        "count": stopped["count"],
                    }
                },
            )
            for call in missing
        ]
        # add_messages keeps positions: the answers must follow the calls, so the
        # history is written again (once, on the first invocation after a stop).
        return [
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            *messages[: at + 1],
            *answers,
            *messages[at + 1 :],
        ]

    def _finish(self, state: LoopGuardState) -> None:
        try:
            run_id = _state_get(state, RUN_KEY)
            if not run_id:
                return
            config = get_config()
            thread = (config.get("configurable") or {}).get("thread_id")
            session = None if thread is None else str(thread)
            entry = self._runs.forget((run_id, session))
            if entry is not None:
                run = entry.run
            else:  # its calls ran in another process (a shared store) or there were none
                agent_id = self.agent_id
                if agent_id is None:
                    agent_id = (config.get("metadata") or {}).get("lc_agent_name")
                run = self.guard.run(run_id, session_id=session, agent_id=agent_id)
        except Exception:
            logger.exception("loopwarden could not end a LangChain run")
            return
        run.end()

    def before_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._start(state, runtime)

    async def abefore_agent(
        self, state: LoopGuardState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._start(state, runtime)

    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._finish(state)
        return None

    async def aafter_agent(
        self, state: LoopGuardState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        self._finish(state)
        return None

    # -- tool calls -------------------------------------------------------------------
    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        try:
            run = self._tool_run(request)
        except Exception:
            logger.exception("loopwarden could not guard a LangChain tool call; running it")
            return handler(request)
        call = request.tool_call
        call_id = call.get("id")
        try:
            if self._asking and self._asked(run, call_id):
                return self._resume(run, request, handler)
            answer = guarded_call(
                run,
                call["name"],
                call["args"],
                call_id,
                handler,
                request,
                read=_read,
                failure=_failure,
            )
        except LoopAbort as stop:
            return self._on_stop(run, request, stop, handler)
        if answer.note is None and not answer.blocked and request.tool is not None:
            return answer.value  # type: ignore[return-value]  # not blocked: the handler's result
        return self._deliver(run, request, answer)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        try:
            run = self._tool_run(request)
        except Exception:
            logger.exception("loopwarden could not guard a LangChain tool call; running it")
            return await handler(request)
        call = request.tool_call
        call_id = call.get("id")
        try:
            if self._asking and self._asked(run, call_id):
                return await self._aresume(run, request, handler)
            answer = await aguarded_call(
                run,
                call["name"],
                call["args"],
                call_id,
                handler,
                request,
                read=_read,
                failure=_failure,
            )
        except LoopAbort as stop:
            return await self._aon_stop(run, request, stop, handler)
        if answer.note is None and not answer.blocked and request.tool is not None:
            return answer.value  # type: ignore[return-value]  # not blocked: the handler's result
        return self._deliver(run, request, answer)

    def _deliver(
        self, run: RunGuard, request: ToolCallRequest, answer: Answer[ToolResult]
    ) -> ToolResult:
        call = request.tool_call
        if answer.blocked:
            return _blocked(call["name"], call.get("id"), answer.decision)
        result = cast("ToolResult", answer.value)  # not blocked: what the handler returned
        if request.tool is None or answer.note is not None:
            message = _found(result, call.get("id"))
            if request.tool is None:
                self._learn(run, call["name"], message)
            if answer.note is not None and message is not None:
                noted: ToolResult = _deliver(result, message, answer.note)
                return noted
        return result

    def _learn(self, run: RunGuard, name: str, message: ToolMessage | None) -> None:
        """A name the ToolNode lacks that something inside answered is a tool after all."""
        if message is not None and _not_a_tool(message, name):
            return  # the ToolNode's own answer: really unknown
        with self._lock:
            self._answered.add(name)
            if run.tools is not None:
                learn_tool(run, name, True)

    # -- when loopwarden stops the run (onStop) ----------------------------------------
    def _mode(self, request: ToolCallRequest) -> OnStop:
        """This invocation's onStop: a person can be asked only where an interrupt can be
        resumed, i.e. in a graph with a checkpointer."""
        config = getattr(request.runtime, "config", None) or {}
        person = (config.get("configurable") or {}).get(_CHECKPOINTER_KEY) is not None
        return choose_on_stop(self.on_stop, self.guard.config.settings.on_stop, person=person)

    def _asked(self, run: RunGuard, call_id: str | None) -> bool:
        """Whether this call is the one its run asked a person about (it runs again when
        the graph resumes with the answer)."""
        asked = self._asking.get((run.run_id, run.session_id))
        return asked is not None and asked[0] == call_id

    def _triage(self, run: RunGuard, request: ToolCallRequest, stop: LoopAbort) -> str:
        """What a stop does to this call: ``"raise"``, ``"ask"`` (this call is put to a
        person), ``"refuse"`` (another call of the turn is being asked about) or
        ``"answer"`` (the run ends with a last answer)."""
        mode = self._mode(request)
        if mode == "raise":
            return "raise"
        if mode != "ask" or not stop.askable or stop.call_id is None:
            return "answer"
        # One question per stopped turn: the call of the stopped tool that gets here first.
        # Parallel calls refused because the run stopped are answered without running;
        # whether the run ends is the person's answer to the question.
        if request.tool_call["name"] != stop.tool_name:
            return "refuse"
        call_id = stop.call_id
        key = (run.run_id, run.session_id)
        # Kept until the answer comes: without its traceback, which holds the graph's frames.
        asked = self._asking.get_or_create(key, lambda: (call_id, stop.with_traceback(None)))
        return "ask" if asked[0] == call_id else "refuse"

    def _triaged(self, run: RunGuard, request: ToolCallRequest, stop: LoopAbort) -> str:
        try:
            return self._triage(run, request, stop)
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            return "raise"

    def _on_stop(
        self,
        run: RunGuard,
        request: ToolCallRequest,
        stop: LoopAbort,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        what = self._triaged(run, request, stop)
        if what == "raise":
            raise stop
        if what == "ask":
            return self._resume(run, request, handler)
        return _stopped(request, stop, _STOP if what == "answer" else "refused")

    async def _aon_stop(
        self,
        run: RunGuard,
        request: ToolCallRequest,
        stop: LoopAbort,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        what = self._triaged(run, request, stop)
        if what == "raise":
            raise stop
        if what == "ask":
            return await self._aresume(run, request, handler)
        return _stopped(request, stop, _STOP if what == "answer" else "refused")

    def _question(
        self, run: RunGuard, request: ToolCallRequest
    ) -> tuple[LoopAbort, Choice, str | None]:
        """Ask the person (LangGraph ``interrupt``) about the stop of ``run``: the stop,
        and the person's choice and note. The first time, ``interrupt`` ends the graph's
        step; when the caller resumes it, the call runs again and gets the answer here."""
        key = (run.run_id, run.session_id)
        asked = self._asking.get(key)
        assert asked is not None  # _triage put it there
        stop = asked[1]
        tokens, turns = _usage(_state_get(request.state, "messages") or [])
        payload = _ask_payload(stop, stop_report(stop).with_usage(tokens=tokens, turns=turns))
        while True:
            value = interrupt(payload)
            choice, note = _parse_answer(value)
            if choice is not None:
                break
            # Not one of the three: ask again, saying what was wrong.
            given = value.get("choice") if isinstance(value, Mapping) else value
            payload = {
                **payload,
                "error": f"unknown answer {given!r}: choose allow_once, stop or continue",
            }
        self._asking.forget(key)
        return stop, choice, note

    def _resume(
        self,
        run: RunGuard,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        stop, choice, note = self._question(run, request)
        try:
            decision = run.resume(stop, choice, note)
        except LoopAbort as final:  # "stop", or a stop no person may lift
            return _stopped(request, final, _STOP)
        if decision.action != "allow":
            return _continued(request, decision)
        call = request.tool_call
        answer = guarded_call(
            run,
            call["name"],
            call["args"],
            call.get("id"),
            handler,
            request,
            read=_read,
            failure=_failure,
            decided=decision,
        )
        return self._deliver(run, request, answer)

    async def _aresume(
        self,
        run: RunGuard,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        stop, choice, note = self._question(run, request)
        try:
            decision = (
                run.resume(stop, choice, note)
                if run.inline
                else await run.aresume(stop, choice, note)
            )
        except LoopAbort as final:
            return _stopped(request, final, _STOP)
        if decision.action != "allow":
            return _continued(request, decision)
        call = request.tool_call
        answer = await aguarded_call(
            run,
            call["name"],
            call["args"],
            call.get("id"),
            handler,
            request,
            read=_read,
            failure=_failure,
            decided=decision,
        )
        return self._deliver(run, request, answer)

    # -- the last model call after a stop ----------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any]:
        ending = _ending(request)
        if ending is None:
            return handler(request)
        report, last = ending
        try:
            response: ModelResponse[Any] | None = handler(last)
        except GraphBubbleUp:
            raise
        except Exception:
            logger.exception("loopwarden's last model call failed; ending with the stop's summary")
            response = None
        return _final_response(report, response, last)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any]:
        ending = _ending(request)
        if ending is None:
            return await handler(request)
        report, last = ending
        try:
            response: ModelResponse[Any] | None = await handler(last)
        except GraphBubbleUp:
            raise
        except Exception:
            logger.exception("loopwarden's last model call failed; ending with the stop's summary")
            response = None
        return _final_response(report, response, last)


class _Run:
    """A run guard and the summary its run last saw."""

    __slots__ = ("run", "summary")

    def __init__(self, run: RunGuard, summary: str | None) -> None:
        self.run = run
        self.summary = summary


# -- helpers ------------------------------------------------------------------------------
def _state_get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _summary_id(state: Any) -> str | None:
    """The id of the SummarizationMiddleware summary heading the history, if there is one."""
    return _summary_of(_state_get(state, "messages"))


def _summary_of(messages: Any) -> str | None:
    if not messages:
        return None
    head = messages[0]
    extra = getattr(head, "additional_kwargs", None)
    if not extra or extra.get("lc_source") != _SUMMARY_SOURCE:
        return None
    return str(head.id) if head.id is not None else f"summary:{head.content!s:.64}"


def _blocked(name: str, call_id: str | None, decision: Decision) -> ToolMessage:
    detection = decision.detection
    return ToolMessage(
        content=decision.message or "",
        name=name,
        tool_call_id=call_id or "",
        status="error",
        response_metadata={
            "loopwarden": {
                "action": "block",
                "detector": detection.detector if detection is not None else None,
                "count": detection.count if detection is not None else None,
            }
        },
    )


def _tool_message(result: Any, call_id: str | None) -> ToolMessage | None:
    """The ToolMessage that answers ``call_id`` inside a handler result."""
    if isinstance(result, ToolMessage):
        return result
    if isinstance(result, Command):
        update = result.update
        items = update.get("messages") if isinstance(update, Mapping) else None
    elif isinstance(result, list):
        items = result
    else:
        return None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, ToolMessage) and item.tool_call_id == call_id:
            return item
        if isinstance(item, Command):
            found = _tool_message(item, call_id)
            if found is not None:
                return found
    return None


def _unanswered(messages: list[Any]) -> tuple[int, list[Any]]:
    """The index of the latest AI message with tool calls, and its calls without an answer."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and message.tool_calls:
            answered = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolMessage)}
            return index, [c for c in message.tool_calls if c.get("id") not in answered]
        if isinstance(message, (ToolMessage, AIMessage)):
            return index, []  # the newest turn's calls were answered, or it made none
    return -1, []


def _not_a_tool(message: ToolMessage, name: str) -> bool:
    if message.status != "error":
        return False
    text = message.content if isinstance(message.content, str) else message.text
    return text.startswith(f"Error: {name} {_NOT_A_TOOL}")


def _found(result: Any, call_id: str | None) -> ToolMessage | None:
    try:
        return _tool_message(result, call_id)
    except Exception:
        logger.exception("loopwarden could not read a LangChain tool result")
        return None


def _read(result: Any, call_id: str | None) -> Any:
    """The outcome to record: the content the model reads (not the message's ids)."""
    try:
        message = result if type(result) is ToolMessage else _tool_message(result, call_id)
    except Exception:
        logger.exception("loopwarden could not read a LangChain tool result; not recording it")
        return MISSING
    if message is None:
        return MISSING  # e.g. a Command without a ToolMessage for this call
    content = message.content
    if message.status == "error":
        text = content if isinstance(content, str) else message.text or "error"
        name = message.name
        unknown = name if name is not None and _not_a_tool(message, name) else None
        return ToolOutcome(error=text, unknown_tool=unknown)
    artifact = message.artifact
    if artifact is None:
        return content
    details = artifact if isinstance(artifact, Mapping) else {"artifact": artifact}
    return ToolOutcome(content, details)


def _failure(exc: BaseException) -> ToolOutcome | None:
    if isinstance(exc, GraphBubbleUp):
        return None  # an interrupt, not an outcome: the call runs again on resume
    return ToolOutcome(error=exc)


def _deliver(result: Any, message: ToolMessage, note: str) -> Any:
    try:
        return _with_note(result, message, note)
    except Exception:
        logger.exception("loopwarden could not add its note to a LangChain tool result")
        return result


def _noted(message: ToolMessage, note: str) -> ToolMessage:
    content = message.content
    # A ToolMessage's content is a string or a list of content blocks.
    new: Any = (
        append_note(content, note)
        if isinstance(content, str)
        else [*content, {"type": "text", "text": note}]
    )
    return message.model_copy(update={"content": new})


def _with_note(result: Any, message: ToolMessage, note: str) -> Any:
    """``result`` with the warning appended to the ToolMessage the model reads."""
    if result is message:
        return _noted(message, note)
    if isinstance(result, list):
        return [_with_note(item, message, note) for item in result]
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        update = dict(result.update)
        messages = update.get("messages")
        if isinstance(messages, list):
            update["messages"] = [
                _noted(item, note) if item is message else item for item in messages
            ]
        return dataclasses.replace(result, update=update)
    return result


# -- onStop helpers ---------------------------------------------------------------------
def _stopped(request: ToolCallRequest, stop: LoopAbort, action: str) -> ToolMessage:
    """The answer to a call the stop refused: the stop's message, its report in the
    metadata. ``action`` ``"stop"`` makes the next model call the run's last one;
    ``"refused"`` answers a parallel call while another one is put to a person."""
    call = request.tool_call
    return ToolMessage(
        content=stop.message,
        name=call["name"],
        tool_call_id=call.get("id") or "",
        status="error",
        response_metadata={"loopwarden": {**stop_report(stop).to_dict(), "action": action}},
    )


def _continued(request: ToolCallRequest, decision: Decision) -> ToolMessage:
    """A person let the run go on (``continue``): their note answers the call."""
    call = request.tool_call
    return ToolMessage(
        content=decision.message or "",
        name=call["name"],
        tool_call_id=call.get("id") or "",
        response_metadata={"loopwarden": {"action": "continue"}},
    )


def _ask_payload(stop: LoopAbort, report: StopReport) -> dict[str, Any]:
    """What the caller finds in ``Interrupt.value``: the question for the person."""
    return {
        "loopwarden": True,
        "question": ask_question(report),
        "options": ask_options(),
        "tool": stop.tool_name,
        "call_id": stop.call_id,
        "report": report.to_dict(),
    }


def _parse_answer(value: Any) -> tuple[Choice | None, str | None]:
    """A resume value as (choice, note): ``{"choice": ..., "note": ...}`` or a choice."""
    note: Any = None
    choice: Any = value
    if isinstance(value, Mapping):
        choice, note = value.get("choice"), value.get("note")
    parsed = parse_choice(choice)
    return parsed, (str(note) if note is not None and parsed is not None else None)


def _stop_at_tail(messages: list[Any]) -> Mapping[str, Any] | None:
    """The report of a stop that ends the run: a tool answer marked ``"stop"`` among the
    answers that close the history (the newest turn's only: cheap on every model call)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, ToolMessage):
            return None
        found = message.response_metadata.get("loopwarden")
        if isinstance(found, Mapping) and found.get("action") == _STOP:
            return found
    return None


def _ending(request: ModelRequest[Any]) -> tuple[StopReport, ModelRequest[Any]] | None:
    """The report and the last request of a run that a stop ends; ``None`` for any other
    model call (and when that cannot be made out: the model is then called as usual)."""
    try:
        found = _stop_at_tail(request.messages)
        return None if found is None else _last_request(request, found)
    except Exception:
        logger.exception("loopwarden could not prepare the last model call; calling as usual")
        return None


def _usage(messages: list[Any]) -> tuple[int | None, int]:
    """Tokens and model turns of the current invocation: its AI messages since the
    newest human message."""
    tokens: int | None = None
    turns = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage):
            turns += 1
            usage = message.usage_metadata
            if usage is not None:
                tokens = (tokens or 0) + int(usage.get("total_tokens") or 0)
    return tokens, turns


def _last_request(
    request: ModelRequest[Any], found: Mapping[str, Any]
) -> tuple[StopReport, ModelRequest[Any]]:
    """The report (with the run's usage) and the run's last model request: no tools, and
    the instruction to write the final answer after the stopped calls' answers."""
    tokens, turns = _usage(request.messages)
    report = StopReport(
        str(found.get("code")),
        str(found.get("tool")),
        int(found.get("count") or 0),
        str(found.get("message") or ""),
        int(found.get("calls") or 0),
        int(found.get("refused") or 0),
        found.get("run_id"),
    ).with_usage(tokens=tokens, turns=turns)
    instruction = HumanMessage(final_answer_request(report))
    last = request.override(tools=[], tool_choice=None, messages=[*request.messages, instruction])
    return report, last


def _final_response(
    report: StopReport, response: ModelResponse[Any] | None, request: ModelRequest[Any]
) -> ModelResponse[Any]:
    """The run's final answer: the model's text with the stop's summary as its last
    paragraph (a structured response keeps only the metadata), or the fallback text."""
    metadata = report.to_dict()
    message = None
    if response is not None:
        message = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    structured = response is not None and response.structured_response is not None
    if response is not None and message is not None and structured:
        tagged = message.model_copy(
            update={"response_metadata": {**message.response_metadata, "loopwarden": metadata}}
        )
        result = [tagged if m is message else m for m in response.result]
        return ModelResponse(result=result, structured_response=response.structured_response)
    if message is None or message.tool_calls or not message.text.strip():
        final = AIMessage(fallback_answer(report), response_metadata={"loopwarden": metadata})
        return ModelResponse(result=[final])
    content = message.content
    summary = report.summary()
    new: Any = (
        f"{content}\n\n{summary}"
        if isinstance(content, str)
        else [*content, {"type": "text", "text": summary}]
    )
    final = message.model_copy(
        update={
            "content": new,
            "response_metadata": {**message.response_metadata, "loopwarden": metadata},
        }
    )
    return ModelResponse(result=[final])
