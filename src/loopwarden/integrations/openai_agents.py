"""OpenAI Agents SDK integration: loop detection through tool guardrails and run config.

::

    from agents import Agent, Runner
    from loopwarden.integrations.openai_agents import LoopGuardForAgents

    guard = LoopGuardForAgents("loopwarden.json5")
    agent = guard.protect(Agent(name="support", tools=[...]))
    result = await Runner.run(agent, "...", run_config=guard.run_config())

What it installs, all through the runtime guard (:mod:`loopwarden.guard`):

* :meth:`LoopGuardForAgents.protect` appends a tool **input guardrail** and a
  tool **output guardrail** to every ``FunctionTool`` (and MCP server) of the
  agent and of the agents it hands off to, and wraps ``agent.hooks``. The
  input guardrail checks each call: a blocked call is not run and the model
  gets the block message (``reject_content``); the output guardrail records the
  outcome and appends a warning to the output the model reads. The hooks arm
  the post-compaction guard when a ``compaction`` item appears (server-side
  compaction in a response, or a compacted session history in the input), and
  end the run before the next model call once an unknown-tool stop is pending.
* :meth:`LoopGuardForAgents.run_config` sets
  ``tool_not_found_behavior="return_error_to_model"`` and a
  ``tool_error_formatter`` that counts calls of unknown tool names (the unknown-tool guard)
  and tells failed tool runs apart from results.
* A stop (the circuit breaker, the post-compaction guard) does what ``on_stop``
  says (docs/integrations-openai-agents.md, "When loopwarden stops the run"):

  - ``answer``: the agent's ``tool_use_behavior`` is wrapped (at the first stop)
    so that the turn of the stop ends the run: loopwarden asks the agent's own
    model once more, with no tools and no handoffs, to write its final answer,
    which is the run's ``final_output`` (the stop's summary appended to a text
    answer); :meth:`LoopGuardForAgents.stop_report` gives the report. A stop on
    calls of a missing tool in a turn where no tool ran turns the agent's
    function tools off for the run instead, so the SDK's next model call is
    that last answer.
  - ``raise``: :class:`AgentsCircuitBreakerTripped` /
    :class:`AgentsCompactionLoopPersisted` out of ``Runner.run``: subclasses of
    loopwarden's :class:`~loopwarden.errors.CircuitBreakerTripped` /
    :class:`~loopwarden.errors.CompactionLoopPersisted` and of the SDK's
    ``AgentsException`` (which the SDK lets through unchanged, with ``run_data``).
  - ``ask``: each function tool's ``needs_approval`` is wrapped, so loopwarden's
    check runs before the SDK's approval step and a refused call becomes a tool
    approval interruption (``result.interruptions``); the person's answer is
    applied with :meth:`LoopGuardForAgents.answer` (or the SDK's own
    ``approve`` / ``reject``).

Run identity: one ``Runner.run`` / ``run_sync`` / ``run_streamed`` is one
loopwarden run (recognised by the run's own ``RunContextWrapper.usage``
object, which every tool context of the run shares); each agent of the run has
its own history and per-agent config (agent name = agent id). The session id
is the run config's ``group_id`` (the SDK's conversation id for traces).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import itertools
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import CircuitBreakerTripped, CompactionLoopPersisted, LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, ToolOutcome
from ..stopping import (
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
    parse_arguments,
    require,
    resolve_guard,
    stop_report,
)

require("agents", "openai-agents")

from agents import (  # noqa: E402 - after the check
    Agent,
    AgentHooks,
    AgentOutputSchema,
    AgentOutputSchemaBase,
    FunctionTool,
    ItemHelpers,
    Model,
    ModelTracing,
    RunConfig,
    RunState,
    ToolApprovalItem,
    ToolCallOutputItem,
    ToolsToFinalOutputResult,
)
from agents.exceptions import AgentsException  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.run_config import DEFAULT_MAX_TURNS, ToolErrorFormatterArgs  # noqa: E402
from agents.run_context import RunContextWrapper  # noqa: E402
from agents.tool import FunctionToolResult  # noqa: E402
from agents.tool_guardrails import (  # noqa: E402
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

__all__ = [
    "AgentsCircuitBreakerTripped",
    "AgentsCompactionLoopPersisted",
    "LoopGuardForAgents",
]

_GUARDRAIL_NAME = "loopwarden"
# Bounds for per-guard tables, so that nothing grows with the number of runs.
_MAX_RUNS = 4096
_MAX_PENDING = 256  # calls between the input and the output guardrail, per run
_MAX_SEEN_COMPACTIONS = 4096
_MAX_ASKS = 1024  # questions put to a person and not answered yet, per guard
_ALLOW = ToolGuardrailFunctionOutput.allow()
_NOT_FINAL = ToolsToFinalOutputResult(is_final_output=False, final_output=None)
# What the last answer's history says for a call of the stopped turn whose output
# loopwarden did not see (the API refuses a call without an output).
_NO_OUTPUT = "This call was not run: loopwarden stopped the run."

ErrorFormatter = Callable[[ToolErrorFormatterArgs[Any]], "str | Awaitable[str | None] | None"]


class AgentsCircuitBreakerTripped(CircuitBreakerTripped, AgentsException):
    """:class:`~loopwarden.errors.CircuitBreakerTripped` as the Agents SDK raises it.

    Being an ``AgentsException`` too, it leaves ``Runner.run`` unchanged (the SDK
    wraps any other exception from a guardrail in ``UserError``).
    """


class AgentsCompactionLoopPersisted(CompactionLoopPersisted, AgentsException):
    """:class:`~loopwarden.errors.CompactionLoopPersisted` as the Agents SDK raises it."""


def _for_agents(exc: LoopAbort) -> LoopAbort:
    if isinstance(exc, AgentsException):
        return exc
    cls: type[LoopAbort] = (
        AgentsCompactionLoopPersisted
        if isinstance(exc, CompactionLoopPersisted)
        else AgentsCircuitBreakerTripped
    )
    out = cls(exc.message, tool_name=exc.tool_name, count=exc.count, detector=exc.detector)
    # What RunGuard.resume needs to find the refused call again, and the report.
    out.report, out.call_id, out._key = exc.report, exc.call_id, exc._key
    return out


class _Run:
    """loopwarden's view of one ``Runner.run``: one :class:`RunGuard` per agent."""

    __slots__ = (
        "abort",
        "agent",
        "agent_obj",
        "anchor",
        "answered",
        "arm",
        "asked",
        "config",
        "decided",
        "ending",
        "errors",
        "guards",
        "instructions",
        "limit",
        "links",
        "missing",
        "model_input",
        "params",
        "report",
        "response",
        "run_id",
        "scanned",
        "session_id",
        "tools_off",
        "turns",
        "warned",
    )

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex
        self.session_id: str | None = None
        self.guards: dict[str, RunGuard] = {}
        self.agent: str | None = None  # the agent that made the latest model call
        self.agent_obj: Any = None
        self.abort: LoopAbort | None = None  # a stop decided where the SDK swallows exceptions
        self.errors: dict[str, BaseException] = {}  # call id -> exception of a failed tool run
        self.params: dict[str, Any] = {}  # call id -> parsed arguments, for the output guardrail
        self.warned: dict[str, Any] = {}  # call id -> the warn decision, for the output guardrail
        self.arm = False  # a compaction was seen: arm guards created from now on too
        self.scanned = 0  # model input items already looked at for compaction items
        self.anchor: object = None
        self.links = 0  # usage objects (runs, and runs resumed from them) that map here
        self.turns = 0  # model calls of the run
        self.limit: int | None = None  # the run's max_turns, as run_config() was told it
        self.config: RunConfig | None = None
        # The latest model call: what loopwarden's last answer repeats to the model.
        self.instructions: str | None = None
        self.model_input: list[Any] = []
        self.response: ModelResponse | None = None
        # onStop: the stop that ends the run with a last answer, and that answer's report.
        self.ending: LoopAbort | None = None
        self.answered = False
        self.report: StopReport | None = None
        self.tools_off = False  # function tools are off: the SDK's next call is the last answer
        self.missing: dict[str, str] = {}  # call id -> answer to a missing tool, this turn
        # onStop: ask. Questions put to the person (call id -> stop, guard), and decisions
        # taken before the SDK's approval step (call id -> decision or stop).
        self.asked: dict[str, tuple[LoopAbort, RunGuard]] = {}
        self.decided: dict[str, Decision | LoopAbort] = {}


