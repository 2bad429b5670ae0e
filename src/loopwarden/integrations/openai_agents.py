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
* The circuit breaker and the post-compaction guard raise
  :class:`AgentsCircuitBreakerTripped` / :class:`AgentsCompactionLoopPersisted`
  out of ``Runner.run``: subclasses of loopwarden's
  :class:`~loopwarden.errors.CircuitBreakerTripped` /
  :class:`~loopwarden.errors.CompactionLoopPersisted` and of the SDK's
  ``AgentsException`` (which the SDK lets through unchanged, with ``run_data``).

Run identity: one ``Runner.run`` / ``run_sync`` / ``run_streamed`` is one
loopwarden run (recognised by the run's own ``RunContextWrapper.usage``
object, which every tool context of the run shares); each agent of the run has
its own history and per-agent config (agent name = agent id). The session id
is the run config's ``group_id`` (the SDK's conversation id for traces).
"""

from __future__ import annotations

import collections
import inspect
import itertools
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .._logging import logger
from ..config import ConfigSource
from ..errors import CircuitBreakerTripped, CompactionLoopPersisted, LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, ToolOutcome
from ..stores import InProcess
from ._base import RunRegistry, append_note, learn_tool, parse_arguments, require, resolve_guard

require("agents", "openai-agents")

from agents import Agent, AgentHooks, FunctionTool, RunConfig  # noqa: E402 - after the check
from agents.exceptions import AgentsException  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.run_config import ToolErrorFormatterArgs  # noqa: E402
from agents.run_context import RunContextWrapper  # noqa: E402
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
_ALLOW = ToolGuardrailFunctionOutput.allow()

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
    return cls(exc.message, tool_name=exc.tool_name, count=exc.count, detector=exc.detector)


class _Run:
    """loopwarden's view of one ``Runner.run``: one :class:`RunGuard` per agent."""

    __slots__ = (
        "abort",
        "agent",
        "anchor",
        "arm",
        "errors",
        "guards",
        "params",
        "run_id",
        "scanned",
        "session_id",
        "warned",
    )

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex
        self.session_id: str | None = None
        self.guards: dict[str, RunGuard] = {}
        self.agent: str | None = None  # the agent that made the latest model call
        self.abort: LoopAbort | None = None  # a stop decided where the SDK swallows exceptions
        self.errors: dict[str, BaseException] = {}  # call id -> exception of a failed tool run
        self.params: dict[str, Any] = {}  # call id -> parsed arguments, for the output guardrail
        self.warned: dict[str, Any] = {}  # call id -> the warn decision, for the output guardrail
        self.arm = False  # a compaction was seen: arm guards created from now on too
        self.scanned = 0  # model input items already looked at for compaction items
        self.anchor: object = None


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


class _GuardHooks(AgentHooks[Any]):
    """Agent hooks that feed loopwarden and pass every callback on to the user's hooks."""

    def __init__(self, owner: LoopGuardForAgents, inner: Any) -> None:
        self.owner = owner
        self.inner = inner

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
        await self.owner._llm_start(context, agent, input_items)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)
        await self.owner._llm_end(context, agent, response)


