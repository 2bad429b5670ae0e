"""CrewAI integration: loop detection as CrewAI's global tool-call hooks.

::

    from loopwarden.integrations.crewai import LoopGuardHooks

    guard = LoopGuardHooks("loopwarden.json5").install()
    crew.kickoff()            # every agent of every crew and Agent.kickoff is guarded

What the hooks do, all through the runtime guard (:mod:`loopwarden.guard`):

* ``before_tool_call`` checks every call before it runs. A blocked call is not
  executed (the hook returns ``False``) and ``after_tool_call`` answers it with
  loopwarden's message instead of CrewAI's "Tool execution blocked by hook".
  Calls of names the agent has no tool for reach the hooks without a tool
  (native function calling) and are counted by the unknown-tool guard.
* ``after_tool_call`` records the outcome and appends a warning to the result
  the model reads. CrewAI turns a tool's exception into the text
  ``Error executing tool: ...``; that text is recorded as the call's error.
* When loopwarden stops the run (``on_stop``, else ``loopwarden.onStop``, else
  ``ask`` for a task with ``human_input=True`` and ``answer`` otherwise):

  - ``answer``: the stopped call is answered with the stop's message, and the
    agent's next model call is its last: ``before_llm_call`` empties the tool
    list the executor passes to the model (native function calling) and adds
    the final-answer instruction; ``after_llm_call`` takes the instruction out
    again and appends the stop's summary to the text, which CrewAI makes the
    final answer (``TaskOutput.raw``, ``Agent.kickoff``'s output).
    :meth:`LoopGuardHooks.last_stop` gives the report.
    ``stopping.fallback_answer`` when that call still asks for tools.
  - ``ask``: CrewAI's own human input in a hook
    (``ToolCallHookContext.request_human_input``, a prompt on the console)
    asks the person, and the answer is applied with
    :meth:`~loopwarden.RunGuard.resume`.
  - ``raise``: CrewAI's own deliberate stop: the exception raised is
    loopwarden's :class:`~loopwarden.errors.LoopAbort` (its ``.code`` names the
    rule) and CrewAI's ``HookAborted`` at once, which ``Crew.kickoff`` and
    ``Agent.kickoff`` raise unchanged.
* ``before_llm_call`` sees the agent's message list: a summary CrewAI wrote
  there when the context overflowed (``respect_context_window``) arms the
  post-compaction guard, and the newest assistant message gives each tool
  call the model's call id (the tool hooks carry none).

Run identity: one run per agent per task (per ``Agent.kickoff`` for an agent
without a task) within one kickoff, which is the session (CrewAI's execution
id). CrewAI's completion and error events end the run. The agent's ``role``
is the agent id.

CrewAI's hooks are process-wide: :meth:`LoopGuardHooks.install` registers
them, :meth:`LoopGuardHooks.uninstall` (or leaving ``with guard:``) removes
them. Hooks are synchronous, so the guard's plain methods run inside them.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Any, Self

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import OnStop, StopReport, choose_on_stop, fallback_answer, final_answer_request
from ._base import (
    ASK_ANSWERS,
    MAX_ASKS,
    RunRegistry,
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

require("crewai", "crewai")

from crewai.agents.parser import AgentFinish  # noqa: E402 - after the extra check on purpose
from crewai.events import crewai_event_bus  # noqa: E402
from crewai.events.types.agent_events import (  # noqa: E402
    AgentExecutionCompletedEvent,
    AgentExecutionErrorEvent,
    LiteAgentExecutionCompletedEvent,
    LiteAgentExecutionErrorEvent,
)
from crewai.execution import get_execution_uuid  # noqa: E402
from crewai.hooks import (  # noqa: E402
    LLMCallHookContext,
    ToolCallHookContext,
    register_after_llm_call_hook,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_llm_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.hooks.dispatch import HookAborted  # noqa: E402

__all__ = ["LoopGuardHooks", "crewai_stop"]

ERROR_PREFIX = "Error executing tool: "
"""How CrewAI words a tool's exception in the result (native and ReAct paths)."""
UNKNOWN_RESULT = "Tool not found"
"""CrewAI's result for a call of a name the agent has no tool for."""

