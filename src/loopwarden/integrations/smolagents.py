"""smolagents integration: loop detection for ``ToolCallingAgent`` and ``CodeAgent``.

::

    from smolagents import ToolCallingAgent
    from loopwarden.integrations.smolagents import LoopGuardForSmolagents

    guard = LoopGuardForSmolagents("loopwarden.json5")
    agent = guard.protect(ToolCallingAgent(tools=[...], model=model, name="support_bot"))
    agent.run("...")  # a stopped run ends with the model's last answer (on_stop="answer")

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
* When loopwarden stops the run (``on_stop``, else ``loopwarden.onStop``, else
  ``ask`` when the agent has smolagents' ``user_input`` tool and ``answer`` when
  it has not):

  - ``answer``: ``run`` makes one last model call with no tools and the
    final-answer instruction (after the agent's memory, as smolagents does when
    ``max_steps`` runs out); its text, with the stop's summary as the last
    paragraph, is the run's final answer (``stopping.fallback_answer`` when that
    call fails or still asks for tools). :meth:`LoopGuardForSmolagents.last_stop`
    gives the report.
  - ``ask``: the agent's ``user_input`` tool (smolagents' ``UserInputTool``)
    asks the person, whose ``allow_once``, ``stop`` or ``continue: <note>`` is
    applied with :meth:`~loopwarden.RunGuard.resume`.
  - ``raise``: :class:`~loopwarden.errors.CircuitBreakerTripped` /
    :class:`~loopwarden.errors.CompactionLoopPersisted` out of ``run``.

smolagents agents are not safe to run concurrently with themselves; separate
agents protected by one :class:`LoopGuardForSmolagents` run concurrently, each
with its own history. The agent's ``name`` is its agent id.
"""

from __future__ import annotations

import inspect
import re
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort, LoopwardenError
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import (
    OnStop,
    StopReport,
    choose_on_stop,
    fallback_answer,
    final_answer_request,
)
from ._base import (
    MAX_ASKS,
    Answer,
    append_note,
    guarded_call,
    read_answer,
    require,
    resolve_guard,
    stop_report,
    text_question,
    with_summary,
)

require("smolagents", "smolagents")

from smolagents.agent_types import (  # noqa: E402 - after the check
    AgentAudio,
    AgentImage,
    handle_agent_output_types,
)
from smolagents.agents import CodeAgent, MultiStepAgent, RunResult, ToolCallingAgent  # noqa: E402
from smolagents.local_python_executor import LocalPythonExecutor  # noqa: E402
from smolagents.memory import ActionStep, FinalAnswerStep  # noqa: E402
from smolagents.models import ChatMessage, MessageRole  # noqa: E402
from smolagents.monitoring import Timing, TokenUsage  # noqa: E402

__all__ = ["LoopGuardForSmolagents", "ToolCallBlocked"]

