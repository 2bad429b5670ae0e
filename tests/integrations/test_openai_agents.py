"""OpenAI Agents SDK integration, driven offline with the SDK's own ``ScriptedModel``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    AgentHooks,
    Runner,
    SQLiteSession,
    ToolOutputText,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCompactionItem

import loopwarden as lw
from loopwarden.integrations.openai_agents import (
    AgentsCircuitBreakerTripped,
    AgentsCompactionLoopPersisted,
    LoopGuardForAgents,
)
from tests._snippets import snippet
from tests.integrations._shared import BLOCKED, SMALL, Events

# The note on a poll whose result says the job still runs (`pending`): loopwarden's wait
# wording (docs/stopping.md, "Polls of a running job").
WARNING = "WARNING: the job is still running: poll_status has been polled"

# Nothing may try to upload traces: the SDK's global switch, plus tracing_disabled per run.
set_tracing_disabled(True)


def poll_tool(ran: list[str], result: Callable[[str, int], str] | None = None) -> Any:
    @function_tool
    def poll_status(job: str) -> str:
        """Status of a background job."""
        ran.append(job)
        return result(job, len(ran)) if result is not None else "pending"

    return poll_status


def stuck(n: int, tool: str = "poll_status", args: dict[str, Any] | None = None) -> list[Any]:
    """Model steps that call ``tool`` with the same arguments ``n`` times, then answer."""
    steps: list[Any] = [
        [function_call(tool, args if args is not None else {"job": "42"}, call_id=f"c{i}")]
        for i in range(n)
    ]
    return [*steps, [assistant_message("done")]]


def outputs(model: ScriptedModel) -> dict[str, Any]:
    """call id -> the tool output the model saw, from the input of its last call."""
    last = model.last_call
    assert last is not None
    return {
        item["call_id"]: item["output"]
        for item in last.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def run_sync(*args: Any, **kwargs: Any) -> Any:
    """``Runner.run_sync``, closing the default event loop it leaves open on purpose."""
    try:
        return Runner.run_sync(*args, **kwargs)
    finally:
        policy = asyncio.get_event_loop_policy()
        policy.get_event_loop().close()
        policy.set_event_loop(None)


def run(agent: Agent[Any], guard: LoopGuardForAgents, mode: str, **kwargs: Any) -> Any:
    """One run in the given mode: ``async`` (Runner.run), ``sync`` or ``streamed``."""
    config = guard.run_config(tracing_disabled=True)
    if mode == "sync":
        return run_sync(agent, "Is job 42 done?", run_config=config, **kwargs)
    if mode == "async":
        return asyncio.run(Runner.run(agent, "Is job 42 done?", run_config=config, **kwargs))

    async def streamed() -> Any:
        result = Runner.run_streamed(agent, "Is job 42 done?", run_config=config, **kwargs)
        async for _ in result.stream_events():
            pass
        return result

    return asyncio.run(streamed())


@pytest.mark.parametrize("mode", ["async", "sync", "streamed"])
def test_stuck_agent_is_warned_then_blocked_then_stopped(mode: str, events: Events) -> None:
    ran: list[str] = []
    model = ScriptedModel(stuck(12))
    guard = LoopGuardForAgents(SMALL, on_event=events, on_stop="raise")
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))

    with pytest.raises(lw.CircuitBreakerTripped) as caught:
        run(agent, guard, mode, max_turns=30)

    stop = caught.value
    assert isinstance(stop, AgentsCircuitBreakerTripped)
    assert isinstance(stop, AgentsException)  # the SDK let it through and attached run data
    assert stop.run_data is not None
    assert (stop.code, stop.tool_name, stop.count) == ("global_circuit_breaker", "poll_status", 7)
    assert len(ran) == 5  # calls 6 and 7 were blocked, call 8 stopped the run
    seen = outputs(model)
    assert seen["c2"] == "pending"
    assert seen["c3"].startswith("pending\n\n" + WARNING)  # the warning rides on the result
    assert seen["c5"].startswith(BLOCKED) and seen["c6"].startswith(BLOCKED)
    assert len(model.calls) == 8  # the run ended at the 8th call: no further model turn
    assert events.actions() == ["warn", "block", "block", "stop"]
    assert {e.agent_id for e in events.items} == {"poller"}


async def test_stuck_agent_with_a_sqlite_store(tmp_path: Path, events: Events) -> None:
    # A store that does I/O: the integration goes through the guard's async methods.
    ran: list[str] = []
    model = ScriptedModel(stuck(12))
    guard = LoopGuardForAgents(
        SMALL, store=f"sqlite:///{tmp_path / 'lw.db'}", on_event=events, on_stop="raise"
    )
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))
    try:
        with pytest.raises(lw.CircuitBreakerTripped):
            await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))
    finally:
        guard.guard.close()
    assert len(ran) == 5
    assert outputs(model)["c3"].startswith("pending\n\n" + WARNING)
    assert events.actions() == ["warn", "block", "block", "stop"]


def test_hallucinated_tool_is_counted_blocked_and_stops_the_run(events: Events) -> None:
    ran: list[str] = []
    model = ScriptedModel(stuck(12, tool="no_such_tool", args={"q": "x"}))
    guard = LoopGuardForAgents(SMALL, on_event=events, on_stop="raise")
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))

    with pytest.raises(lw.CircuitBreakerTripped) as caught:
        asyncio.run(Runner.run(agent, "hi", max_turns=30, run_config=guard.run_config()))

    assert caught.value.detector == "unknown_tool_repeat"
    assert caught.value.tool_name == "no_such_tool"
    seen = outputs(model)
    assert seen["c0"] == seen["c2"] == "Tool 'no_such_tool' not found."  # the SDK's own answer
    assert "there is no tool named 'no_such_tool'" in seen["c3"]  # blocked after 3 misses
    # The stop answered the 8th call (the SDK asks the formatter for text, and swallows its
    # exceptions) and ended the run before the model was asked again.
    assert caught.value.run_data is not None
    answers = {
        item.raw_item["call_id"]: item.output
        for item in caught.value.run_data.new_items
        if item.type == "tool_call_output_item"
    }
    assert "stopped this run" in answers["c7"]
    assert len(model.calls) == 8
    assert events.actions() == ["block"] * 4 + ["stop"]
    assert ran == []


def test_run_config_overrides_win() -> None:
    # An explicit tool_not_found_behavior is respected: the SDK ends the run itself.
    model = ScriptedModel(stuck(3, tool="no_such_tool"))
    guard = LoopGuardForAgents(SMALL)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
    config = guard.run_config(tool_not_found_behavior="raise_error", tracing_disabled=True)
    assert config.tracing_disabled and config.tool_error_formatter is not None
    with pytest.raises(AgentsException, match="no_such_tool"):
        asyncio.run(Runner.run(agent, "hi", run_config=config))


async def test_server_side_compaction_then_identical_calls_abort(lw_logs: Any) -> None:
    ran: list[str] = []
    compaction = ResponseCompactionItem(id="cmp_1", type="compaction", encrypted_content="...")
    steps = stuck(6)
    steps[0] = [compaction, *steps[0]]
    model = ScriptedModel(steps)
    guard = LoopGuardForAgents(SMALL, on_stop="raise")
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))

    with pytest.raises(lw.CompactionLoopPersisted) as caught:
        await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))

    abort = caught.value
    assert isinstance(abort, AgentsCompactionLoopPersisted)
    assert abort.code == "compaction_loop_persisted"
    assert (abort.tool_name, abort.count) == ("poll_status", 3)
    assert len(ran) == 3
    assert "post-compaction guard armed for 3 attempts" in lw_logs.text


class CompactingSession(SQLiteSession):
    """A compaction-aware session (the SDK calls ``run_compaction`` after a turn) that
    replaces the history with a compaction item, as ``OpenAIResponsesCompactionSession`` does
    with the output of the Responses compact endpoint."""

    def __init__(self, session_id: str, *, compact: bool) -> None:
        super().__init__(session_id)
        self.compact = compact
        self.compactions = 0

    async def run_compaction(self, args: Any = None) -> None:
        if not self.compact:
            return
        self.compactions += 1
        await self.clear_session()
        await self.add_items(
            [
                {"type": "compaction", "id": f"cmp_{self.compactions}", "encrypted_content": "x"},
                {"role": "assistant", "content": "Summary: job 42 was pending."},
            ]
        )


@pytest.mark.parametrize("compact", [True, False])
async def test_compacted_session_arms_the_next_run(compact: bool) -> None:
    ran: list[str] = []
    tool = poll_tool(ran)
    guard = LoopGuardForAgents(SMALL, on_stop="raise")
    session = CompactingSession("thread-1", compact=compact)
    first = ScriptedModel(stuck(2))
    agent = guard.protect(Agent(name="poller", model=first, tools=[tool]))
    config = guard.run_config(tracing_disabled=True, group_id="thread-1")
    await Runner.run(agent, "Is job 42 done?", session=session, run_config=config)

    # The next user turn starts from the compacted history and repeats itself.
    second = ScriptedModel(stuck(4))
    agent.model = second
    if compact:
        with pytest.raises(lw.CompactionLoopPersisted):
            await Runner.run(agent, "And now?", session=session, run_config=config)
        assert len(ran) == 2 + 3
    else:
        result = await Runner.run(agent, "And now?", session=session, run_config=config)
        assert result.final_output == "done"
        assert len(ran) == 2 + 4
    assert session.compactions == (1 if compact else 0)
    session.close()  # Python 3.13 warns about unclosed sqlite3 connections (an error here)


async def test_failing_tool_is_recorded_as_an_error_and_blocked(tmp_path: Path) -> None:
    @function_tool
    def poll_status(job: str) -> str:
        """Status of a background job."""
        raise ConnectionError("status service unreachable")

    record = tmp_path / "run.jsonl"
    model = ScriptedModel(stuck(6))
    guard = LoopGuardForAgents(SMALL, run_record=record)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_status]))

    await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))
    guard.guard.close()

    seen = outputs(model)
    # The model saw the SDK's failure text; loopwarden recorded the exception itself.
    assert seen["c0"].startswith("An error occurred while running the tool.")
    assert seen["c5"].startswith(BLOCKED)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["is_error"] for line in lines if line["type"] == "outcome"] == [True] * 5


async def test_content_item_outputs_are_kept_and_the_warning_is_logged(
    events: Events, lw_logs: Any
) -> None:
    @function_tool
    def poll_status(job: str) -> ToolOutputText:
        """Status of a background job."""
        return ToolOutputText(text="pending")

    model = ScriptedModel(stuck(4))
    guard = LoopGuardForAgents(SMALL, on_event=events)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_status]))

    await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))

    assert events.actions() == ["warn"]
    # The SDK still sends the text item as such; the warning went to the log only.
    assert outputs(model)["c3"] == [{"type": "input_text", "text": "pending"}]
    assert "could not append its warning to the content items" in lw_logs.text


async def test_users_hooks_guardrails_and_formatter_keep_working(events: Events) -> None:
    from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_input_guardrail

    seen_by_user: list[str] = []

    class UserHooks(AgentHooks[Any]):
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            seen_by_user.append(f"tool_end:{result[:7]}")

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            seen_by_user.append("llm_end")

    @tool_input_guardrail
    def user_check(data: Any) -> ToolGuardrailFunctionOutput:
        seen_by_user.append("user_guardrail")
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[user_check])
    def poll_status(job: str) -> str:
        """Status of a background job."""
        return "pending"

    def formatter(args: Any) -> str | None:
        return f"No tool called {args.tool_name}." if args.kind == "tool_not_found" else None

    steps = [
        [function_call("poll_status", {"job": "1"}, call_id="a")],
        [function_call("nope", {}, call_id="b")],
        [assistant_message("done")],
    ]
    model = ScriptedModel(steps)
    guard = LoopGuardForAgents(SMALL, on_event=events)
    agent = Agent(name="poller", model=model, tools=[poll_status], hooks=UserHooks())
    guard.protect(guard.protect(agent))  # idempotent

    base = guard.run_config(tool_error_formatter=formatter, tracing_disabled=True)
    result = await Runner.run(agent, "hi", run_config=base)

    assert result.final_output == "done"
    assert outputs(model) == {"a": "pending", "b": "No tool called nope."}
    assert seen_by_user == ["llm_end", "user_guardrail", "tool_end:pending", "llm_end", "llm_end"]
    tool = agent.tools[0]
    assert [g.get_name() for g in tool.tool_input_guardrails] == ["user_check", "loopwarden"]
    assert [g.get_name() for g in tool.tool_output_guardrails] == ["loopwarden"]


async def test_handoff_targets_are_protected_with_their_own_config(events: Events) -> None:
    ran: list[str] = []
    worker_block = {"id": "worker", "tools": {"loopDetection": {"criticalThreshold": 4}}}
    config = {**SMALL, "agents": {"list": [worker_block]}}
    worker = Agent(name="worker", model=ScriptedModel(stuck(5)), tools=[poll_tool(ran)])
    triage_model = ScriptedModel([[function_call("transfer_to_worker", {}, call_id="h")]])
    triage = Agent(name="triage", model=triage_model, handoffs=[worker])
    guard = LoopGuardForAgents(config, on_event=events)
    guard.protect(triage)

    await Runner.run(triage, "hi", run_config=guard.run_config(tracing_disabled=True))

    assert len(ran) == 4  # the worker's own criticalThreshold blocked its 5th call
    assert events.actions() == ["warn", "block"]
    assert {e.agent_id for e in events.items} == {"worker"}


async def test_warnings_are_told_apart_from_rejections(events: Events) -> None:
    """The SDK's output guardrails can only allow, reject or raise, so a warning appended to
    an output is recorded as a ``reject_content``; its ``output_info`` says it is loopwarden's
    warning, with the detector and count, so monitoring can leave it out."""
    model = ScriptedModel(stuck(6))
    guard = LoopGuardForAgents(SMALL, on_event=events)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))

    result = await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))

    assert events.actions() == ["warn", "block"]
    rejected = [
        r.output
        for r in result.tool_output_guardrail_results
        if r.output.behavior["type"] == "reject_content"
    ]
    assert [r.output_info for r in rejected] == [
        {"loopwarden": "warn", "detector": "generic_repeat", "count": 3}
    ]
    assert rejected[0].behavior["message"].startswith("pending\n\n" + WARNING)
    blocks = [
        r.output.output_info
        for r in result.tool_input_guardrail_results
        if r.output.behavior["type"] == "reject_content"
    ]
    assert blocks == [{"loopwarden": "block", "detector": "generic_repeat", "count": 5}]


async def test_unknown_tools_count_whatever_the_formatter_says(events: Events) -> None:
    """The SDK tells loopwarden a name is unknown; a formatter's own wording changes nothing."""
    model = ScriptedModel(stuck(6, tool="no_such_tool", args={}))
    guard = LoopGuardForAgents(SMALL, on_event=events)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
    config = guard.run_config(
        tool_error_formatter=lambda args: "Sorry, that is not something I can do.",
        tracing_disabled=True,
    )
    await Runner.run(agent, "hi", run_config=config)
    seen = outputs(model)
    assert [seen[f"c{n}"] for n in range(3)] == ["Sorry, that is not something I can do."] * 3
    assert "there is no tool named 'no_such_tool'" in seen["c3"]
    assert events.actions() == ["block"] * 3


