"""OpenAI Agents SDK integration, driven offline: the SDK's own ``ScriptedModel``, and its
Chat Completions client against a scripted model on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    AgentHooks,
    OpenAIChatCompletionsModel,
    Runner,
    SQLiteSession,
    ToolOutputText,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from agents.testing import ScriptedModel, assistant_message, function_call
from openai import AsyncOpenAI
from openai.types.responses import ResponseCompactionItem
from pydantic import BaseModel

import loopwarden as lw
from loopwarden.integrations.openai_agents import (
    AgentsCircuitBreakerTripped,
    AgentsCompactionLoopPersisted,
    LoopGuardForAgents,
)
from loopwarden.stopping import StopReport, fallback_answer, final_answer_request, person_note
from tests._snippets import ROOT, snippet
from tests.integrations._chat_server import ChatServer, tool_messages
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
    """The quickstart of the docs runs as shown: a stuck agent ends with the model's last
    answer and the stop's summary, after the warnings and blocks the docs describe."""
    code = snippet("openai-agents-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    exec(compile(code, "openai-agents-quickstart", "exec"), clean_namespace)
    # The example uses a real model name; an offline stuck model stands in for it.
    steps = [*stuck(31)[:-1], [assistant_message(LAST)]]
    model = clean_namespace["agent"].model = ScriptedModel(steps)
    try:
        answer = clean_namespace["ask"]("Is job 42 done?")
    finally:  # Runner.run_sync leaves its event loop open on purpose
        policy = asyncio.get_event_loop_policy()
        policy.get_event_loop().close()
        policy.set_event_loop(None)
    message = (
        "CRITICAL: the loopwarden global circuit breaker stopped this run: poll_status "
        "returned identical no-progress outcomes 30 times in a row for identical arguments."
    )
    report = StopReport("global_circuit_breaker", "poll_status", 30, message, 31, 11)
    report = report.with_usage(turns=31, turn_limit=40, limit_name="max_turns")
    assert answer == f"{LAST}\n\n{report.summary()}"  # ScriptedModel reports no tokens
    seen = outputs(model)
    assert seen["c10"].startswith("pending\n\n" + WARNING + " 10 times")
    assert seen["c20"].startswith(BLOCKED + ": the job is still running")
    assert len(model.calls) == 32  # 31 turns, and the last answer


def docs_run(name: str, steps: list[Any]) -> tuple[dict[str, Any], ScriptedModel]:
    """Run a snippet of the docs page with an offline model and a fresh tool."""
    model = ScriptedModel(steps)
    namespace: dict[str, Any] = {
        "__name__": "docs_snippet",
        "Agent": Agent,
        "Runner": Runner,
        "LoopGuardForAgents": LoopGuardForAgents,
        "model": model,
        "poll_status": poll_tool([]),
    }
    try:
        exec(compile(snippet(name), name, "exec"), namespace)
    finally:  # Runner.run_sync leaves its event loop open on purpose
        policy = asyncio.get_event_loop_policy()
        policy.get_event_loop().close()
        policy.set_event_loop(None)
    return namespace, model


def test_docs_raise_example_runs(capsys: Any) -> None:
    """The raise snippet of the docs prints the stop's summary from the exception."""
    docs_run("openai-agents-raise", stuck(31)[:-1])
    printed = capsys.readouterr().out
    assert printed.startswith(
        "loopwarden stopped this run (rule global_circuit_breaker, tool poll_status, count 30)"
    )


def test_docs_ask_example_runs(capsys: Any) -> None:
    """The ask snippet of the docs asks the question the docs quote, continues with the
    person's note, and ends with the model's answer."""
    _, model = docs_run("openai-agents-ask", [*stuck(31)[:-1], [assistant_message(LAST)]])
    question, answer = capsys.readouterr().out.strip().split("\n")
    page = (ROOT / "docs" / "integrations-openai-agents.md").read_text("utf-8")
    assert f"> {question}\n" in page
    assert answer == LAST
    note = model.last_call.input[-1]  # type: ignore[union-attr]
    assert note["call_id"] == "c30" and note["output"] == person_note(
        "Job 42 is slow today; say so and stop."
    )


def test_docs_show_what_the_code_writes() -> None:
    """The last answer's instruction and the summary the docs quote are loopwarden's own
    text for a run stopped at the 31st of its calls (11 not run) within max_turns 40."""
    page = (ROOT / "docs" / "integrations-openai-agents.md").read_text("utf-8")
    message = (
        "CRITICAL: the loopwarden global circuit breaker stopped this run: poll_status "
        "returned identical no-progress outcomes 30 times in a row for identical arguments."
    )
    report = StopReport("global_circuit_breaker", "poll_status", 30, message, 31, 11)
    report = report.with_usage(tokens=6200, turns=31, turn_limit=40, limit_name="max_turns")
    assert f"> {final_answer_request(report)}\n" in page
    assert f"\n\n{report.summary()}\n```" in page


# -- onStop: what a stop does (docs/integrations-openai-agents.md) ---------------------
# These runs use the SDK's real Chat Completions client over HTTP, against a scripted
# model on loopback (tests/integrations/_chat_server.py) that keeps every request.

LAST = "I polled job 42 five times and it is still pending. Check the job by hand."


def looping(tool: str = "poll_status", last: Any = LAST) -> Callable[[dict[str, Any]], Any]:
    """A model that makes the same call every turn (call ids c0, c1 ...) while it is
    offered tools, and answers ``last`` when it is offered none."""

    def reply(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return last
        return [(tool, {"job": "42"}, f"c{len(tool_messages(body))}")]

    return reply


@contextlib.asynccontextmanager
async def chat_model(
    reply: Callable[[dict[str, Any]], Any],
) -> AsyncIterator[tuple[ChatServer, OpenAIChatCompletionsModel]]:
    """The SDK's Chat Completions model, its client pointed at a scripted server."""
    with ChatServer(reply) as server:
        client = AsyncOpenAI(base_url=server.url, api_key="test", max_retries=0)
        try:
            yield server, OpenAIChatCompletionsModel(model="scripted", openai_client=client)
        finally:
            await client.close()


async def run_once(agent: Agent[Any], guard: LoopGuardForAgents, mode: str = "async") -> Any:
    """One run of at most 30 turns (loopwarden told so), plain or streamed."""
    config = guard.run_config(tracing_disabled=True, max_turns=30)
    if mode == "async":
        return await Runner.run(agent, "Is job 42 done?", run_config=config, max_turns=30)
    result = Runner.run_streamed(agent, "Is job 42 done?", run_config=config, max_turns=30)
    async for _ in result.stream_events():
        pass
    return result


def last_request(server: ChatServer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The last request the model got, and its last message."""
    body = server.requests[-1]
    return body, body["messages"][-1]


@pytest.mark.parametrize("mode", ["async", "streamed"])
async def test_answer_ends_the_run_with_the_models_last_answer(mode: str, events: Events) -> None:
    """Unset on_stop (no approvals, no config): the stop ends the run with one more model
    call without tools, told why; its text plus the summary is the final output."""
    ran: list[str] = []
    async with chat_model(looping()) as (server, model):
        guard = LoopGuardForAgents(SMALL, on_event=events)
        agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))
        result = await run_once(agent, guard, mode)

    report = guard.stop_report(result)
    assert report is not None
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused, report.turns, report.turn_limit) == (8, 3, 8, 30)
    # Tokens as the client reported them (15 per answer; the stream reports none).
    assert report.tokens == (8 * 15 if mode == "async" else None)
    assert result.final_output == f"{LAST}\n\n{report.summary()}"
    assert "could have gone on for 22 more model turns" in report.summary()
    body, message = last_request(server)
    assert len(server.requests) == 9 and "tools" not in body
    assert message == {"role": "user", "content": final_answer_request(report)}
    assert tool_messages(body)["c7"].startswith("CRITICAL: the loopwarden global circuit breaker")
    assert len(ran) == 5
    assert events.actions() == ["warn", "block", "block", "stop"]
    # The stopping call's guardrail result says so; the answer is a final output from the
    # tool turn, not a message item.
    infos = [r.output.output_info for r in result.tool_input_guardrail_results]
    assert {"loopwarden": "stop", "detector": "global_circuit_breaker", "count": 7} in infos
    assert not any(item.type == "message_output_item" for item in result.new_items)


async def test_answer_after_calls_of_a_missing_tool() -> None:
    """A stop on a tool that does not exist, with no tool run in that turn: the agent's
    function tools are off for the SDK's next model call, which is told why and ends
    the run; the summary is appended to its text."""
    async with chat_model(looping("no_such_tool")) as (server, model):
        guard = LoopGuardForAgents(SMALL)
        agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
        result = await run_once(agent, guard)

    report = guard.stop_report(result)
    assert report is not None and (report.code, report.tool) == (
        "unknown_tool_repeat",
        "no_such_tool",
    )
    assert result.final_output == f"{LAST}\n\n{report.summary()}"
    body, message = last_request(server)
    assert len(server.requests) == 9 and "tools" not in body
    assert message["role"] == "tool" and final_answer_request(report) in message["content"]


async def test_a_missing_tool_still_called_without_tools_ends_with_the_stop() -> None:
    """After a stop on a missing tool, a model that calls a tool although it was offered
    none ends the run with the stop, at its next model call."""
    late = [("no_such_tool", {"job": "42"}, "late")]
    async with chat_model(looping("no_such_tool", last=late)) as (server, model):
        guard = LoopGuardForAgents(SMALL)
        agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
        with pytest.raises(AgentsCircuitBreakerTripped) as caught:
            await run_once(agent, guard)
    assert caught.value.code == "unknown_tool_repeat"
    assert len(server.requests) == 9 and "tools" not in server.requests[-1]


@pytest.mark.parametrize(
    "last",
    [(500, "the model service failed"), [("poll_status", {"job": "42"}, "late")], ""],
    ids=["fails", "asks-for-tools", "empty"],
)
async def test_answer_falls_back_to_the_summary(last: Any) -> None:
    """When the last model call fails, still asks for tools or says nothing, the final
    output is loopwarden's fallback text: no exception reaches the caller."""
    async with chat_model(looping(last=last)) as (server, model):
        guard = LoopGuardForAgents(SMALL)
        agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
        result = await run_once(agent, guard)

    report = guard.stop_report(result)
    assert report is not None
    assert result.final_output == fallback_answer(report)
    assert "tools" not in server.requests[-1] and len(server.requests) == 9


class JobReport(BaseModel):
    status: str
    advice: str


async def test_answer_with_a_structured_output_type() -> None:
    """A structured output type: the last answer is parsed into it, without the summary,
    and the report stays available from stop_report."""
    answer = '{"status": "pending", "advice": "check job 42 by hand"}'
    async with chat_model(looping(last=answer)) as (server, model):
        guard = LoopGuardForAgents(SMALL)
        agent = guard.protect(
            Agent(name="poller", model=model, tools=[poll_tool([])], output_type=JobReport)
        )
        result = await run_once(agent, guard)

    assert result.final_output == JobReport(status="pending", advice="check job 42 by hand")
    assert guard.stop_report(result) is not None
    assert server.requests[-1]["response_format"]["type"] == "json_schema"


async def test_a_stop_after_the_call_ran_ends_with_an_answer() -> None:
    """The post-compaction abort comes after a call ran (nothing to ask about): under
    ask too, the run ends with the model's last answer, asked without tools."""
    compaction = ResponseCompactionItem(id="cmp_9", type="compaction", encrypted_content="...")
    steps = stuck(6)
    steps[0] = [compaction, *steps[0]]
    steps[3] = [assistant_message("Job 42 is pending after three checks.")]
    model = ScriptedModel(steps[:4])
    guard = LoopGuardForAgents(SMALL, on_stop="ask")
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))

    result = await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))

    report = guard.stop_report(result)
    assert report is not None and report.code == "compaction_loop_persisted"
    assert result.final_output == f"Job 42 is pending after three checks.\n\n{report.summary()}"
    assert result.interruptions == []
    last = model.last_call
    assert last is not None and last.tools == [] and last.handoffs == []
    assert last.input[-1] == {"role": "user", "content": final_answer_request(report)}