_MAX_PENDING = 256  # calls between their before and after hook, per run
_MAX_STOPS = 256  # agents whose latest stop report is kept for last_stop()
_FINAL = "Final Answer:"  # how a text-mode (ReAct) answer marks the final answer
_ACTION = "Action:"
_RunKey = tuple[Any, Any, Any]


def _summary_marks() -> tuple[str, str] | None:
    """The text before and after the summary in the message CrewAI's compaction writes."""
    try:
        from crewai.utilities.i18n import I18N_DEFAULT

        template = I18N_DEFAULT.slice("summary")
        head, sep, tail = template.partition("{merged_summary}")
    except Exception:
        logger.exception("loopwarden could not read CrewAI's summary template")
        return None
    return (head, tail) if sep else None


_STOP_CLASSES: dict[type[LoopAbort], type[LoopAbort]] = {}
_STOP_LOCK = threading.Lock()


def crewai_stop(stop: LoopAbort) -> LoopAbort:
    """``stop`` as an exception that is also CrewAI's ``HookAborted``.

    CrewAI lets ``HookAborted`` through every layer as a deliberate stop and
    swallows other exceptions from hooks; the copy is still an instance of
    ``stop``'s own class, with the same ``.code``, ``.tool_name``, ``.count``
    and ``.message``.
    """
    done = isinstance(stop, HookAborted)
    if done:
        return stop
    base = type(stop)
    with _STOP_LOCK:
        cls = _STOP_CLASSES.get(base)
        if cls is None:
            cls = _STOP_CLASSES[base] = type(
                base.__name__,
                (base, HookAborted),
                {"__module__": __name__, "__doc__": f"{base.__name__} as a CrewAI hook abort."},
            )
    copy = cls.__new__(cls)
    # Every attribute of the original, and HookAborted's reason and source.
    copy.__dict__.update(stop.__dict__, reason=stop.message, source="loopwarden")
    copy.args = stop.args
    return copy


class _Pending:
    """One call between its before and after hook."""

    __slots__ = ("args", "call_id", "decision", "params", "stop")

    def __init__(
        self,
        args: Any,
        params: Any,
        call_id: str | None,
        decision: Decision | None,
        stop: LoopAbort | None = None,
    ) -> None:
        self.args = args  # CrewAI's arguments object: both hooks of a call get this one
        self.params = params
        self.call_id = call_id
        self.decision = decision
        self.stop = stop


class _Last:
    """The run's last model call after a stop: the report, the instruction added to the
    messages, and the tool list emptied for it (the list and what it held)."""

    __slots__ = ("done", "instruction", "report", "tools")

    def __init__(self, report: StopReport, instruction: dict[str, str]) -> None:
        self.report = report
        self.instruction = instruction
        self.tools: tuple[list[Any], list[Any]] | None = None
        self.done = False

    def restore_tools(self) -> None:
        if self.tools is not None:
            emptied, held = self.tools
            self.tools = None
            if not emptied:
                emptied.extend(held)


class _Run:
    """loopwarden's view of one agent working on one task within one kickoff."""

    __slots__ = (
        "agent",
        "asking",
        "claimed",
        "ending",
        "executor",
        "guard",
        "last",
        "lock",
        "messages",
        "pending",
        "summary",
        "task",
        "turn",
    )

    def __init__(self, guard: RunGuard, agent: Any = None, task: Any = None) -> None:
        self.guard = guard
        self.agent = agent
        self.task = task
        self.executor: Any = None  # the agent's executor (before_llm_call)
        self.ending: LoopAbort | None = None  # the stop the next model call answers
        self.last: _Last | None = None
        self.asking = False  # a question to the person is open
        self.lock = threading.Lock()
        self.pending: dict[int, _Pending] = {}
        self.messages: list[Any] | None = None  # the agent's message list (before_llm_call)
        self.turn: Any = None  # the assistant message whose tool calls are being run
        self.claimed: set[str] = set()  # its call ids already handed out
        self.summary: Any = None  # the compaction summary message last seen

    def call_id(self, name: str, args: Any) -> str | None:
        """The model's id for this call: from the newest assistant message with tool calls."""
        messages = self.messages
        if not messages:
            return None
        # Only this turn's tool answers can follow the assistant message: a short walk.
        for index in range(len(messages) - 1, max(-1, len(messages) - 66), -1):
            message = messages[index]
            if isinstance(message, dict) and message.get("role") == "assistant":
                break
        else:
            return None
        calls = message.get("tool_calls")
        if not calls:
            return None
        with self.lock:
            if message is not self.turn:
                self.turn = message
                self.claimed = set()
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                call_id = call.get("id") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(call_id, str):
                    continue
                if call_id in self.claimed or function.get("name") != name:
                    continue
                if parse_arguments(function.get("arguments")) == args:
                    self.claimed.add(call_id)
                    return call_id
        return None