def _remember(table: dict[str, Any], key: str, value: Any) -> None:
    table[key] = value
    if len(table) > _MAX_PENDING:
        del table[next(iter(table))]


_CONTENT_TYPES = frozenset({"text", "image", "file", "input_text", "input_image", "input_file"})


def _is_structured(output: Any) -> bool:
    """Text/image/file content items, which the SDK sends as such: a note cannot join them."""
    items = output if isinstance(output, (list, tuple)) else (output,)
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        if kind in _CONTENT_TYPES:
            return True
    return False


def _item_field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _is_call(item: Any) -> bool:
    """A model output item that asks for a tool (function, hosted, computer, shell ...)."""
    kind = _item_field(item, "type")
    return isinstance(kind, str) and kind.endswith("_call")


def _needs_approval(tool: FunctionTool) -> bool:
    setting = tool.needs_approval
    if getattr(setting, "_loopwarden", None) is not None:
        setting = setting._loopwarden_inner  # type: ignore[union-attr]
    return setting is not False


class _GuardHooks(AgentHooks[Any]):
    """Agent hooks that feed loopwarden and pass every callback on to the user's hooks."""

    def __init__(self, owner: LoopGuardForAgents, inner: Any, on_stop: OnStop) -> None:
        self.owner = owner
        self.inner = inner
        self.on_stop: OnStop = on_stop

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        await self.owner._llm_start(context, agent, system_prompt, input_items)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)
        await self.owner._llm_end(context, agent, response)