async def test_raise_keeps_the_exception_with_its_report() -> None:
    """on_stop="raise": the run ends with AgentsCircuitBreakerTripped, carrying the report;
    the model is not asked again."""
    async with chat_model(looping()) as (server, model):
        guard = LoopGuardForAgents(SMALL, on_stop="raise")
        agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
        with pytest.raises(AgentsCircuitBreakerTripped) as caught:
            await run_once(agent, guard)
    assert caught.value.report is not None and caught.value.report.refused == 3
    assert len(server.requests) == 8


def test_the_config_chooses_when_the_argument_is_unset() -> None:
    """loopwarden.onStop in the config applies when on_stop is not given; the argument
    wins over it; a wrong value is a clear error."""
    config = {**SMALL, "loopwarden": {"onStop": "raise"}}
    model = ScriptedModel(stuck(12))
    guard = LoopGuardForAgents(config)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool([])]))
    with pytest.raises(AgentsCircuitBreakerTripped):
        run_sync(agent, "hi", run_config=guard.run_config(tracing_disabled=True), max_turns=30)
    assert isinstance(LoopGuardForAgents(config, on_stop="answer").protect(Agent(name="a")), Agent)
    assert LoopGuardForAgents(config, on_stop="answer").protect(Agent(name="a")).hooks.on_stop == (
        "answer"
    )
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardForAgents(SMALL, on_stop="later")  # type: ignore[arg-type]