def _key(agent: Any, task: Any) -> _RunKey:
    return (
        get_execution_uuid(),
        getattr(agent, "id", None) or id(agent),
        getattr(task, "id", None) if task is not None else None,
    )


class LoopGuardHooks:
    """Tool-loop detection for every CrewAI agent in this process.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults.
        agent_id: the agent id whose per-agent config applies to every agent; by
            default each agent's ``role`` is its agent id.
        on_stop: what a stop does: ``"answer"`` (a last model call without tools
            writes the final answer), ``"ask"`` (CrewAI's human input on the
            console asks the person) or ``"raise"``. ``None``: the config's
            ``loopwarden.onStop``, else ``"ask"`` for a task with
            ``human_input=True`` (a person reviews its answer on the console) and
            ``"answer"`` otherwise.
        **guard_kwargs: passed to :class:`~loopwarden.LoopGuard` (``store``,
            ``on_event``, ``fail_closed``, ``run_record`` ...) when no ready
            guard is given.

    Nothing is guarded until :meth:`install`.
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
        self._stops: OrderedDict[Any, StopReport | None] = OrderedDict()
        self._stops_lock = threading.Lock()
        self._finishing: set[_Run] = set()  # runs whose last model call is under way
        self._runs: RunRegistry[_RunKey, _Run] = RunRegistry(on_evict=self._evicted)
        self._summary = _summary_marks()
        self._ids = itertools.count(1)
        self._installed = False

    # -- installation ------------------------------------------------------------------
    def install(self) -> Self:
        """Register the hooks with CrewAI (process-wide); returns ``self``."""
        if not self._installed:
            register_before_llm_call_hook(self.before_llm_call)
            register_after_llm_call_hook(self.after_llm_call)
            register_before_tool_call_hook(self.before_tool_call)
            register_after_tool_call_hook(self.after_tool_call)
            crewai_event_bus.register_handler(AgentExecutionCompletedEvent, self._task_ended)
            crewai_event_bus.register_handler(AgentExecutionErrorEvent, self._task_ended)
            crewai_event_bus.register_handler(LiteAgentExecutionCompletedEvent, self._kickoff_ended)
            crewai_event_bus.register_handler(LiteAgentExecutionErrorEvent, self._kickoff_ended)
            self._installed = True
        return self

    def uninstall(self) -> None:
        """Remove the hooks and end every run still open."""
        if self._installed:
            unregister_before_llm_call_hook(self.before_llm_call)
            unregister_after_llm_call_hook(self.after_llm_call)
            unregister_before_tool_call_hook(self.before_tool_call)
            unregister_after_tool_call_hook(self.after_tool_call)
            crewai_event_bus.off(AgentExecutionCompletedEvent, self._task_ended)
            crewai_event_bus.off(AgentExecutionErrorEvent, self._task_ended)
            crewai_event_bus.off(LiteAgentExecutionCompletedEvent, self._kickoff_ended)
            crewai_event_bus.off(LiteAgentExecutionErrorEvent, self._kickoff_ended)
            self._installed = False
        for key in list(self._runs):
            run = self._runs.forget(key)
            if run is not None:
                _end(run)
        self._finishing.clear()

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def last_stop(self, agent: Any) -> dict[str, Any] | None:
        """The report of ``agent``'s latest run (task or ``Agent.kickoff``) if loopwarden
        stopped it and it ended with a last answer (``StopReport.to_dict()``), else
        ``None``. CrewAI's outputs (``TaskOutput``, ``CrewOutput``,
        ``LiteAgentOutput``) have no place for it."""
        with self._stops_lock:
            report = self._stops.get(_agent_key(agent))
        return None if report is None else report.to_dict()

    def _remember(self, agent: Any, report: StopReport | None) -> None:
        key = _agent_key(agent)
        with self._stops_lock:
            self._stops[key] = report
            self._stops.move_to_end(key)
            while len(self._stops) > _MAX_STOPS:
                self._stops.popitem(last=False)

    def _mode(self, run: _Run) -> OnStop:
        """What a stop does: a person is there when the task has CrewAI's own
        ``human_input`` (they review its answer on the console), or when you chose ``ask``
        (CrewAI cannot tell whether anyone reads its console otherwise)."""
        configured = self.guard.config.settings.on_stop
        chosen = self.on_stop if self.on_stop is not None else configured
        person = chosen == "ask" or bool(getattr(run.task, "human_input", False))
        return choose_on_stop(self.on_stop, configured, person=person)

    # -- runs ----------------------------------------------------------------------------
    def _run(self, agent: Any, task: Any) -> _Run:
        key = _key(agent, task)
        run = self._runs.get(key)
        if run is None:
            run = self._runs.get_or_create(key, lambda: self._new_run(key, agent, task))
        return run

    def _new_run(self, key: _RunKey, agent: Any, task: Any) -> _Run:
        execution = key[0]
        role = getattr(agent, "role", None)
        guard = self.guard.run(
            session_id=str(execution) if execution is not None else self.guard.session_id,
            agent_id=self.agent_id if self.agent_id is not None else role,
            tools=(),
        )
        self._remember(agent, None)  # the agent's latest run is this one
        return _Run(guard, agent, task)

    def _task_ended(self, source: Any, event: Any) -> None:
        self._forget(_key(getattr(event, "agent", None), getattr(event, "task", None)))

    def _kickoff_ended(self, source: Any, event: Any) -> None:
        self._forget(_key(source, None))

    def _evicted(self, run: _Run) -> None:
        self._finishing.discard(run)
        _end(run)

    def _forget(self, key: _RunKey) -> None:
        try:
            run = self._runs.forget(key)
            if run is not None:
                self._finishing.discard(run)
                _end(run)
        except Exception:
            logger.exception("loopwarden could not end a CrewAI run")

    # -- hooks ---------------------------------------------------------------------------
    def before_llm_call(self, context: LLMCallHookContext) -> None:
        """Keep the agent's message list; a new compaction summary in it arms the guard."""
        if context.executor is None:
            return  # a direct LLM call (CrewAI's own summarising call, say): no agent run
        try:
            run = self._run(context.agent, context.task)
            messages = context.messages
            run.messages = messages
            run.executor = context.executor
            if run.ending is not None and run.last is None:
                self._last_call(context, run, run.ending)
                return
            summary = self._new_summary(run, messages)
            if summary is not None:
                run.summary = summary
                run.guard.on_compaction()
        except Exception:
            logger.exception("loopwarden could not inspect a CrewAI model call")

    def _last_call(self, context: LLMCallHookContext, run: _Run, stop: LoopAbort) -> None:
        """Make this model call the run's last: no tools, and the instruction."""
        report = stop_report(stop).with_usage(**_usage(context.executor))
        instruction = {"role": "user", "content": final_answer_request(report)}
        last = run.last = _Last(report, instruction)
        self._finishing.add(run)
        # The executor passes this very list as the call's tools: emptied for the call.
        tools = getattr(context.executor, "_openai_tools", None)
        if isinstance(tools, list) and tools:
            last.tools = (tools, list(tools))
            tools.clear()
        messages: list[Any] = context.messages  # CrewAI's message TypedDict: a plain user one
        messages.append(instruction)

    def after_llm_call(self, context: LLMCallHookContext) -> str | None:
        """The run's last answer: the model's text with the stop's summary (the fallback
        when it still asks for a tool); the instruction leaves the agent's messages."""
        if not self._finishing or context.executor is None:
            return None  # no run is making its last call: nothing to do
        try:
            run = self._runs.get(_key(context.agent, context.task))
            last = run.last if run is not None else None
            if run is None or last is None or last.done:
                return None
            last.done = True
            self._finishing.discard(run)
            last.restore_tools()
            messages = context.messages
            for index in range(len(messages) - 1, -1, -1):
                if messages[index] is last.instruction:
                    del messages[index]
                    break
            self._remember(run.agent, last.report)
            if _structured(run):
                return None  # the text must stay what the model wrote, to be parsed
            return _final_text(context, last.report)
        except Exception:
            logger.exception("loopwarden could not finish a CrewAI run's last answer")
            return None

    def _new_summary(self, run: _Run, messages: list[Any]) -> Any:
        """The summary message at the head of the history, if it is one this run has not seen."""
        marks = self._summary
        if marks is None:
            return None
        head, tail = marks
        # CrewAI replaces the history by the system messages and the summary.
        for message in messages[:4]:
            if not isinstance(message, dict) or message.get("role") == "system":
                continue
            content = message.get("content")
            if (
                message is not run.summary
                and isinstance(content, str)
                and content.startswith(head)
                and content.endswith(tail)
            ):
                return message
            return None
        return None

    def before_tool_call(self, context: ToolCallHookContext) -> bool | None:
        """Check a call before it runs; ``False`` blocks it."""
        # Typed loosely: CrewAI declares a dict and a tool, but passes no tool for unknown names.
        args: Any = context.tool_input
        tool: Any = context.tool
        try:
            run = self._run(context.agent, context.task)
            name = context.tool_name
            # Without a tool the name is unknown to the agent (native function calling).
            registered = tool is not None
            if registered != (name in (run.guard.tools or ())):
                learn_tool(run.guard, name, registered)
            # A copy: hooks may edit the arguments in place before the tool runs.
            params = dict(args) if isinstance(args, dict) else args
            call_id = run.call_id(name, args) or f"crewai-{next(self._ids)}"
        except Exception:
            logger.exception("loopwarden could not check a CrewAI call; allowing it")
            return None
        if run.last is not None and not run.last.done:
            # The last call still asked for tools (none were offered): the fallback ends it.
            return self._fall_back(run, args, params, call_id)
        try:
            decision = run.guard.before_call(name, params, call_id)
        except LoopAbort as stop:
            answered = self._on_stop(context, run, stop)
            if answered is None:
                # CrewAI swallows exceptions of before-hooks: block, then stop in the after hook.
                self._hold(run, _Pending(args, params, call_id, None, stop))
                return False
            decision = answered
        self._hold(run, _Pending(args, params, call_id, decision))
        return False if decision.blocked else None

    def _fall_back(self, run: _Run, args: Any, params: Any, call_id: str) -> bool:
        """End the run with ``fallback_answer``: CrewAI finishes with the answer set."""
        last = run.last
        assert last is not None
        last.done = True
        self._finishing.discard(run)
        last.restore_tools()
        text = fallback_answer(last.report)
        state = getattr(run.executor, "state", None)
        try:
            if state is not None:
                state.current_answer = AgentFinish(thought="", output=text, text=text)
                state.is_finished = True
        except Exception:
            logger.exception("loopwarden could not end a CrewAI run with its fallback answer")
        self._remember(run.agent, last.report)
        self._hold(run, _Pending(args, params, call_id, Decision("block", text)))
        return False

    def _on_stop(self, context: ToolCallHookContext, run: _Run, stop: LoopAbort) -> Decision | None:
        """What a stop does to the call it refused: a Decision for the call, or ``None``
        to raise the stop (``raise``)."""
        try:
            mode = self._mode(run)
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            return None
        if mode == "raise":
            return None
        with run.lock:  # one question at a time: CrewAI runs a turn's calls in threads
            asking = mode == "ask" and stop.askable and stop.call_id is not None
            asking = asking and not run.asking
            run.asking = run.asking or asking
        if asking:
            try:
                decision = self._ask(context, run, stop)
            finally:
                run.asking = False
            if decision is not None:
                return decision
        elif run.ending is None:
            run.ending = stop
        return Decision("block", (run.ending or stop).message)

    def _ask(self, context: ToolCallHookContext, run: _Run, stop: LoopAbort) -> Decision | None:
        """Put the stop to the person with CrewAI's human input; the Decision for the call,
        or ``None`` when the run ends (their "stop", or no answer)."""
        report = stop_report(stop).with_usage(**_usage(run.executor))
        reply = None
        error: str | None = None
        for _ in range(MAX_ASKS):
            try:
                given = context.request_human_input(
                    prompt=text_question(report, error).removesuffix(ASK_ANSWERS).rstrip(),
                    default_message=ASK_ANSWERS,
                )
            except Exception as failed:  # no console (EOF), or CrewAI's prompt failed
                logger.warning("loopwarden could not ask the person (%s); the run stops", failed)
                break
            reply = read_answer(given)
            if reply is not None:
                break
            error = f"loopwarden did not understand the answer {given[:80]!r}."
        choice, note = reply if reply is not None else ("stop", None)
        try:
            return run.guard.resume(stop, choice, note)
        except LoopAbort as final:  # "stop": the run ends with the last answer
            if run.ending is None:
                run.ending = final
            return None

    @staticmethod
    def _hold(run: _Run, pending: _Pending) -> None:
        table = run.pending
        if len(table) >= _MAX_PENDING:  # after hooks that never came (a tool that crashed)
            table.pop(next(iter(table)), None)
        table[id(pending.args)] = pending

    def after_tool_call(self, context: ToolCallHookContext) -> str | None:
        """Record the outcome; return the text the model reads when loopwarden changes it."""
        args: Any = context.tool_input
        tool: Any = context.tool
        try:
            run = self._runs.get(_key(context.agent, context.task))
            pending = run.pending.pop(id(args), None) if run is not None else None
        except Exception:
            logger.exception("loopwarden could not record a CrewAI outcome")
            return None
        if run is None or pending is None or pending.args is not args:
            return None  # a call loopwarden did not check
        if pending.stop is not None:
            raise crewai_stop(pending.stop)
        decision = pending.decision
        if decision is not None and decision.blocked:
            return decision.message  # instead of CrewAI's "Tool execution blocked by hook"
        name = context.tool_name
        result = context.tool_result
        outcome: Any
        if tool is None and result == UNKNOWN_RESULT:
            outcome = ToolOutcome(error=f"{UNKNOWN_RESULT}: {name}", unknown_tool=name)
        elif isinstance(result, str) and result.startswith(ERROR_PREFIX):
            outcome = ToolOutcome(error=result[len(ERROR_PREFIX) :] or result)
        else:
            raw = context.raw_tool_result
            outcome = raw if raw is not None else result
        try:
            note = run.guard.after_call(name, pending.params, pending.call_id, result=outcome)
        except LoopAbort as stop:  # a stop after the call ran: nobody can lift it
            if self._after_mode(run) == "raise":
                raise crewai_stop(stop) from None
            if run.ending is None:
                run.ending = stop
            note = stop.message
        if not note:
            return None
        return append_note(result if isinstance(result, str) else str(result), note)

    def _after_mode(self, run: _Run) -> OnStop:
        try:
            return self._mode(run)
        except Exception:
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            return "raise"