class _AnswerBehavior:
    """An agent's ``tool_use_behavior``, wrapped: the turn of a stop ends the run with
    loopwarden's last answer; any other turn is decided by the agent's own behavior."""

    def __init__(self, owner: LoopGuardForAgents, inner: Any) -> None:
        self.owner = owner
        self.inner = inner

    async def __call__(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        owner = self.owner
        try:
            run = owner._run_of_results(context, results)
            if run is not None:
                if run.asked:
                    await owner._settle_rejections(run, results)
                if run.ending is not None and not run.answered:
                    final = await owner._last_answer(run, context, results)
                    return ToolsToFinalOutputResult(is_final_output=True, final_output=final)
        except Exception:
            logger.exception("loopwarden could not end the run with a last answer")
        return await _inner_behavior(self.inner, context, results)


async def _inner_behavior(
    behavior: Any, context: RunContextWrapper[Any], results: list[FunctionToolResult]
) -> ToolsToFinalOutputResult:
    """What the agent's own ``tool_use_behavior`` decides (the SDK's meanings of it)."""
    if behavior == "run_llm_again" or not results:
        return _NOT_FINAL
    if behavior == "stop_on_first_tool":
        return ToolsToFinalOutputResult(is_final_output=True, final_output=results[0].output)
    if isinstance(behavior, dict):
        names = behavior.get("stop_at_tool_names", [])
        for result in results:
            if result.tool.name in names or result.tool.qualified_name in names:
                return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
        return _NOT_FINAL
    value = behavior(context, results)
    if inspect.isawaitable(value):
        value = await value
    out: ToolsToFinalOutputResult = value
    return out


class LoopGuardForAgents:
    """Loop detection for OpenAI Agents SDK agents.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults. (``guard=``,
            its old name, still works and warns.)
        agent_id: the agent id whose per-agent config applies to every agent; by
            default each agent's ``name`` is its agent id.
        on_stop: what a stop does: ``"answer"`` (the run ends with a last answer of
            the model, without tools), ``"raise"`` (:class:`AgentsCircuitBreakerTripped`)
            or ``"ask"`` (a tool approval interruption). Unset: the config's
            ``loopwarden.onStop``, else ``ask`` for agents that already have tools
            needing approval (their caller answers ``result.interruptions``) and
            ``answer`` for the others.
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
        self.on_stop = on_stop
        choose_on_stop(on_stop, None, person=True)  # a clear error for a wrong value, now
        # An in-process store never waits: on the per-call path the plain methods
        # spare the coroutine layers of their async twins.
        self._inline = isinstance(self.guard.store, InProcess)
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check_call, name=_GUARDRAIL_NAME
        )
        """The tool input guardrail, for tools attached after :meth:`protect`."""
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._record_outcome, name=_GUARDRAIL_NAME
        )
        """The tool output guardrail, for tools attached after :meth:`protect`."""
        self._runs: RunRegistry[int, _Run] = RunRegistry(_MAX_RUNS, on_evict=self._ended_run)
        # Guards of finished runs, ended on the next run start: their states are
        # dropped outside garbage collection, which may run while a store lock is held.
        self._ended: collections.deque[RunGuard] = collections.deque()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        # Call id of a question put to a person -> its run: a run resumed from a RunState
        # has a new usage object, and is found again by the calls it answers.
        self._asks: collections.OrderedDict[str, _Run] = collections.OrderedDict()

    # -- installation ----------------------------------------------------------
    def protect(self, agent: Agent[Any]) -> Agent[Any]:
        """Install loopwarden on ``agent`` and on the agents it hands off to; returns ``agent``.

        Tools added later need :meth:`protect` again (it is idempotent), or
        ``input_guardrail`` / ``output_guardrail`` in their own guardrail lists.
        """
        agents: list[Agent[Any]] = []
        seen: set[int] = set()
        stack: list[Any] = [agent]
        while stack:
            current = stack.pop()
            if id(current) in seen or not isinstance(current, Agent):
                continue
            seen.add(id(current))
            agents.append(current)
            for handoff in current.handoffs:
                if isinstance(handoff, Agent):
                    stack.append(handoff)
                else:  # a Handoff keeps a weak reference to its target agent
                    ref = getattr(handoff, "_agent_ref", None)
                    target = ref() if callable(ref) else None
                    if target is not None:
                        stack.append(target)
        mode = self._mode_for(agents)
        for current in agents:
            for tool in current.tools:
                if isinstance(tool, FunctionTool):
                    self._install(tool)
                    if mode == "ask":
                        self._gate(tool)
            for server in getattr(current, "mcp_servers", None) or ():
                if hasattr(server, "tool_input_guardrails"):
                    self._install(server)
            hooks = current.hooks
            if isinstance(hooks, _GuardHooks) and hooks.owner is self:
                hooks.on_stop = mode
            else:
                current.hooks = _GuardHooks(self, hooks, mode)
        return agent

    def _mode_for(self, agents: list[Agent[Any]]) -> OnStop:
        """``on_stop`` for these agents: someone answers interruptions when ``ask`` was
        chosen, or when the agents already have tools that need approval."""
        configured = self.guard.config.settings.on_stop
        chosen = self.on_stop if self.on_stop is not None else configured
        person = chosen == "ask" or any(
            isinstance(tool, FunctionTool) and _needs_approval(tool)
            for current in agents
            for tool in current.tools
        )
        return choose_on_stop(self.on_stop, configured, person=person)

    def _mode(self, agent: Any) -> OnStop:
        hooks = getattr(agent, "hooks", None)
        if isinstance(hooks, _GuardHooks) and hooks.owner is self:
            return hooks.on_stop
        return self._mode_for([])

    def _install(self, owner: Any) -> None:
        # New lists rather than appends: a guardrail list may be shared with other tools.
        inputs = list(owner.tool_input_guardrails or ())
        if self.input_guardrail not in inputs:
            owner.tool_input_guardrails = [*inputs, self.input_guardrail]
        outputs = list(owner.tool_output_guardrails or ())
        if self.output_guardrail not in outputs:
            owner.tool_output_guardrails = [*outputs, self.output_guardrail]

    def _gate(self, tool: FunctionTool) -> None:
        """``onStop: ask``: loopwarden's check moves before the SDK's approval step, so
        that a call it refuses is put to the person as an approval."""
        inner = tool.needs_approval
        if getattr(inner, "_loopwarden", None) is self:
            return
        name = tool.name

        async def needs_approval(context: Any, params: dict[str, Any], call_id: str) -> bool:
            if inner is True:
                return True  # the user's own approval; loopwarden checks the call after it
            if callable(inner):
                value: Any = inner(context, params, call_id)
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return True
            return await self._check_before_approval(context, name, params, call_id)

        needs_approval._loopwarden = self  # type: ignore[attr-defined]
        needs_approval._loopwarden_inner = inner  # type: ignore[attr-defined]
        tool.needs_approval = needs_approval

    def _switch_off_tools(self, agent: Any) -> None:
        """A stop on calls of a missing tool: the agent's function tools are off for the
        rest of the stopped run, so the SDK's next model call is made without them."""
        for tool in getattr(agent, "tools", ()):
            if not isinstance(tool, FunctionTool):
                continue
            inner = tool.is_enabled
            if getattr(inner, "_loopwarden", None) is self:
                continue

            async def is_enabled(context: Any, owner: Any, inner: Any = inner) -> bool:
                run = self._runs.get(id(context.usage))
                if run is not None and run.tools_off and not run.answered:
                    return False
                if isinstance(inner, bool):
                    return inner
                value = inner(context, owner)
                if inspect.isawaitable(value):
                    value = await value
                return bool(value)

            is_enabled._loopwarden = self  # type: ignore[attr-defined]
            tool.is_enabled = is_enabled

    def _answer_on(self, agent: Any) -> None:
        """Wrap the agent's ``tool_use_behavior`` (once): the turn of a stop ends the run."""
        behavior = getattr(agent, "tool_use_behavior", None)
        if isinstance(behavior, _AnswerBehavior) and behavior.owner is self:
            return
        agent.tool_use_behavior = _AnswerBehavior(self, behavior)

    def run_config(
        self, base: RunConfig | None = None, *, max_turns: int | None = None, **overrides: Any
    ) -> RunConfig:
        """A ``RunConfig`` for ``Runner.run`` with loopwarden's unknown-tool handling.

        ``base`` (or a default ``RunConfig``) is copied with
        ``tool_not_found_behavior="return_error_to_model"`` and loopwarden's
        ``tool_error_formatter``, which calls the base's own formatter first.
        ``max_turns`` is the ``max_turns`` you pass to ``Runner.run`` (the SDK's
        default when unset), for what a stop's summary says it saved.
        ``overrides`` are further ``RunConfig`` fields (``group_id=`` names the
        conversation, which loopwarden uses as the session id).
        """
        config = base if base is not None else RunConfig()
        inner: ErrorFormatter | None = overrides.pop(
            "tool_error_formatter", config.tool_error_formatter
        )
        group_id = overrides.get("group_id", config.group_id)

        limit = max_turns if max_turns is not None else DEFAULT_MAX_TURNS

        async def tool_error_formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
            return await self._format_error(args, inner, group_id, limit)

        # The turn limit rides on the formatter too: RunConfig has no field for it, and
        # the SDK does not tell hooks or guardrails the run's max_turns.
        tool_error_formatter._loopwarden_max_turns = limit  # type: ignore[attr-defined]
        fields: dict[str, Any] = {"tool_not_found_behavior": "return_error_to_model", **overrides}
        fields["tool_error_formatter"] = tool_error_formatter
        return dataclasses.replace(config, **fields)

    # -- a stop's outcome, for the caller -----------------------------------------
    def stop_report(self, result: Any) -> StopReport | None:
        """The report of the loopwarden stop that ended this run with a last answer
        (``on_stop="answer"``, or a person's ``stop``), or ``None``.

        ``result`` is a ``RunResult`` / ``RunResultStreaming`` (or its
        ``context_wrapper``). The report's ``tokens`` and ``turns`` are the run's at
        the stop, ``turn_limit`` its ``max_turns`` (:meth:`run_config`).
        """
        wrapper = getattr(result, "context_wrapper", result)
        run = self._runs.get(id(getattr(wrapper, "usage", None)))
        return run.report if run is not None else None

    def question(self, item: ToolApprovalItem) -> str | None:
        """What to ask the person about this interruption, if loopwarden raised it
        (``None``: an approval of your own tools)."""
        asked = self._asked(item)
        return ask_question(stop_report(asked[1])) if asked is not None else None

    def answer(
        self, state: RunState[Any], item: ToolApprovalItem, choice: str, note: str | None = None
    ) -> None:
        """Apply a person's answer to loopwarden's question ``item`` on ``state``, the
        ``RunState`` you then pass to ``Runner.run`` to resume the run.

        ``allow_once`` approves the call (it runs once; the next repeat stops the run
        again). ``continue`` rejects it with ``note`` worded for the model, and the
        run goes on with loopwarden's counts afresh. ``stop`` rejects it, and the
        resumed run ends with a last answer, as under ``on_stop="answer"``.
        Raises ``ValueError`` for an unknown choice, or an interruption this guard
        did not raise (or no longer remembers).
        """
        parsed = parse_choice(choice)
        if parsed is None:
            raise ValueError(f"unknown answer to a stop {choice!r}: allow_once, stop or continue")
        asked = self._asked(item)
        if asked is None:
            raise ValueError("this interruption is not a question loopwarden asked")
        run, stop, rg = asked
        if parsed == "allow_once":
            state.approve(item)  # the input guardrail lifts the stop when the call runs
            return
        call_id = _item_field(item.raw_item, "call_id")
        run.asked.pop(call_id, None)
        if parsed == "continue":
            decision = rg.resume(stop, "continue", note)
            state.reject(item, rejection_message=decision.message)
            return
        run.ending = stop
        state.reject(item, rejection_message=stop.message)

    def _asked(self, item: Any) -> tuple[_Run, LoopAbort, RunGuard] | None:
        call_id = _item_field(getattr(item, "raw_item", None), "call_id")
        run = self._asks.get(call_id) if isinstance(call_id, str) else None
        entry = run.asked.get(call_id) if run is not None and isinstance(call_id, str) else None
        return (run, *entry) if run is not None and entry is not None else None

    # -- run bookkeeping ---------------------------------------------------------
    def _run_for(self, context: RunContextWrapper[Any], call_id: str | None = None) -> _Run:
        usage = context.usage
        run = self._runs.get(id(usage))
        if run is None:
            # A run seen first at a tool call (not at a model call) is a resumed one.
            asked = self._asks.pop(call_id, None) if call_id is not None and self._asks else None
            run = self._link(usage, asked) if asked is not None else self._new_run(usage)
        return run

    def _run_of_results(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> _Run | None:
        run = self._runs.get(id(context.usage))
        if run is None and self._asks:
            for result in results:
                call_id = _item_field(getattr(result.run_item, "raw_item", None), "call_id")
                if isinstance(call_id, str) and call_id in self._asks:
                    return self._link(context.usage, self._asks.pop(call_id))
        return run

    def _new_run(self, usage: object) -> _Run:
        while self._ended:
            self._ended.popleft().end()
        return self._link(usage, None)

    def _link(self, usage: object, run: _Run | None) -> _Run:
        """Map ``usage`` to ``run`` (a new one when ``None``): a run resumed from a
        ``RunState`` has a copy of the usage object and goes on with the same run."""
        key = id(usage)
        entry = self._runs.get_or_create(key, _Run if run is None else lambda: run)
        entry.links += 1
        try:
            weakref.finalize(usage, self._forget, key)
        except TypeError:
            # Not weak-referenceable: hold it, so that its id cannot be reused by
            # another run while the entry lives; the registry's bound evicts it.
            entry.anchor = usage
        return entry

    def _forget(self, key: int) -> None:
        run = self._runs.forget(key)
        if run is not None:
            run.links -= 1
            if run.links <= 0:
                self._ended_run(run)

    def _ended_run(self, run: _Run) -> None:
        self._ended.extend(run.guards.values())

    async def _new_guard(
        self, run: _Run, agent: str | None, group_id: str | None, has_config: bool
    ) -> RunGuard:
        name = agent or ""
        if run.session_id is None and has_config:
            run.session_id = group_id
        rg = self.guard.run(
            run.run_id,
            session_id=run.session_id if run.session_id is not None else self.guard.session_id,
            agent_id=self.agent_id if self.agent_id is not None else agent,
            tools=(),
        )
        run.guards[name] = rg
        if run.arm:
            await rg.aon_compaction()
        return rg

    # -- guardrails ---------------------------------------------------------------
    async def _check_call(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        try:
            call_id = ctx.tool_call_id
            run = self._run_for(ctx, call_id)
            agent = data.agent.name
            rg = run.guards.get(agent)
            if rg is None:
                config = ctx.run_config
                rg = await self._new_guard(
                    run, agent, config.group_id if config is not None else None, config is not None
                )
                if run.config is None and config is not None:
                    run.config = config
                    formatter = config.tool_error_formatter
                    run.limit = getattr(formatter, "_loopwarden_max_turns", None)
            name = ctx.tool_name
            tools = rg.tools
            if tools is None or name not in tools:
                learn_tool(rg, name, True)
            # onStop: ask. A decision taken before the SDK's approval step, or a person's
            # answer to loopwarden's question.
            pending = run.asked.pop(call_id, None) if run.asked else None
            decided = run.decided.pop(call_id, None) if run.decided else None
            if pending is None and decided is None:
                params = parse_arguments(ctx.tool_arguments)
                _remember(run.params, call_id, params)
            elif run.config is None and ctx.run_config is not None:
                # The guard was made before the approval step, which sees no run config.
                run.config = config = ctx.run_config
                run.limit = getattr(config.tool_error_formatter, "_loopwarden_max_turns", None)
        except Exception:
            logger.exception("loopwarden could not check a call of %s; allowing it", ctx.tool_name)
            return _ALLOW
        if pending is not None:  # a person let the refused call run once
            return await self._allow_once(pending, data.agent)
        try:
            if decided is None:
                if self._inline:
                    decided = rg.before_call(name, params, call_id)
                else:
                    decided = await rg.abefore_call(name, params, call_id)
        except LoopAbort as exc:
            return self._refused(run, data.agent, exc)
        if isinstance(decided, LoopAbort):
            return self._refused(run, data.agent, decided)
        decision = decided
        if decision.blocked:
            run.params.pop(call_id, None)  # not run: no output guardrail will ask for it
            return ToolGuardrailFunctionOutput.reject_content(
                decision.message or "", output_info=_info(decision.action, decision)
            )
        if decision.action == "warn":
            _remember(run.warned, call_id, decision)
        return _ALLOW

    async def _allow_once(
        self, asked: tuple[LoopAbort, RunGuard], agent: Any
    ) -> ToolGuardrailFunctionOutput:
        stop, rg = asked
        try:
            if self._inline:
                rg.resume(stop, "allow_once")
            else:
                await rg.aresume(stop, "allow_once")
        except LoopAbort as exc:  # a stop no person may lift
            raise _for_agents(exc) from None
        except Exception:
            logger.exception("loopwarden could not apply a person's answer; allowing the call")
        return _ALLOW

    def _refused(self, run: _Run, agent: Any, exc: LoopAbort) -> ToolGuardrailFunctionOutput:
        """The call that stopped the run (or a later one of the stopped run)."""
        stop = _for_agents(exc)
        mode = self._mode(agent)
        if mode == "raise":
            raise stop
        info = {"loopwarden": "stop", "detector": stop.code, "count": stop.count}
        if not (mode == "ask" and run.asked):  # else the pending question decides
            self._end_with_answer(run, agent, stop)
        return ToolGuardrailFunctionOutput.reject_content(stop.message, output_info=info)

    def _end_with_answer(self, run: _Run, agent: Any, stop: LoopAbort) -> None:
        if run.ending is None:
            run.ending = stop
        self._answer_on(agent)

    async def _check_before_approval(
        self, context: Any, name: str, params: dict[str, Any], call_id: str
    ) -> bool:
        """``onStop: ask``: loopwarden's check of a call, before the SDK's approval step;
        ``True`` puts the call to the person (it stopped the run)."""
        try:
            run = self._run_for(context, call_id)
            agent = run.agent
            rg = run.guards.get(agent or "")
            if rg is None:
                rg = await self._new_guard(run, agent, None, False)
            tools = rg.tools
            if tools is None or name not in tools:
                learn_tool(rg, name, True)
            _remember(run.params, call_id, params)
        except Exception:
            logger.exception("loopwarden could not check a call of %s; allowing it", name)
            return False
        try:
            if self._inline:
                decision: Decision | LoopAbort = rg.before_call(name, params, call_id)
            else:
                decision = await rg.abefore_call(name, params, call_id)
        except LoopAbort as exc:
            decision = _for_agents(exc)
            if exc.askable and exc.call_id == call_id and not run.asked:
                run.asked[call_id] = (decision, rg)
                self._asks[call_id] = run
                if len(self._asks) > _MAX_ASKS:
                    self._asks.popitem(last=False)
                if run.agent_obj is not None:
                    self._answer_on(run.agent_obj)  # a person's "stop" ends with an answer
                return True
        _remember(run.decided, call_id, decision)
        return False

    async def _settle_rejections(self, run: _Run, results: list[FunctionToolResult]) -> None:
        """Questions rejected with the caller's own message (the SDK's ``reject(...,
        rejection_message=...)``): the person let the run go on with that note."""
        for result in results:
            call_id = _item_field(getattr(result.run_item, "raw_item", None), "call_id")
            asked = run.asked.pop(call_id, None) if isinstance(call_id, str) else None
            if asked is None:
                continue
            stop, rg = asked
            note = result.output if isinstance(result.output, str) else None
            if self._inline:
                rg.resume(stop, "continue", note)
            else:
                await rg.aresume(stop, "continue", note)

    async def _record_outcome(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        output = data.output
        try:
            run = self._runs.get(id(ctx.usage))
            rg = run.guards.get(data.agent.name) if run is not None else None
            if run is None or rg is None:
                return _ALLOW  # the input guardrail did not see this call
            call_id = ctx.tool_call_id
            error = run.errors.pop(call_id, MISSING) if run.errors else MISSING
            params = run.params.pop(call_id, MISSING)
            if params is MISSING:
                params = parse_arguments(ctx.tool_arguments)
            warned = run.warned.pop(call_id, None) if run.warned else None
        except Exception:
            logger.exception("loopwarden could not record an outcome of %s", ctx.tool_name)
            return _ALLOW
        try:
            if self._inline:
                note = rg.after_call(ctx.tool_name, params, call_id, result=output, error=error)
            else:
                note = await rg.aafter_call(
                    ctx.tool_name, params, call_id, result=output, error=error
                )
        except LoopAbort as exc:
            stop = _for_agents(exc)
            if self._mode(data.agent) == "raise":
                raise stop from None
            # The call ran: no call to put to a person; the run ends with a last answer.
            self._end_with_answer(run, data.agent, stop)
            return _ALLOW
        if not note:
            return _ALLOW
        if _is_structured(output):
            logger.warning(
                "loopwarden could not append its warning to the content items output by %s",
                ctx.tool_name,
            )
            return _ALLOW
        text = output if isinstance(output, str) else str(output)
        # The SDK's output guardrails can only allow, reject or raise: a changed
        # output is a "rejection". output_info says it is loopwarden's warning.
        info = _info("warn", warned) if warned is not None else {"loopwarden": "warn"}
        return ToolGuardrailFunctionOutput.reject_content(append_note(text, note), output_info=info)

    # -- run config pieces ---------------------------------------------------------
    async def _format_error(
        self,
        args: ToolErrorFormatterArgs[Any],
        inner: ErrorFormatter | None,
        group_id: str | None,
        limit: int | None,
    ) -> str | None:
        message: str | None = None
        if inner is not None:
            try:
                value = inner(args)
                message = await value if inspect.isawaitable(value) else value
            except Exception:
                logger.exception("the tool_error_formatter given to loopwarden failed")
        # The SDK swallows exceptions from here: stops are kept for the next model call.
        try:
            if args.kind == "tool_exception":
                run = self._runs.get(id(args.run_context.usage))
                if run is not None and args.error is not None:
                    _remember(run.errors, args.call_id, args.error)
                return message
            if args.kind == "approval_rejected":
                return self._rejected(args, message)
            return await self._unknown_tool(args, message, group_id, limit)
        except Exception:
            logger.exception("loopwarden could not count a call of unknown tool %s", args.tool_name)
            return message

    def _rejected(self, args: ToolErrorFormatterArgs[Any], message: str | None) -> str | None:
        """The SDK's plain ``reject()`` of loopwarden's question: the person said stop."""
        run = self._runs.get(id(args.run_context.usage))
        if run is None:
            if args.call_id not in self._asks:
                return message
            run = self._run_for(args.run_context, args.call_id)
        asked = run.asked.pop(args.call_id, None)
        if asked is None:
            return message
        run.ending = asked[0]
        return asked[0].message

    async def _unknown_tool(
        self,
        args: ToolErrorFormatterArgs[Any],
        message: str | None,
        group_id: str | None,
        limit: int | None,
    ) -> str | None:
        run = self._run_for(args.run_context)
        if run.limit is None:
            run.limit = limit
        rg = run.guards.get(run.agent or "")
        if rg is None:
            rg = await self._new_guard(run, run.agent, group_id, True)
        name = args.tool_name
        learn_tool(rg, name, False)
        # The SDK does not pass the arguments of a call it could not resolve; the
        # unknown-tool guard counts by name alone.
        try:
            decision = await rg.abefore_call(name, None, args.call_id)
            if decision.blocked:
                answer = decision.message
            else:
                text = message if message is not None else args.default_message
                # The SDK said the name is unknown: no need to recognise its wording (or
                # the user's formatter's) in the text.
                outcome = ToolOutcome(error=text, unknown_tool=name)
                note = await rg.aafter_call(name, None, args.call_id, result=outcome)
                answer = append_note(text, note) if note else message
        except LoopAbort as exc:
            stop = _for_agents(exc)
            agent = run.agent_obj
            if self._mode(agent) == "raise" or agent is None or run.answered:
                run.abort = stop
                return exc.message
            # No call of a real tool to end the turn with: the SDK's next model call is
            # the last answer, made without the agent's function tools.
            self._end_with_answer(run, agent, stop)
            run.tools_off = True
            self._switch_off_tools(agent)
            answer = f"{exc.message}\n\n{final_answer_request(stop_report(stop))}"
        # What the model read for this call, for a last answer's history of the turn.
        _remember(run.missing, args.call_id, answer if answer is not None else args.default_message)
        return answer

    # -- hooks -----------------------------------------------------------------------
    async def _llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        run = self._run_for(context)
        run.agent = agent.name
        run.agent_obj = agent
        run.turns += 1
        # The latest model input: a last answer repeats it (a reference, not a copy).
        run.instructions = system_prompt
        run.model_input = input_items
        if run.missing:
            run.missing.clear()
        if run.abort is not None:
            raise run.abort
        try:
            # The input of a run's next model call repeats the previous one and adds to
            # its end: look only at what is new (all of it again if it got shorter).
            total = len(input_items)
            start = run.scanned if run.scanned <= total else 0
            run.scanned = total
            fresh = self._new_compactions(itertools.islice(input_items, start, None))
        except Exception:
            logger.exception("loopwarden could not look for compaction items")
            return
        if fresh:
            await self._arm(run)

    async def _llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        run = self._runs.get(id(context.usage))
        if run is not None:
            run.response = response
            if run.tools_off and not run.answered:
                self._answered_by_sdk(run, context, response)
        try:
            fresh = self._new_compactions(response.output)
        except Exception:
            logger.exception("loopwarden could not look for compaction items")
            return
        if fresh:
            await self._arm(self._run_for(context))

    def _answered_by_sdk(self, run: _Run, context: Any, response: ModelResponse) -> None:
        """The SDK's model call after a stop on a missing tool: the run's last answer.
        A text answer gets the summary appended (the SDK reads it from this response
        after this hook)."""
        stop = run.ending
        if stop is None:
            return
        run.answered = True
        report = self._with_usage(run, context, stop_report(stop), before_last=True)
        run.report = report
        if any(_is_call(item) for item in response.output):
            run.abort = stop  # the model still asks for tools: end the run at its next call
            return
        if run.agent_obj is not None and _output_schema(run.agent_obj) is not None:
            return
        for item in reversed(response.output):
            content = _item_field(item, "content")
            if _item_field(item, "type") != "message" or not content:
                continue
            part = content[-1]
            text = _item_field(part, "text")
            if isinstance(text, str):
                part.text = f"{text}\n\n{report.summary()}" if text else fallback_answer(report)
            return

    def _with_usage(
        self, run: _Run, context: Any, report: StopReport, *, before_last: bool = False
    ) -> StopReport:
        limit = run.limit
        turns = run.turns - 1 if before_last else run.turns
        if not isinstance(limit, int) or turns > limit:
            limit = None  # a run past the limit loopwarden knows had another one
        usage = getattr(context, "usage", None)
        tokens = getattr(usage, "total_tokens", None) or None
        return report.with_usage(
            tokens=tokens, turns=turns or None, turn_limit=limit, limit_name="max_turns"
        )

    def _new_compactions(self, items: Iterable[Any]) -> bool:
        """Whether ``items`` hold a ``compaction`` item this guard has not seen yet."""
        fresh = False
        seen = self._seen
        for item in items:
            if _item_field(item, "type") != "compaction":
                continue
            key = _item_field(item, "id") or str(_item_field(item, "encrypted_content"))[:128]
            if key in seen:
                continue
            seen[key] = None
            if len(seen) > _MAX_SEEN_COMPACTIONS:
                seen.popitem(last=False)
            fresh = True
        return fresh

    async def _arm(self, run: _Run) -> None:
        run.arm = True
        for rg in list(run.guards.values()):
            await rg.aon_compaction()

    # -- the last answer (onStop: answer) ----------------------------------------------
    async def _last_answer(
        self, run: _Run, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> Any:
        """The run's final output after a stop: the model's answer to
        :func:`~loopwarden.stopping.final_answer_request`, asked without tools, or
        :func:`~loopwarden.stopping.fallback_answer` when that fails."""
        stop = run.ending
        assert stop is not None
        report = self._with_usage(run, context, stop_report(stop))
        run.report = report
        run.answered = True
        try:
            final = await self._ask_model(run, context, results, report)
        except Exception:
            logger.exception("loopwarden's last model call failed; ending with its summary")
            final = None
        return fallback_answer(report) if final is None else final

    async def _ask_model(
        self,
        run: _Run,
        context: RunContextWrapper[Any],
        results: list[FunctionToolResult],
        report: StopReport,
    ) -> Any:
        agent = run.agent_obj
        if agent is None:
            return None
        config = run.config if run.config is not None else RunConfig()
        model = _model(agent, config)
        settings = agent.model_settings.resolve(config.model_settings)
        settings = dataclasses.replace(settings, tool_choice=None, parallel_tool_calls=None)
        schema = _output_schema(agent)
        items = self._history(run, results)
        items.append({"role": "user", "content": final_answer_request(report)})
        try:
            prompt = await agent.get_prompt(context)
        except Exception:
            prompt = None
        response = await model.get_response(
            system_instructions=run.instructions,
            input=items,
            model_settings=settings,
            tools=[],
            output_schema=schema,
            handoffs=[],
            tracing=_tracing(config),
            previous_response_id=None,
            conversation_id=None,
            prompt=prompt,
        )
        context.usage.add(response.usage)
        if any(_is_call(item) for item in response.output):
            logger.warning("loopwarden's last model call still asked for tools")
            return None
        text = None
        for item in response.output:
            text = ItemHelpers.extract_text(item) or text
        if not text:
            return None
        if schema is None or schema.is_plain_text():
            return f"{text}\n\n{report.summary()}"
        return schema.validate_json(text)

    def _history(self, run: _Run, results: list[FunctionToolResult]) -> list[Any]:
        """The stopped turn as the model would see it next: its input, the model's
        response, and an output for each of the response's calls."""
        items = list(run.model_input)
        response = run.response
        if response is not None:
            items.extend(response.to_input_items())
        answered: set[str] = set()
        for result in results:
            item = result.run_item
            if isinstance(item, ToolCallOutputItem):
                converted = item.to_input_item()
                items.append(converted)
                answered.add(str(_item_field(converted, "call_id")))
        for call_id, text in run.missing.items():
            if call_id not in answered:
                items.append({"type": "function_call_output", "call_id": call_id, "output": text})
                answered.add(call_id)
        if response is not None:
            for output in response.output:
                call_id = _item_field(output, "call_id")
                if _item_field(output, "type") == "function_call" and call_id not in answered:
                    items.append(
                        {"type": "function_call_output", "call_id": call_id, "output": _NO_OUTPUT}
                    )
        return items


def _model(agent: Any, config: RunConfig) -> Model:
    """The model the SDK would use for ``agent`` in a run with ``config``."""
    if isinstance(config.model, Model):
        return config.model
    if isinstance(config.model, str):
        return config.model_provider.get_model(config.model)
    if isinstance(agent.model, Model):
        return agent.model
    return config.model_provider.get_model(agent.model)


def _output_schema(agent: Any) -> AgentOutputSchemaBase | None:
    output_type = agent.output_type
    if output_type is None or output_type is str:
        return None
    if isinstance(output_type, AgentOutputSchemaBase):
        return output_type
    return AgentOutputSchema(output_type)


def _tracing(config: RunConfig) -> ModelTracing:
    if config.tracing_disabled:
        return ModelTracing.DISABLED
    if config.trace_include_sensitive_data:
        return ModelTracing.ENABLED
    return ModelTracing.ENABLED_WITHOUT_DATA


def _info(action: str, decision: Any) -> dict[str, Any]:
    """``output_info`` of loopwarden's guardrail results: what it did, and why."""
    detection = decision.detection
    return {
        "loopwarden": action,
        "detector": detection.detector if detection is not None else None,
        "count": detection.count if detection is not None else None,
    }