async def ask_run(
    reply: Callable[[dict[str, Any]], Any], ran: list[str], **guard_kwargs: Any
) -> tuple[Any, LoopGuardForAgents, Agent[Any], ChatServer, Any]:
    """A run that loopwarden stops, with a person to ask; returns what resuming needs."""
    stack = contextlib.AsyncExitStack()
    server, model = await stack.enter_async_context(chat_model(reply))
    guard = LoopGuardForAgents(SMALL, **guard_kwargs)
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_tool(ran)]))
    result = await run_once(agent, guard)
    return result, guard, agent, server, stack


@pytest.mark.parametrize("how", ["helper", "sdk"])
@pytest.mark.parametrize("choice", ["allow_once", "stop", "continue"])
async def test_ask_puts_the_stop_to_the_person_as_a_tool_approval(choice: str, how: str) -> None:
    """on_stop="ask": the refused call is an approval interruption with loopwarden's
    question; resumed with the answer (loopwarden's helper, or the SDK's own approve /
    reject), allow once runs the call once, stop ends with a last answer, continue gives
    the model the note and the run goes on."""
    ran: list[str] = []
    calls = 0

    def reply(body: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        if not body.get("tools") or calls > 8:  # after the person's answer: done
            return LAST
        return [("poll_status", {"job": "42"}, f"c{len(tool_messages(body))}")]

    result, guard, agent, server, stack = await ask_run(reply, ran, on_stop="ask")
    async with stack:
        assert result.final_output is None and len(server.requests) == 8 and len(ran) == 5
        [item] = result.interruptions
        assert item.raw_item.call_id == "c7" and item.tool_name == "poll_status"
        question = guard.question(item)
        assert question is not None and question.startswith(
            "loopwarden stopped this run (rule global_circuit_breaker): "
        )
        state = result.to_state()
        note = "Job 42 is slow today; report that and stop."
        if how == "helper":
            guard.answer(state, item, choice, note=note)
        elif choice == "allow_once":
            state.approve(item)
        elif choice == "stop":
            state.reject(item)
        else:
            state.reject(item, rejection_message=note)
        config = guard.run_config(tracing_disabled=True, max_turns=30)
        resumed = await Runner.run(agent, state, run_config=config, max_turns=30)

    body, _ = last_request(server)
    answered = tool_messages(server.requests[8])["c7"]
    if choice == "allow_once":  # the call ran once, its result reached the model
        assert len(ran) == 6 and answered == "pending"
        assert resumed.final_output == LAST and guard.stop_report(resumed) is None
    elif choice == "continue":  # the model read the note, the run went on with tools
        assert len(ran) == 5 and "tools" in server.requests[8]
        assert answered == (person_note(note) if how == "helper" else note)
        assert resumed.final_output == LAST and guard.stop_report(resumed) is None
    else:  # the run ended as under answer: one last call without tools
        report = guard.stop_report(resumed)
        assert report is not None and len(ran) == 5 and "tools" not in body
        assert resumed.final_output == f"{LAST}\n\n{report.summary()}"
        assert answered.startswith("CRITICAL: the loopwarden global circuit breaker")
    assert resumed.interruptions == []


async def test_allow_once_asks_again_at_the_next_repeat() -> None:
    """After "allow once" the refused call runs, and the very next repeat is put to the
    person again (the rules kept their counts)."""
    ran: list[str] = []
    result, guard, agent, _, stack = await ask_run(looping(), ran, on_stop="ask")
    async with stack:
        state = result.to_state()
        guard.answer(state, result.interruptions[0], "allow_once")
        config = guard.run_config(tracing_disabled=True, max_turns=30)
        again = await Runner.run(agent, state, run_config=config, max_turns=30)
    assert [item.raw_item.call_id for item in again.interruptions] == ["c8"]
    assert len(ran) == 6


async def test_ask_is_the_default_where_the_agents_already_need_approvals() -> None:
    """Unset on_stop, and an agent with a tool that needs approval (its caller answers
    interruptions): a stop is put to the person; without such a tool it is answered."""

    @function_tool(needs_approval=True)
    def cancel_job(job: str) -> str:
        """Cancel a background job."""
        return "cancelled"

    ran: list[str] = []
    async with chat_model(looping()) as (_, model):
        guard = LoopGuardForAgents(SMALL)
        tools = [poll_tool(ran), cancel_job]
        agent = guard.protect(Agent(name="poller", model=model, tools=tools))
        result = await run_once(agent, guard)
    [item] = result.interruptions
    assert guard.question(item) is not None and result.final_output is None


async def test_answer_rejects_what_it_does_not_know() -> None:
    """The helper refuses an unknown choice, and an interruption that is not loopwarden's."""

    @function_tool(needs_approval=True)
    def cancel_job(job: str) -> str:
        """Cancel a background job."""
        return "cancelled"

    model = ScriptedModel([[function_call("cancel_job", {"job": "42"}, call_id="x")]])
    guard = LoopGuardForAgents(SMALL)
    agent = guard.protect(Agent(name="poller", model=model, tools=[cancel_job]))
    result = await Runner.run(agent, "hi", run_config=guard.run_config(tracing_disabled=True))
    [item] = result.interruptions
    assert guard.question(item) is None
    with pytest.raises(ValueError, match="not a question loopwarden asked"):
        guard.answer(result.to_state(), item, "stop")
    with pytest.raises(ValueError, match="allow_once, stop or continue"):
        guard.answer(result.to_state(), item, "perhaps")


async def test_ask_then_continue_with_a_sqlite_store(tmp_path: Path) -> None:
    """With a store that does I/O (the guard's async methods), the person's "continue"
    lifts the stop in the stored state and the run goes on."""
    ran: list[str] = []
    store = f"sqlite:///{tmp_path / 'lw.db'}"
    result, guard, agent, server, stack = await ask_run(looping(), ran, on_stop="ask", store=store)
    async with stack:
        state = result.to_state()
        guard.answer(state, result.interruptions[0], "continue", note="stop polling")
        config = guard.run_config(tracing_disabled=True, max_turns=30)
        resumed = await Runner.run(agent, state, run_config=config, max_turns=30)
    guard.guard.close()
    assert tool_messages(server.requests[8])["c7"] == person_note("stop polling")
    # Counted afresh: the same loop is put to the person again after the full thresholds.
    assert [item.raw_item.call_id for item in resumed.interruptions] == ["c15"]
    assert len(ran) == 5 + 5
