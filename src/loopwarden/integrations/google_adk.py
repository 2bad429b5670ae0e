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
* A stop (the circuit breaker, the post-compaction guard) does what ``on_stop``
  says (docs/integrations-google-adk.md, "When loopwarden stops the run"):

  - ``answer``: the stopped call is answered like a block, and the next model
    request is the last one: ``before_model_callback`` takes the tools out of it
    and adds loopwarden's instruction, ``after_model_callback`` makes the answer
    the invocation's final event (the stop's summary appended to its text, the
    report in ``custom_metadata["loopwarden"]``) and ends the invocation
    (``on_model_error_callback`` answers with the summary if that call fails).
  - ``raise``: :class:`~loopwarden.errors.CircuitBreakerTripped` /
    :class:`~loopwarden.errors.CompactionLoopPersisted` from the callback; ADK
    ends the run and re-raises it as ``RuntimeError("Error in plugin ...")``
    chained to ours, which :func:`loop_abort` digs out. ADK logs that as a
    crash, three tracebacks at ERROR; the plugin's log filter on those three
    ADK loggers (:data:`ADK_LOGGERS`) turns such records into one INFO line
    each, without the traceback (loopwarden has logged the stop itself).
  - ``ask``: ADK's tool confirmation (``tool_context.request_confirmation``):
    the invocation pauses on an ``adk_request_confirmation`` call, and the
    person's ``FunctionResponse`` (:func:`confirmation_reply` builds one)
    re-runs the call, which the plugin then lets run once, answers with the
    person's note, or ends as under ``answer``.

Run identity: an ADK invocation (``invocation_id``) is a loopwarden run, the
ADK session id is the session id, and each agent of the invocation has its own
history and per-agent config (agent name = agent id).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import (
    Choice,
    OnStop,
    StopReport,
    ask_question,
    choose_on_stop,
    fallback_answer,
    final_answer_request,
    parse_choice,
)
from ..stores import InProcess
from ._base import (
    RunRegistry,
    append_note,
    learn_tool,
    require,
    resolve_guard,
    stop_report,
)

require("google.adk", "google-adk")

from google.adk.agents.callback_context import CallbackContext  # noqa: E402 - after the check
from google.adk.agents.invocation_context import InvocationContext  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

__all__ = [
    "ADK_LOGGERS",
    "CONFIRMATION_CALL",
    "METADATA_KEY",
    "WARNING_KEY",
    "LoopGuardPlugin",
    "confirmation_reply",
    "loop_abort",
]

WARNING_KEY = "loopwarden_warning"
"""The key under which a warning is added to a dict tool result."""

METADATA_KEY = "loopwarden"
"""The key of the stop's report in the ``custom_metadata`` of the last answer's event."""

CONFIRMATION_CALL = "adk_request_confirmation"
"""The name of the function call by which ADK asks for a tool confirmation."""

# Invocations whose after-run callback never came (a caller that stopped
# iterating, a crash) are dropped beyond this many.
_MAX_INVOCATIONS = 1024
_MAX_ASKS = 1024  # questions put to a person and not answered yet
_MAX_AGENTS = 256  # agent trees whose use of tool confirmation is remembered

# What the model's history holds for a call put to the person, until the answer.
_ASKED = "loopwarden stopped the run here and asked the user whether this call may run."

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


def confirmation_reply(request_id: str, choice: str, note: str | None = None) -> types.Content:
    """The user message that answers loopwarden's question (``onStop: ask``).

    ``request_id`` is the id of the ``adk_request_confirmation`` function call
    the paused invocation ended with; ``choice`` is ``allow_once``, ``stop`` or
    ``continue`` (``note``: what the agent is told). Pass the message to
    ``runner.run_async(..., new_message=...)`` to resume.
    """
    parsed = parse_choice(choice)
    if parsed is None:
        raise ValueError(f"unknown answer to a stop {choice!r}: allow_once, stop or continue")
    response = {
        "confirmed": parsed == "allow_once",
        "payload": {"choice": parsed, "note": note or ""},
    }
    part = types.Part(
        function_response=types.FunctionResponse(
            name=CONFIRMATION_CALL, id=request_id, response=response
        )
    )
    return types.Content(role="user", parts=[part])