class LoopGuardForAgents:
    """Loop detection for OpenAI Agents SDK agents.

    Args:
        config_or_guard: a :class:`~loopwarden.LoopGuard`, a config file path or
            mapping (OpenClaw layout), or ``None`` for the defaults. (``guard=``,
            its old name, still works and warns.)
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

    # -- installation ----------------------------------------------------------
    def protect(self, agent: Agent[Any]) -> Agent[Any]:
        """Install loopwarden on ``agent`` and on the agents it hands off to; returns ``agent``.

        Tools added later need :meth:`protect` again (it is idempotent), or
        ``input_guardrail`` / ``output_guardrail`` in their own guardrail lists.
        """
        seen: set[int] = set()
        stack: list[Any] = [agent]
        while stack:
            current = stack.pop()
            if id(current) in seen or not isinstance(current, Agent):
                continue
            seen.add(id(current))
            for tool in current.tools:
                if isinstance(tool, FunctionTool):
                    self._install(tool)
            for server in getattr(current, "mcp_servers", None) or ():
                if hasattr(server, "tool_input_guardrails"):
                    self._install(server)
            hooks = current.hooks
            if not (isinstance(hooks, _GuardHooks) and hooks.owner is self):
                current.hooks = _GuardHooks(self, hooks)
            for handoff in current.handoffs:
                if isinstance(handoff, Agent):
                    stack.append(handoff)
                else:  # a Handoff keeps a weak reference to its target agent
                    ref = getattr(handoff, "_agent_ref", None)
                    target = ref() if callable(ref) else None
                    if target is not None:
                        stack.append(target)
        return agent

    def _install(self, owner: Any) -> None:
        # New lists rather than appends: a guardrail list may be shared with other tools.
        inputs = list(owner.tool_input_guardrails or ())
        if self.input_guardrail not in inputs:
            owner.tool_input_guardrails = [*inputs, self.input_guardrail]
        outputs = list(owner.tool_output_guardrails or ())
        if self.output_guardrail not in outputs:
            owner.tool_output_guardrails = [*outputs, self.output_guardrail]

    def run_config(self, base: RunConfig | None = None, **overrides: Any) -> RunConfig:
        """A ``RunConfig`` for ``Runner.run`` with loopwarden's unknown-tool handling.

        ``base`` (or a default ``RunConfig``) is copied with
        ``tool_not_found_behavior="return_error_to_model"`` and loopwarden's
        ``tool_error_formatter``, which calls the base's own formatter first.
        ``overrides`` are further ``RunConfig`` fields (``group_id=`` names the
        conversation, which loopwarden uses as the session id).
        """
        import dataclasses

        config = base if base is not None else RunConfig()
        inner: ErrorFormatter | None = overrides.pop(
            "tool_error_formatter", config.tool_error_formatter
        )
        group_id = overrides.get("group_id", config.group_id)

        async def tool_error_formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
            return await self._format_error(args, inner, group_id)

        fields: dict[str, Any] = {"tool_not_found_behavior": "return_error_to_model", **overrides}
        fields["tool_error_formatter"] = tool_error_formatter
        return dataclasses.replace(config, **fields)

    # -- run bookkeeping ---------------------------------------------------------
    def _run_for(self, context: RunContextWrapper[Any]) -> _Run:
        usage = context.usage
        run = self._runs.get(id(usage))
        if run is None:
            run = self._new_run(usage)
        return run

    def _new_run(self, usage: object) -> _Run:
        while self._ended:
            self._ended.popleft().end()
        key = id(usage)
        run = self._runs.get_or_create(key, _Run)
        try:
            weakref.finalize(usage, self._forget, key)
        except TypeError:
            # Not weak-referenceable: hold it, so that its id cannot be reused by
            # another run while the entry lives; the registry's bound evicts it.
            run.anchor = usage
        return run

    def _forget(self, key: int) -> None:
        run = self._runs.forget(key)
        if run is not None:
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
            run = self._run_for(ctx)
            agent = data.agent.name
            rg = run.guards.get(agent)
            if rg is None:
                config = ctx.run_config
                rg = await self._new_guard(
                    run, agent, config.group_id if config is not None else None, config is not None
                )
            name = ctx.tool_name
            tools = rg.tools
            if tools is None or name not in tools:
                learn_tool(rg, name, True)
            call_id = ctx.tool_call_id
            params = parse_arguments(ctx.tool_arguments)
            _remember(run.params, call_id, params)
        except Exception:
            logger.exception("loopwarden could not check a call of %s; allowing it", ctx.tool_name)
            return _ALLOW
        try:
            if self._inline:
                decision = rg.before_call(name, params, call_id)
            else:
                decision = await rg.abefore_call(name, params, call_id)
        except LoopAbort as exc:
            raise _for_agents(exc) from None
        if decision.blocked:
            run.params.pop(call_id, None)  # not run: no output guardrail will ask for it
            return ToolGuardrailFunctionOutput.reject_content(
                decision.message or "", output_info=_info(decision.action, decision)
            )
        if decision.action == "warn":
            _remember(run.warned, call_id, decision)
        return _ALLOW

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
            raise _for_agents(exc) from None
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
            if args.kind != "tool_not_found":
                return message
            return await self._unknown_tool(args, message, group_id)
        except Exception:
            logger.exception("loopwarden could not count a call of unknown tool %s", args.tool_name)
            return message

    async def _unknown_tool(
        self, args: ToolErrorFormatterArgs[Any], message: str | None, group_id: str | None
    ) -> str | None:
        run = self._run_for(args.run_context)
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
                return decision.message
            text = message if message is not None else args.default_message
            # The SDK said the name is unknown: no need to recognise its wording (or the
            # user's formatter's) in the text.
            outcome = ToolOutcome(error=text, unknown_tool=name)
            note = await rg.aafter_call(name, None, args.call_id, result=outcome)
        except LoopAbort as exc:
            run.abort = _for_agents(exc)
            return exc.message
        return append_note(text, note) if note else message

    # -- hooks -----------------------------------------------------------------------
    async def _llm_start(self, context: Any, agent: Any, input_items: list[Any]) -> None:
        run = self._run_for(context)
        run.agent = agent.name
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
        try:
            fresh = self._new_compactions(response.output)
        except Exception:
            logger.exception("loopwarden could not look for compaction items")
            return
        if fresh:
            await self._arm(self._run_for(context))

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


def _info(action: str, decision: Any) -> dict[str, Any]:
    """``output_info`` of loopwarden's guardrail results: what it did, and why."""
    detection = decision.detection
    return {
        "loopwarden": action,
        "detector": detection.detector if detection is not None else None,
        "count": detection.count if detection is not None else None,
    }
