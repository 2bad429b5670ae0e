"""smolagents integration: loop detection for ``ToolCallingAgent`` and ``CodeAgent``.

::

    from smolagents import ToolCallingAgent
    from loopwarden.integrations.smolagents import LoopGuardForSmolagents

    guard = LoopGuardForSmolagents("loopwarden.json5")
    agent = guard.protect(ToolCallingAgent(tools=[...], model=model, name="support_bot"))
    agent.run("...")  # raises CircuitBreakerTripped / CompactionLoopPersisted on a stop

What :meth:`LoopGuardForSmolagents.protect` installs on the agent (and on its
managed agents), all through the runtime guard (:mod:`loopwarden.guard`):

* ``run``: every ``agent.run(...)`` (``stream=True`` too, and a managed agent's
  call) is one loopwarden run; it ends when the run returns or raises.
* ``ToolCallingAgent``: ``process_tool_calls`` notes the call ids of the
  model's tool calls; ``execute_tool_call`` checks each call before it runs
  (parallel calls run in smolagents' thread pool, each paired by its call id).
  A blocked call is not run: its observation is the block message. A warning
  is appended to the observation. Names the agent has neither as a tool nor as
  a managed agent are counted by the unknown-tool guard. A stop raised here is
  outside smolagents' tool error handling, so it ends ``run``.
* ``CodeAgent`` (local executor): each tool and managed agent the generated
  code can call is wrapped in the executor (``send_tools``), so every call
  inside the code goes through the guard. A blocked call raises
  :class:`ToolCallBlocked` inside the code: the code stops there, and the
  model reads the block message in the step's error. Warnings are added to
  the step's observation. Calls of functions that do not exist (smolagents'
  "Forbidden function evaluation" error) are counted by the unknown-tool guard.
* An ``ActionStep`` step callback adds pending warnings to the step's
  observation and re-raises a stop that the code (or smolagents' parallel
  tool runner) caught, so the run still ends with it. It also arms the
  post-compaction guard when a step callback removed steps from
  ``agent.memory`` (smolagents has no compaction of its own; memory-trimming
  callbacks are how its users compact).

smolagents agents are not safe to run concurrently with themselves; separate
agents protected by one :class:`LoopGuardForSmolagents` run concurrently, each
with its own history. The agent's ``name`` is its agent id.
"""

from __future__ import annotations

import inspect
import re
import threading
import uuid
from collections.abc import Callable, Generator, Iterable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import LoopAbort, LoopwardenError
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ._base import append_note, guarded_call, require, resolve_guard

require("smolagents", "smolagents")

from smolagents.agent_types import AgentAudio, AgentImage  # noqa: E402 - after the check
from smolagents.agents import CodeAgent, MultiStepAgent, ToolCallingAgent  # noqa: E402
from smolagents.local_python_executor import LocalPythonExecutor  # noqa: E402
from smolagents.memory import ActionStep  # noqa: E402

__all__ = ["LoopGuardForSmolagents", "ToolCallBlocked"]

_FINAL_ANSWER = "final_answer"  # ends the run: never a loop, never guarded
# What LocalPythonExecutor raises for a call of a name the code cannot reach.
_NO_FUNCTION = re.compile(
    r"Forbidden function evaluation: '([^']+)' is not among the explicitly allowed tools"
)
_MARK = "_loopwarden_binding"
_STEP_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("memory_step", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("agent", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
    ]
)


class ToolCallBlocked(LoopwardenError):
    """Raised inside a ``CodeAgent``'s code for a call loopwarden blocked; the message says why."""