def _choice_of(confirmation: Any) -> tuple[Choice, str | None]:
    """A person's answer in an ADK ``ToolConfirmation``: the payload's ``choice`` if it
    names one, else ``confirmed`` lets the call run once, and a rejection with a
    ``note`` lets the run go on with it; a bare rejection stops the run."""
    payload = getattr(confirmation, "payload", None)
    choice = note = None
    if isinstance(payload, dict):
        choice = parse_choice(payload.get("choice"))
        raw = payload.get("note")
        note = raw if isinstance(raw, str) and raw.strip() else None
    if choice is None:
        if getattr(confirmation, "confirmed", False):
            choice = "allow_once"
        else:
            choice = "continue" if note else "stop"
    return choice, note


class _Invocation:
    """loopwarden's view of one ADK invocation: one :class:`RunGuard` per agent."""

    __slots__ = (
        "answered",
        "answering",
        "arm",
        "asked",
        "blocked",
        "ending",
        "guards",
        "mode",
        "report",
        "run_id",
        "scanned",
        "session_id",
        "turns",
    )

    def __init__(self, run_id: str, session_id: str | None) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.guards: dict[str, RunGuard] = {}
        self.blocked: set[str] = set()  # ids of calls answered by the before-callback
        self.arm = False  # a compaction was seen: arm guards created from now on too
        self.scanned = 0  # session events already looked at for compaction events
        self.mode: OnStop = "answer"
        self.turns = 0  # model requests of the invocation
        # onStop: the stop that ends the invocation with a last answer, and its report.
        self.ending: LoopAbort | None = None
        self.answering = False  # the last answer's model request is under way
        self.answered = False
        self.report: StopReport | None = None
        # onStop: ask. Call id -> the stop put to the person, and its guard.
        self.asked: dict[str, tuple[LoopAbort, RunGuard]] = {}


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


def _uses_confirmation(agent: Any) -> bool:
    """Whether a tool of ``agent`` or of its sub-agents asks for confirmation."""
    stack = [agent]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for tool in getattr(current, "tools", None) or ():
            if getattr(tool, "_require_confirmation", False):
                return True
        stack.extend(getattr(current, "sub_agents", None) or ())
    return False


def _text(response: LlmResponse) -> str:
    content = response.content
    parts = (content.parts or []) if content is not None else []
    return "".join(part.text for part in parts if part.text and not part.thought)