def test_a_ready_guard_is_the_first_argument() -> None:
    guard = lw.LoopGuard(SMALL)
    assert LoopGuardForAgents(config_or_guard=guard).guard is guard
    assert LoopGuardForAgents(guard).guard is guard


@pytest.fixture(name="clean_namespace")
def fixture_clean_namespace() -> Iterator[dict[str, Any]]:
    yield {"__name__": "docs_snippet"}


def test_docs_example_runs(clean_namespace: dict[str, Any], capsys: Any) -> None:
    code = snippet("openai-agents-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    exec(compile(code, "openai-agents-quickstart", "exec"), clean_namespace)
    # The example uses a real model name; an offline stuck model stands in for it.
    model = clean_namespace["agent"].model = ScriptedModel(stuck(35))
    try:
        answer = clean_namespace["ask"]("Is job 42 done?")
    finally:  # Runner.run_sync leaves its event loop open on purpose
        policy = asyncio.get_event_loop_policy()
        policy.get_event_loop().close()
        policy.set_event_loop(None)
    assert answer == "stopped by loopwarden: global_circuit_breaker"
    seen = outputs(model)
    assert seen["c10"].startswith("pending\n\nWARNING: poll_status has been called 10 times")
    assert seen["c20"].startswith(BLOCKED + ": poll_status was called 20 times")
    assert len(model.calls) == 31