class LoopGuardForSmolagents:
    """Loop detection for smolagents agents: :meth:`protect` each agent once.

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

    def protect(self, agent: MultiStepAgent) -> MultiStepAgent:
        """Install loopwarden on ``agent`` and its managed agents; returns ``agent``.

        Idempotent. Raises ``TypeError`` for an agent this integration cannot
        guard (a ``CodeAgent`` whose code runs in a remote executor, or an agent
        type other than ``ToolCallingAgent`` / ``CodeAgent``).
        """
        stack: list[Any] = [agent]
        seen: set[int] = set()
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            _Binding.install(self, current)
            stack.extend(getattr(current, "managed_agents", {}).values())
        return agent


class _Binding:
    """loopwarden's state on one protected agent: its current run and what a step left."""

    def __init__(self, owner: LoopGuardForSmolagents, agent: MultiStepAgent) -> None:
        self.owner = owner
        self.agent = agent
        self.code = isinstance(agent, CodeAgent)
        self.run: RunGuard | None = None
        self.stop: LoopAbort | None = None  # a stop to raise again at the end of the step
        self.notes: list[str] = []  # warnings for the step's observation
        self.pending: list[tuple[str, Any, str]] = []  # the step's (name, arguments, call id)
        self.step_key = -1  # CodeAgent: the step whose calls are being numbered
        self.step_calls = 0
        self.steps_seen: int | None = None  # len(agent.memory.steps) at the last step's end
        self.lock = threading.Lock()

    # -- installation -------------------------------------------------------------
    @classmethod
    def install(cls, owner: LoopGuardForSmolagents, agent: Any) -> None:
        if not isinstance(agent, (ToolCallingAgent, CodeAgent)):
            raise TypeError(
                f"loopwarden guards smolagents' ToolCallingAgent and CodeAgent, not "
                f"{type(agent).__name__}"
            )
        installed = getattr(vars(agent).get("run"), _MARK, None)
        if installed is not None:
            if installed.owner is not owner:
                raise ValueError("this agent is already protected by another loopwarden guard")
            return
        if isinstance(agent, CodeAgent) and not isinstance(
            agent.python_executor, LocalPythonExecutor
        ):
            raise TypeError(
                "loopwarden guards the tool calls of a CodeAgent's local executor; with "
                f"{type(agent.python_executor).__name__} the tools run in the remote sandbox"
            )
        binding = cls(owner, agent)
        run = binding._wrap_run(agent.run)
        setattr(run, _MARK, binding)
        if isinstance(agent, ToolCallingAgent):
            agent.process_tool_calls = binding._wrap_process(agent.process_tool_calls)
            agent.execute_tool_call = binding._wrap_execute(agent.execute_tool_call)
        else:
            executor = agent.python_executor
            executor.send_tools = binding._wrap_send_tools(executor.send_tools)
        agent.step_callbacks.register(ActionStep, _step_callback(binding))
        agent.run = run

    def _wrap_run(self, run: Callable[..., Any]) -> Callable[..., Any]:
        def guarded_run(task: str, *args: Any, **kwargs: Any) -> Any:
            mine = self._start()
            stream = kwargs["stream"] if "stream" in kwargs else bool(args and args[0])
            try:
                result = run(task, *args, **kwargs)
            except BaseException:
                self._finish(mine)
                raise
            if stream:
                return self._streamed(result, mine)
            self._finish(mine)
            return result

        return guarded_run

    def _streamed(self, steps: Iterable[Any], mine: RunGuard | None) -> Generator[Any, None, None]:
        try:
            yield from steps
        finally:
            self._finish(mine)

    def _wrap_process(self, process: Callable[..., Any]) -> Callable[..., Any]:
        def process_tool_calls(chat_message: Any, memory_step: Any) -> Any:
            try:
                calls = [
                    (call.function.name, call.function.arguments, call.id)
                    for call in chat_message.tool_calls or ()
                ]
                with self.lock:
                    self.pending = calls
            except Exception:
                logger.exception("loopwarden could not read the call ids of a smolagents step")
            return process(chat_message, memory_step)

        return process_tool_calls

    def _wrap_execute(self, execute: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
        def execute_tool_call(tool_name: str, arguments: Any) -> Any:
            run = self.run
            if run is None or tool_name == _FINAL_ANSWER:
                return execute(tool_name, arguments)
            try:
                call_id = self._claim(tool_name, arguments)
                agent = self.agent
                known = tool_name in agent.tools or tool_name in agent.managed_agents
            except Exception:
                logger.exception("loopwarden could not guard a call of %s; running it", tool_name)
                return execute(tool_name, arguments)
            try:
                answer = guarded_call(
                    run,
                    tool_name,
                    arguments,
                    call_id,
                    lambda args: execute(*args),
                    (tool_name, arguments),
                    failure=None if known else _unknown(tool_name),
                    on_failure_note=self._note,
                )
            except LoopAbort as exc:
                self.stop = exc  # in case smolagents' thread pool drops it for another error
                raise
            if answer.blocked:
                return answer.decision.message
            value = answer.value
            if answer.note is None:
                return value
            if isinstance(value, (AgentImage, AgentAudio)):  # its observation is a placeholder
                self._note(answer.note)
                return value
            return append_note(str(value), answer.note)

        return execute_tool_call

    def _wrap_send_tools(self, send_tools: Callable[[dict[str, Any]], None]) -> Any:
        def guarded_send_tools(tools: dict[str, Any]) -> None:
            wrapped = {
                name: tool if name == _FINAL_ANSWER else _CodeTool(self, name, tool)
                for name, tool in tools.items()
            }
            send_tools(wrapped)

        return guarded_send_tools

    # -- runs ------------------------------------------------------------------------
    def _start(self) -> RunGuard | None:
        try:
            agent = self.agent
            owner = self.owner
            names = [*agent.tools, *agent.managed_agents]
            run = owner.guard.run(
                uuid.uuid4().hex,
                agent_id=owner.agent_id if owner.agent_id is not None else agent.name,
                tools=names,
            )
        except Exception:
            logger.exception("loopwarden could not start a smolagents run; running unguarded")
            return None
        previous = self.run
        self.run = run
        self.stop = None
        self.notes = []
        self.pending = []
        self.steps_seen = None
        if previous is not None:  # a run whose end never came (an abandoned stream)
            previous.end()
        return run

    def _finish(self, run: RunGuard | None) -> None:
        if run is None:
            return
        if self.run is run:
            self.run = None
            self.stop = None
        run.end()

    # -- calls ------------------------------------------------------------------------
    def _claim(self, name: str, arguments: Any) -> str | None:
        """The call id of the model's call this execution answers (the first unclaimed match)."""
        with self.lock:
            pending = self.pending
            for index, (n, args, call_id) in enumerate(pending):
                if n == name and (args is arguments or args == arguments):
                    del pending[index]
                    return call_id
        return None

    def code_call_id(self) -> str:
        """``call_<step>.<n>``: smolagents' id of the code step, and the call's place in it."""
        key = len(self.agent.memory.steps)
        with self.lock:
            if key != self.step_key:
                self.step_key = key
                self.step_calls = 0
            self.step_calls += 1
            return f"call_{key}.{self.step_calls}"

    def _note(self, note: str) -> None:
        with self.lock:
            self.notes.append(note)

    # -- the end of a step ----------------------------------------------------------------
    def after_step(self, memory_step: ActionStep, agent: Any = None) -> None:
        """Step callback: deliver warnings, count unknown functions, raise a caught stop."""
        stop = self.stop
        if stop is not None:
            self.stop = None
            raise stop
        run = self.run
        if run is None:
            return
        try:
            if self.code:
                self._unknown_function(run, memory_step)
            self._check_compaction(run)
            with self.lock:
                notes, self.notes = self.notes, []
            if notes:
                memory_step.observations = append_note(
                    memory_step.observations or "", "\n\n".join(notes)
                )
        except LoopAbort:
            raise
        except Exception:
            logger.exception("loopwarden could not finish a smolagents step")

    def _unknown_function(self, run: RunGuard, memory_step: ActionStep) -> None:
        error = memory_step.error
        if error is None:
            return
        text = str(error)
        match = _NO_FUNCTION.search(text)
        if match is None:
            return
        name = match.group(1)
        calls = memory_step.tool_calls
        call_id = calls[0].id if calls else None
        # Arguments of a call the interpreter refused are not known: counted by name alone.
        decision = run.before_call(name, None, call_id)
        if decision.blocked:
            self._note(decision.message or "")
            return
        note = run.after_call(
            name, None, call_id, result=ToolOutcome(error=text, unknown_tool=name)
        )
        if note:
            self._note(note)

    def _check_compaction(self, run: RunGuard) -> None:
        count = len(self.agent.memory.steps)
        seen = self.steps_seen
        self.steps_seen = count
        # The previous step was appended after its callbacks: fewer steps now means a
        # callback removed some.
        if seen is not None and count < seen + 1:
            run.on_compaction()


def _step_callback(binding: _Binding) -> Callable[..., None]:
    """``binding.after_step`` as smolagents calls it, with its signature attached.

    smolagents reads every callback's signature on every step (to pass ``agent=``
    or not); a ready ``__signature__`` spares it working one out for a method.
    """

    def after_step(memory_step: ActionStep, agent: Any = None) -> None:
        binding.after_step(memory_step, agent)

    after_step.__signature__ = _STEP_SIGNATURE  # type: ignore[attr-defined]
    return after_step


def _unknown(name: str) -> Callable[[BaseException], ToolOutcome]:
    # smolagents said the name is unknown: no need to recognise its wording.
    return lambda exc: ToolOutcome(error=exc, unknown_tool=name)


class _CodeTool:
    """A tool as a CodeAgent's code sees it: the same call, through the guard."""

    __slots__ = ("binding", "inputs", "name", "tool")

    def __init__(self, binding: _Binding, name: str, tool: Any) -> None:
        self.binding = binding
        self.name = name
        self.tool = tool
        self.inputs: dict[str, Any] = getattr(tool, "inputs", None) or {}

    def __getattr__(self, attribute: str) -> Any:  # the tool's other attributes, unchanged
        return getattr(self.tool, attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        binding = self.binding
        run = binding.run
        if run is None:
            return self.tool(*args, **kwargs)
        try:
            params = self._params(args, kwargs)
            call_id = binding.code_call_id()
        except Exception:
            logger.exception("loopwarden could not guard a call of %s; running it", self.name)
            return self.tool(*args, **kwargs)
        try:
            answer = guarded_call(
                run,
                self.name,
                params,
                call_id,
                self._call,
                (args, kwargs),
                on_failure_note=binding._note,
            )
        except LoopAbort as exc:
            binding.stop = exc  # the code may catch it: the step callback raises it again
            raise
        if answer.blocked:
            raise ToolCallBlocked(answer.decision.message or "")
        if answer.note is not None:
            binding._note(answer.note)
        return answer.value

    def _call(self, call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        return self.tool(*call[0], **call[1])

    def _params(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's arguments by name, as ``Tool.__call__`` reads them."""
        if not args:
            return kwargs
        inputs = self.inputs
        first = args[0]
        if (
            len(args) == 1
            and not kwargs
            and isinstance(first, dict)
            and all(k in inputs for k in first)
        ):
            return first
        names = list(inputs)
        if len(args) <= len(names):
            return {**dict(zip(names, args, strict=False)), **kwargs}
        return {"args": list(args), **kwargs}
