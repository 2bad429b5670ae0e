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
* The circuit breaker and the post-compaction guard end the run with
  CrewAI's own deliberate stop: the exception raised is loopwarden's
  :class:`~loopwarden.errors.LoopAbort` (its ``.code`` names the rule) and
  CrewAI's ``HookAborted`` at once, which ``Crew.kickoff`` and
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
from typing import Any, Self

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ._base import RunRegistry, append_note, learn_tool, parse_arguments, require, resolve_guard

require("crewai", "crewai")

from crewai.events import crewai_event_bus  # noqa: E402 - after the extra check on purpose
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
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
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


class _Run:
    """loopwarden's view of one agent working on one task within one kickoff."""

    __slots__ = ("claimed", "guard", "lock", "messages", "pending", "summary", "turn")

    def __init__(self, guard: RunGuard) -> None:
        self.guard = guard
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
        **guard_kwargs: Any,
    ) -> None:
        self.guard = resolve_guard(config_or_guard, **guard_kwargs)
        self.agent_id = agent_id if agent_id is not None else self.guard.agent_id
        self._runs: RunRegistry[_RunKey, _Run] = RunRegistry(on_evict=_end)
        self._summary = _summary_marks()
        self._ids = itertools.count(1)
        self._installed = False

    # -- installation ------------------------------------------------------------------
    def install(self) -> Self:
        """Register the hooks with CrewAI (process-wide); returns ``self``."""
        if not self._installed:
            register_before_llm_call_hook(self.before_llm_call)
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

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- runs ----------------------------------------------------------------------------
    def _run(self, agent: Any, task: Any) -> _Run:
        key = _key(agent, task)
        run = self._runs.get(key)
        if run is None:
            run = self._runs.get_or_create(key, lambda: self._new_run(key, agent))
        return run

    def _new_run(self, key: _RunKey, agent: Any) -> _Run:
        execution = key[0]
        role = getattr(agent, "role", None)
        guard = self.guard.run(
            session_id=str(execution) if execution is not None else self.guard.session_id,
            agent_id=self.agent_id if self.agent_id is not None else role,
            tools=(),
        )
        return _Run(guard)

    def _task_ended(self, source: Any, event: Any) -> None:
        self._forget(_key(getattr(event, "agent", None), getattr(event, "task", None)))

    def _kickoff_ended(self, source: Any, event: Any) -> None:
        self._forget(_key(source, None))

    def _forget(self, key: _RunKey) -> None:
        try:
            run = self._runs.forget(key)
            if run is not None:
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
            summary = self._new_summary(run, messages)
            if summary is not None:
                run.summary = summary
                run.guard.on_compaction()
        except Exception:
            logger.exception("loopwarden could not inspect a CrewAI model call")

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
        try:
            decision = run.guard.before_call(name, params, call_id)
        except LoopAbort as stop:
            # CrewAI swallows exceptions of before-hooks: block, then stop in the after hook.
            self._hold(run, _Pending(args, params, call_id, None, stop))
            return False
        self._hold(run, _Pending(args, params, call_id, decision))
        return False if decision.blocked else None

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
        except LoopAbort as stop:
            raise crewai_stop(stop) from None
        if not note:
            return None
        return append_note(result if isinstance(result, str) else str(result), note)


def _end(run: _Run) -> None:
    run.guard.end()