_FINAL_ANSWER = "final_answer"  # ends the run: never a loop, never guarded
_USER_INPUT = "user_input"  # smolagents' UserInputTool: the agent's way to ask its user
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
        on_stop: what a stop does: ``"answer"`` (a last model call without tools
            writes the run's final answer), ``"ask"`` (the agent's ``user_input``
            tool asks the person; without one it acts as ``"answer"``) or
            ``"raise"``. ``None``: the config's ``loopwarden.onStop``, else ``"ask"``
            for an agent with a ``user_input`` tool and ``"answer"`` for one without.
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

    def last_stop(self, agent: MultiStepAgent) -> dict[str, Any] | None:
        """The report of ``agent``'s latest run if loopwarden stopped it and the run ended
        with a last answer (``StopReport.to_dict()``), else ``None``.

        smolagents' results have no place for it: ``run`` returns the answer itself, and
        neither ``RunResult`` nor the memory steps carry metadata.
        """
        binding = getattr(vars(agent).get("run"), _MARK, None)
        if binding is None or binding.owner is not self:
            raise ValueError("this agent is not protected by this loopwarden guard")
        report = binding.report
        return None if report is None else report.to_dict()

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
        self.asking = threading.Lock()  # held while a person is asked about a stop
        self.stopped_step: ActionStep | None = None  # the step a stop ended
        self.report: StopReport | None = None  # the last answer's report (last_stop)

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
            started = time.time()
            try:
                result = run(task, *args, **kwargs)
            except LoopAbort as stop:
                try:
                    if not self._answers(stop, mine):
                        raise
                    output = self._last_answer(stop, mine, kwargs)
                    if self._full_result(kwargs, args):
                        return self._run_result(output, started)
                    return output
                finally:
                    self._finish(mine)
            except BaseException:
                self._finish(mine)
                raise
            if stream:
                return self._streamed(result, mine, kwargs)
            self._finish(mine)
            return result

        return guarded_run

    def _streamed(
        self, steps: Iterable[Any], mine: RunGuard | None, kwargs: dict[str, Any]
    ) -> Generator[Any, None, None]:
        try:
            yield from steps
        except LoopAbort as stop:
            if not self._answers(stop, mine):
                raise
            output = self._last_answer(stop, mine, kwargs)
            yield self.agent.memory.steps[-1]  # the last answer's step
            yield FinalAnswerStep(output)
        finally:
            self._finish(mine)

    def _answers(self, stop: LoopAbort, mine: RunGuard | None) -> bool:
        """Whether this run's stop ends it with a last answer (not ``raise``)."""
        if mine is None or self.run is not mine:
            return False
        try:
            return self._mode() != "raise"
        except Exception:
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            return False

    def _mode(self) -> OnStop:
        owner = self.owner
        person = self._person() is not None
        return choose_on_stop(owner.on_stop, owner.guard.config.settings.on_stop, person=person)

    def _person(self) -> Any:
        """The agent's ``user_input`` tool: smolagents' way for an agent to ask its user."""
        tool = self.agent.tools.get(_USER_INPUT)
        if tool is None or "question" not in (getattr(tool, "inputs", None) or {}):
            return None
        return tool

    @staticmethod
    def _full_result(kwargs: dict[str, Any], args: tuple[Any, ...]) -> bool:
        given = kwargs.get("return_full_result")
        if given is None and len(args) >= 6:  # run(task, stream, reset, images, args, steps, full)
            given = args[5]
        return bool(given)

    # -- the last answer (onStop answer, and ask's "stop") ------------------------------
    def _last_answer(self, stop: LoopAbort, run: RunGuard | None, kwargs: dict[str, Any]) -> Any:
        """The run's final answer after a stop: one more model call, without tools, after
        the agent's memory and the instruction; recorded as the run's last step."""
        agent = self.agent
        started = time.time()
        steps = agent.memory.steps
        stopped, self.stopped_step = self.stopped_step, None
        if stopped is not None and stopped not in steps:  # a step the stop cut short
            steps.append(stopped)
        if stopped is not None:
            stopped.observations = append_note(stopped.observations or "", stop.message)
        report = self._report(stop, kwargs)
        instruction = ChatMessage(
            role=MessageRole.USER,
            content=[{"type": "text", "text": final_answer_request(report)}],
        )
        message: ChatMessage | None = None
        try:
            messages = [*agent.write_memory_to_messages(), instruction]
            message = agent.model.generate(messages)
        except Exception:
            logger.exception("loopwarden's last model call failed; ending with the stop's summary")
        text = _text(message.content) if message is not None else ""
        if message is None or message.tool_calls or not text.strip():
            final = fallback_answer(report)
        else:
            final = with_summary(text, report)
        self.report = report
        steps.append(
            ActionStep(
                step_number=getattr(agent, "step_number", len(steps)),
                timing=Timing(start_time=started, end_time=time.time()),
                model_input_messages=None,
                model_output_message=message,
                model_output=text or None,
                action_output=final,
                token_usage=message.token_usage if message is not None else None,
                is_final_answer=True,
            )
        )
        return handle_agent_output_types(final)

    def _report(self, stop: LoopAbort, kwargs: dict[str, Any]) -> StopReport:
        """The stop's report, with the run's model usage, steps and ``max_steps``."""
        tokens = 0
        turns = 0
        counted = True
        for step in self.agent.memory.steps:
            if isinstance(step, ActionStep):
                turns += 1
                usage = step.token_usage
                if usage is None:
                    counted = False
                else:
                    tokens += usage.total_tokens
        limit = kwargs.get("max_steps") or getattr(self.agent, "max_steps", None)
        return stop_report(stop).with_usage(
            tokens=tokens if counted and tokens else None,
            turns=turns or None,
            turn_limit=limit if isinstance(limit, int) else None,
            limit_name="max_steps",
        )

    def _run_result(self, output: Any, started: float) -> Any:
        """What ``run(return_full_result=True)`` returns, for a run that ended with a last
        answer (state ``success``: the run ended with an answer, not at ``max_steps``)."""
        agent = self.agent
        inputs = outputs = 0
        counted = True
        for step in agent.memory.steps:
            usage = getattr(step, "token_usage", None)
            if isinstance(step, ActionStep) and usage is None:
                counted = False
            elif usage is not None:
                inputs += usage.input_tokens
                outputs += usage.output_tokens
        return RunResult(
            output=output,
            token_usage=TokenUsage(input_tokens=inputs, output_tokens=outputs) if counted else None,
            steps=agent.memory.get_full_steps(),
            timing=Timing(start_time=started, end_time=time.time()),
            state="success",
        )

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

            def guarded(decided: Decision | None = None) -> Answer[Any]:
                return guarded_call(
                    run,
                    tool_name,
                    arguments,
                    call_id,
                    lambda args: execute(*args),
                    (tool_name, arguments),
                    failure=None if known else _unknown(tool_name),
                    on_failure_note=self._note,
                    decided=decided,
                )

            try:
                answer = guarded()
            except LoopAbort as exc:
                decision = self._on_stop(run, exc)
                if decision.action != "allow":  # "continue", or refused while asking
                    return decision.message
                try:
                    answer = guarded(decision)
                except LoopAbort as again:
                    self.stop = again
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

    # -- when loopwarden stops the run (onStop) --------------------------------------------
    def _on_stop(self, run: RunGuard, stop: LoopAbort) -> Decision:
        """What a stop does to the call it refused: the decision a person's answer made
        (``allow_once``: run it; ``continue``: its note answers the call), a block with the
        stop's message (a parallel call, while a person is being asked), or the stop is
        raised: it ends the run (``run`` turns it into the last answer, or raises it)."""
        try:
            mode = self._mode()
            person = self._person()
        except Exception:  # the stop is still a stop: raised, as before onStop
            logger.exception("loopwarden could not handle a stop (onStop); raising it")
            mode, person = "raise", None
        if mode != "ask" or person is None or not stop.askable or stop.call_id is None:
            self.stop = stop  # in case smolagents' thread pool drops it for another error
            raise stop
        if not self.asking.acquire(blocking=False):  # one question at a time
            return Decision("block", stop.message)
        try:
            reply = self._ask(person, stop)
        finally:
            self.asking.release()
        if reply is None:  # nobody answered: the run ends with the last answer
            self.stop = stop
            raise stop
        choice, note = reply
        try:
            return run.resume(stop, choice, note)
        except LoopAbort as final:  # "stop"
            self.stop = final
            raise final from None

    def _ask(self, person: Any, stop: LoopAbort) -> tuple[Any, str | None] | None:
        """The person's (choice, note) through the agent's ``user_input`` tool; ``None``
        when the tool fails (no terminal, say); ``stop`` after :data:`MAX_ASKS` answers
        that are none of the three."""
        report = self._report(stop, {})
        error: str | None = None
        for _ in range(MAX_ASKS):
            try:
                given = person(question=text_question(report, error))
            except Exception:
                logger.warning("nobody answered loopwarden's question; the run ends", exc_info=True)
                return None
            reply = read_answer(given)
            if reply is not None:
                return reply
            error = f"loopwarden did not understand the answer {str(given)[:80]!r}."
        return ("stop", None)

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
        self.stopped_step = None
        self.report = None
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
            self.stopped_step = memory_step  # not in memory: the stop cuts smolagents short
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
            answer = self._guarded(run, params, call_id, (args, kwargs))
        except LoopAbort as exc:
            # The code may catch the stop: the step callback raises it again.
            decision = binding._on_stop(run, exc)
            if decision.action != "allow":  # "continue", or refused while asking
                raise ToolCallBlocked(decision.message or "") from None
            try:
                answer = self._guarded(run, params, call_id, (args, kwargs), decision)
            except LoopAbort as again:
                binding.stop = again
                raise
        if answer.blocked:
            raise ToolCallBlocked(answer.decision.message or "")
        if answer.note is not None:
            binding._note(answer.note)
        return answer.value

    def _guarded(
        self,
        run: RunGuard,
        params: Any,
        call_id: str,
        call: tuple[tuple[Any, ...], dict[str, Any]],
        decided: Decision | None = None,
    ) -> Answer[Any]:
        return guarded_call(
            run,
            self.name,
            params,
            call_id,
            self._call,
            call,
            on_failure_note=self.binding._note,
            decided=decided,
        )

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


def _text(content: Any) -> str:
    """A model message's text (smolagents gives a string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return ""