def _agent_key(agent: Any) -> Any:
    return getattr(agent, "id", None) or id(agent)


def _usage(executor: Any) -> dict[str, Any]:
    """The run's model calls so far and its ``max_iter`` (what CrewAI reports)."""
    state = getattr(executor, "state", None)
    turns = getattr(state, "iterations", None)
    limit = getattr(executor, "max_iter", None)
    return {
        "turns": turns if isinstance(turns, int) and turns > 0 else None,
        "turn_limit": limit if isinstance(limit, int) and limit > 0 else None,
        "limit_name": "max_iter",
    }


def _structured(run: _Run) -> bool:
    """Whether the run's answer is parsed into a structured output (a task's
    ``output_pydantic`` / ``output_json``, a ``response_format``)."""
    holders = (run.task, run.executor)
    names = ("output_pydantic", "output_json", "response_model", "response_format")
    return any(getattr(holder, name, None) is not None for holder in holders for name in names)


def _final_text(context: LLMCallHookContext, report: StopReport) -> str | None:
    """The last answer's text; ``None`` keeps the model's own (a structured answer)."""
    response = context.response
    if not isinstance(response, str):
        return None
    state = getattr(context.executor, "state", None)
    if getattr(state, "use_native_tools", True):
        return with_summary(response, report) if response.strip() else fallback_answer(report)
    # Text mode (ReAct): CrewAI parses "Final Answer:"; a reply asking for a tool falls back.
    head, found, body = response.partition(_FINAL)
    if not found and _ACTION in head:
        return f"{_FINAL} {fallback_answer(report)}"
    text = (body if found else head).strip()
    return f"{_FINAL} {with_summary(text, report) if text else fallback_answer(report)}"


def _end(run: _Run) -> None:
    if run.last is not None:
        run.last.restore_tools()
    run.guard.end()