def _asks_for_tools(response: LlmResponse) -> bool:
    content = response.content
    parts = (content.parts or []) if content is not None else []
    return any(part.function_call is not None for part in parts)


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
        on_stop: what a stop does: ``"answer"`` (the invocation ends with a last
            answer of the model, without tools), ``"raise"`` (the stop propagates)
            or ``"ask"`` (ADK's tool confirmation). Unset: the config's
            ``loopwarden.onStop``, else ``ask`` in a resumable app or where the
            agents already use tool confirmation, and ``answer`` elsewhere.
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
        on_stop: OnStop | None = None,
        **guard_kwargs: Any,
    ) -> None:
        super().__init__(name=name)
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        self.on_stop = on_stop
        choose_on_stop(on_stop, None, person=True)  # a clear error for a wrong value, now
        # An in-process store never waits: on the per-call path the plain methods
        # spare the coroutine layers of their async twins.
        self._inline = isinstance(self.guard.store, InProcess)
        self._invocations: RunRegistry[str, _Invocation] = RunRegistry(
            _MAX_INVOCATIONS, on_evict=_end_guards
        )
        # Call id of a question put to a person -> its invocation: the answer may come
        # in another invocation, which goes on with the same loopwarden run.
        self._asks: collections.OrderedDict[str, _Invocation] = collections.OrderedDict()
        self._confirming: dict[int, bool] = {}  # id(root agent) -> uses tool confirmation
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
        inv = self._invocations.get(invocation_id)
        if inv is not None and inv.asked:
            return  # a question waits for the person: the run goes on when answered
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

    def _mode(self, invocation_context: InvocationContext) -> OnStop:
        """``on_stop`` for an invocation: a person can be asked when ``ask`` was chosen,
        in a resumable app, or when the agents already use tool confirmation."""
        configured = self.guard.config.settings.on_stop
        chosen = self.on_stop if self.on_stop is not None else configured
        if chosen is not None and chosen != "ask":
            return choose_on_stop(self.on_stop, configured, person=False)
        person = chosen == "ask" or bool(getattr(invocation_context, "is_resumable", False))
        if not person:
            agent = invocation_context.agent
            root = getattr(agent, "root_agent", agent)
            known = self._confirming.get(id(root))
            if known is None:
                if len(self._confirming) >= _MAX_AGENTS:
                    self._confirming.clear()
                known = self._confirming[id(root)] = _uses_confirmation(root)
            person = known
        return choose_on_stop(self.on_stop, configured, person=person)

    # -- run lifecycle -----------------------------------------------------------
    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        try:
            inv = self._invocation(invocation_context.invocation_id, invocation_context.session)
            inv.mode = self._mode(invocation_context)
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
            inv.turns += 1
            events = callback_context.session.events
            fresh = events[inv.scanned :]
            inv.scanned = len(events)
            if any(_has_compaction(event) for event in fresh):
                await self._arm(inv)
        except Exception:
            logger.exception("loopwarden could not look for ADK compaction events")
            return None
        if inv.ending is not None and not inv.answered:
            try:
                self._last_request(inv, callback_context, llm_request)
            except Exception:
                logger.exception("loopwarden could not prepare the last model request")
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        inv = self._invocations.get(callback_context.invocation_id)
        if inv is None or not inv.answering or llm_response.partial:
            return None
        try:
            return self._last_answer(inv, callback_context, llm_response)
        except Exception:
            logger.exception("loopwarden could not finish the last answer")
            return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        inv = self._invocations.get(callback_context.invocation_id)
        if inv is None or not inv.answering:
            return None
        logger.warning(
            "loopwarden's last model request failed (%s); ending with its summary", error
        )
        return self._last_answer(inv, callback_context, None)

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        self._end(invocation_context.invocation_id)

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        inv = self._invocations.forget(invocation_context.invocation_id)
        if inv is not None:
            _end_guards(inv)

    # -- a stop's outcome ------------------------------------------------------------
    def _last_request(
        self, inv: _Invocation, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> None:
        """The model request after a stop: no tools, and loopwarden's instruction."""
        stop = inv.ending
        assert stop is not None
        report = self._with_usage(inv, callback_context, stop_report(stop))
        inv.report = report
        inv.answering = True
        llm_request.tools_dict = {}
        config = llm_request.config
        if config is not None:
            config.tools = None
            config.tool_config = None
        text = final_answer_request(report)
        llm_request.contents.append(types.Content(role="user", parts=[types.Part(text=text)]))

    def _last_answer(
        self, inv: _Invocation, callback_context: CallbackContext, response: LlmResponse | None
    ) -> LlmResponse:
        """The invocation's final event: the model's answer with the summary (or the
        summary alone when the request failed or still asked for tools)."""
        inv.answering = False
        inv.answered = True
        report = inv.report
        assert report is not None
        text = _text(response) if response is not None else ""
        failed = response is None or response.error_code is not None
        if failed or not text or (response is not None and _asks_for_tools(response)):
            text = fallback_answer(report)
        elif not _structured(callback_context):
            text = f"{text}\n\n{report.summary()}"
        metadata = {**((response.custom_metadata if response else None) or {})}
        metadata[METADATA_KEY] = report.to_dict()
        content = types.Content(role="model", parts=[types.Part(text=text)])
        update = {"content": content, "custom_metadata": metadata, "error_code": None}
        answer = (
            response.model_copy(update={**update, "error_message": None})
            if response is not None
            else LlmResponse(content=content, custom_metadata=metadata)
        )
        # The stop ends the invocation, not only this agent's turn.
        context = getattr(callback_context, "_invocation_context", None)
        if context is not None:
            context.end_invocation = True
        return answer

    def _with_usage(
        self, inv: _Invocation, callback_context: CallbackContext, report: StopReport
    ) -> StopReport:
        tokens = 0
        current = callback_context.invocation_id
        for event in callback_context.session.events:
            usage = event.usage_metadata
            if usage is not None and event.invocation_id == current:
                tokens += usage.total_token_count or 0
        turns = inv.turns - 1  # this request is the last answer
        context = getattr(callback_context, "_invocation_context", None)
        limit = getattr(getattr(context, "run_config", None), "max_llm_calls", None)
        return report.with_usage(
            tokens=tokens or None,
            turns=turns or None,
            turn_limit=limit if isinstance(limit, int) and limit > 0 else None,
            limit_name="max_llm_calls",
        )

    def _stopped(
        self,
        inv: _Invocation,
        rg: RunGuard,
        stop: LoopAbort,
        tool: BaseTool,
        tool_context: ToolContext,
    ) -> dict[str, Any]:
        """The answer to the call that stopped the run (or a later call of the run)."""
        if inv.mode == "raise":
            raise stop
        call_id = tool_context.function_call_id
        if call_id is not None:
            inv.blocked.add(call_id)
        if (
            inv.mode == "ask"
            and stop.askable
            and call_id is not None
            and stop.call_id == call_id
            and not _is_placeholder(tool)  # ADK confirms registered tools only
            and not inv.asked
        ):
            tool_context.request_confirmation(
                hint=ask_question(stop_report(stop)), payload={"choice": None, "note": None}
            )
            # The pause is not a result for the model to go on with.
            tool_context.actions.skip_summarization = True
            inv.asked[call_id] = (stop, rg)
            self._asks[call_id] = inv
            if len(self._asks) > _MAX_ASKS:
                self._asks.popitem(last=False)
            return {"error": _ASKED}
        # With a question pending, the person's answer decides the run.
        if inv.ending is None and not (inv.mode == "ask" and inv.asked):
            inv.ending = stop
        return {"error": stop.message}

    def _follow(self, invocation_id: str, asked: _Invocation) -> _Invocation:
        """The invocation that carries the answer goes on with the asking one's run (ADK
        2.x resumes the same invocation id; another id is mapped to it)."""
        current = self._invocations.get(invocation_id)
        if current is not asked:
            if current is not None:
                self._invocations.forget(invocation_id)
                _end_guards(current)
            for key, entry in list(self._invocations.items()):
                if entry is asked:
                    self._invocations.forget(key)
            self._invocations.get_or_create(invocation_id, lambda: asked)
        return asked

    async def _answered(
        self, inv: _Invocation, call_id: str, confirmation: Any
    ) -> dict[str, Any] | None:
        """The person's answer to loopwarden's question, as the call is run again."""
        stop, rg = inv.asked.pop(call_id)
        choice, note = _choice_of(confirmation)
        if choice == "stop":
            inv.ending = stop
            inv.blocked.add(call_id)
            return {"error": stop.message}
        try:
            if self._inline:
                decision = rg.resume(stop, choice, note)
            else:
                decision = await rg.aresume(stop, choice, note)
        except LoopAbort:  # a stop no person may lift
            inv.ending = stop
            inv.blocked.add(call_id)
            return {"error": stop.message}
        if decision.blocked:  # continue: the model reads the note instead of a result
            inv.blocked.add(call_id)
            return {"error": decision.message}
        return None  # allow once: the call runs, and its outcome is recorded

    # -- tool calls -----------------------------------------------------------------
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        try:
            call_id = tool_context.function_call_id
            confirmation = tool_context.tool_confirmation
            if confirmation is not None and call_id is not None and call_id in self._asks:
                # The person's answer to loopwarden's question: the call runs again.
                asked = self._follow(tool_context.invocation_id, self._asks.pop(call_id))
                if call_id in asked.asked:
                    return await self._answered(asked, call_id, confirmation)
            inv = self._invocation(tool_context.invocation_id, tool_context.session)
            agent = tool_context.agent_name
            rg = inv.guards.get(agent)
            if rg is None:
                rg = await self._new_guard(inv, agent)
            name = tool.name
            registered = not _is_placeholder(tool)
            if registered != (name in (rg.tools or ())):
                learn_tool(rg, name, registered)
        except Exception:
            logger.exception("loopwarden could not check a call of %s; allowing it", tool.name)
            return None
        try:
            if self._inline:
                decision = rg.before_call(name, tool_args, call_id)
            else:
                decision = await rg.abefore_call(name, tool_args, call_id)
        except LoopAbort as stop:
            return self._stopped(inv, rg, stop, tool, tool_context)
        if decision.blocked:
            if call_id is not None:
                inv.blocked.add(call_id)
            return {"error": decision.message}
        return None

    def _guard_of(self, tool_context: ToolContext) -> tuple[_Invocation, RunGuard] | None:
        inv = self._invocations.get(tool_context.invocation_id)
        if inv is None:
            return None
        call_id = tool_context.function_call_id
        if call_id is not None and call_id in inv.blocked:
            inv.blocked.discard(call_id)  # our own block answer, not an outcome
            return None
        rg = inv.guards.get(tool_context.agent_name)
        return (inv, rg) if rg is not None else None

    def _stopped_after(self, inv: _Invocation, stop: LoopAbort) -> None:
        """A stop that came after a call ran: nothing to ask about; it ends the run."""
        if inv.mode == "raise":
            raise stop
        if inv.ending is None:
            inv.ending = stop

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        try:
            found = self._guard_of(tool_context)
        except Exception:
            logger.exception("loopwarden could not record an outcome of %s", tool.name)
            return None
        if found is None:
            return None
        inv, rg = found
        call_id = tool_context.function_call_id
        try:
            if self._inline:
                note = rg.after_call(tool.name, tool_args, call_id, result=result)
            else:
                note = await rg.aafter_call(tool.name, tool_args, call_id, result=result)
        except LoopAbort as stop:
            self._stopped_after(inv, stop)
            return None
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
            found = self._guard_of(tool_context)
        except Exception:
            logger.exception("loopwarden could not record a failure of %s", tool.name)
            return None
        if found is None:
            return None
        inv, rg = found
        placeholder = _is_placeholder(tool)
        # ADK's placeholder tool says the name is unknown: no wording to recognise.
        outcome = ToolOutcome(error=error, unknown_tool=tool.name if placeholder else None)
        try:
            note = await rg.aafter_call(
                tool.name, tool_args, tool_context.function_call_id, result=outcome
            )
        except LoopAbort as stop:
            self._stopped_after(inv, stop)
            return {"error": stop.message} if placeholder else None
        if note and placeholder:
            # ADK answers an unknown name with an error response unless a
            # callback does; answering it here is the only way to add the note.
            return {"error": append_note(str(error), note)}
        return None


def _structured(callback_context: CallbackContext) -> bool:
    """Whether the agent's final answer has an output schema (no summary appended)."""
    context = getattr(callback_context, "_invocation_context", None)
    agent = getattr(context, "agent", None)
    return getattr(agent, "output_schema", None) is not None
