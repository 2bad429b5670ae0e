"""LlamaIndex integration, driven through real agent workflows with LlamaIndex's own
``MockFunctionCallingLLM`` as the scripted model.

The model function receives every message list the agent sends, so the tests check
what the model read. What every framework shares is in ``test_scenarios.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import (
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from workflows import Context
from workflows.events import HumanResponseEvent, InputRequiredEvent

import loopwarden as lw
from loopwarden import stopping
from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex
from loopwarden.stopping import StopReport
from tests._snippets import snippet
from tests.integrations._onstop import FINAL, UNDERSTOOD, report_of
from tests.integrations._shared import BLOCKED, REPEATED, SMALL, WARNING, Counter, Events

Step = Callable[[int], "list[tuple[str, dict[str, Any], str]] | str"]


class Model:
    """A scripted LLM: ``step(turn)`` is the turn's tool calls, or its closing text."""

    def __init__(self, step: Step) -> None:
        self.seen: list[list[ChatMessage]] = []
        turns = itertools.count()

        def reply(messages: Any, **kwargs: Any) -> ChatMessage:
            self.seen.append(list(messages))
            answer = step(next(turns))
            if isinstance(answer, str):
                return ChatMessage(role="assistant", content=answer)
            blocks = [
                ToolCallBlock(tool_call_id=i, tool_name=n, tool_kwargs=a) for n, a, i in answer
            ]
            return ChatMessage(role="assistant", blocks=blocks)

        self.llm = MockFunctionCallingLLM(response_generator=reply)

    def answers(self) -> dict[str, str]:
        """Call id -> the tool message the model read for it."""
        return {
            m.additional_kwargs["tool_call_id"]: str(m.content)
            for messages in self.seen
            for m in messages
            if m.role == "tool" and m.additional_kwargs.get("tool_call_id")
        }


def polling(turns: int | None = None, name: str = "poll_status") -> Step:
    def step(turn: int) -> list[tuple[str, dict[str, Any], str]] | str:
        if turns is not None and turn >= turns:
            return "done"
        return [(name, {"job": "42"}, f"c{turn}")]

    return step


def poller(counter: Counter, result: Any = "pending") -> Callable[..., Any]:
    async def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        if isinstance(result, Exception):
            raise result
        return str(result)

    return poll_status


async def settled(adapter: LoopGuardForLlamaIndex) -> None:
    """Let the adapter's run watchers see the end of the runs (no wall-clock wait)."""
    for _ in range(100):
        if not adapter._runs:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"runs still held: {list(adapter._runs)}")


async def test_docs_example_runs(counter: Counter) -> None:
    """The documented example, with a model that polls until it is offered no tools: the
    stop's report is printed and the model's last answer returned."""
    code = snippet("llamaindex-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    model = StopModel()
    namespace: dict[str, Any] = {"llm": model.llm, "tools": [poller(counter)]}
    exec(compile(code, "llamaindex-quickstart", "exec"), namespace)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        answer = await namespace["ask"]("Is job 42 done?")
    assert printed.getvalue() == "stopped: global_circuit_breaker poll_status 30\n"
    assert answer.startswith(FINAL + "\n\nloopwarden stopped this run (rule global_circuit_")
    assert "before its max_iterations of 40." in answer
    assert len(counter.runs) < len(model.requests)  # blocked calls never ran
    last = [m for m in model.requests[-2][0] if m.role == "tool"][-1]
    assert str(last.content).startswith(BLOCKED)  # what the model read before the stop


async def test_stream_events_carry_what_the_model_read(counter: Counter) -> None:
    """``ToolCallResult`` events show the warning and the block, like the tool messages;
    a blocked call still gets its ``ToolCall`` event."""
    model = Model(polling())
    adapter = LoopGuardForLlamaIndex(SMALL, on_stop="raise")
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    handler = agent.run(user_msg="Is job 42 done?", max_iterations=50)
    calls: list[str] = []
    results: dict[str, str] = {}
    with pytest.raises(lw.CircuitBreakerTripped):
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):
                results[event.tool_id] = event.tool_output.content
                assert event.tool_output.is_error == event.tool_output.content.startswith(BLOCKED)
            elif isinstance(event, ToolCall):
                calls.append(event.tool_id)
        await handler
    assert results == model.answers()
    assert results["c3"].startswith("pending\n\n" + WARNING + " 3 times")
    assert results["c5"].startswith(BLOCKED) and results["c6"].startswith(BLOCKED)
    assert calls == [f"c{n}" for n in range(7)]  # the stopped call c7 ends the run unseen
    assert len(counter.runs) == 5
    await settled(adapter)
    assert len(adapter.guard.store) == 0  # the stopped run's state was dropped


async def test_failing_tool_is_warned_then_blocked(counter: Counter, events: Events) -> None:
    """LlamaIndex turns a tool's exception into an error output; the same failure again and
    again is warned about, then blocked (not run)."""
    model = Model(polling())
    adapter = LoopGuardForLlamaIndex(SMALL, on_event=events, on_stop="raise")
    tool = poller(counter, result=ConnectionError("connection refused"))
    agent = adapter.protect(FunctionAgent(name="poller", tools=[tool], llm=model.llm))
    with pytest.raises(lw.CircuitBreakerTripped):
        await agent.run(user_msg="Is job 42 done?", max_iterations=50)
    got = model.answers()
    assert got["c0"] == "connection refused"
    assert got["c3"].startswith("connection refused\n\n" + REPEATED)
    assert got["c5"].startswith(BLOCKED)
    assert len(counter.runs) == 5
    assert events.actions() == ["warn", "block", "block", "stop"]


async def test_the_same_unknown_call_is_caught_by_consecutive_repeat(counter: Counter) -> None:
    """The docs page: with the default thresholds, the same call of a missing tool is warned
    at the 5th, blocked at the 6th and 7th, and stopped at the 8th as unknown_tool_repeat."""
    model = Model(polling(name="no_such_tool"))
    adapter = LoopGuardForLlamaIndex(
        {"tools": {"loopDetection": {"enabled": True}}}, on_stop="raise"
    )
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    with pytest.raises(lw.CircuitBreakerTripped) as stopped:
        await agent.run(user_msg="Is job 42 done?", max_iterations=50)
    assert (stopped.value.code, stopped.value.tool_name, stopped.value.count) == (
        "unknown_tool_repeat",
        "no_such_tool",
        8,
    )
    got = model.answers()
    assert len(got) == 7 and counter.runs == []
    missing = "Tool no_such_tool not found."
    assert all(got[f"c{n}"].startswith(missing) for n in range(5))
    assert [
        n + 1
        for n in range(7)
        if "WARNING: the tool 'no_such_tool' is not available" in got[f"c{n}"]
    ] == [5]
    assert [n + 1 for n in range(7) if got[f"c{n}"].startswith(BLOCKED)] == [6, 7]


# A second run on a Context serialises its state; LlamaIndex warns about its own memory.
@pytest.mark.filterwarnings("ignore:Skipping serialization of known unserializable key")
async def test_each_run_starts_afresh_also_on_one_context(counter: Counter, events: Events) -> None:
    """Two runs on one ``Context`` (one conversation) have their own counts, and each run's
    state is dropped when it ends."""
    model = Model(
        lambda turn: "done" if turn in (4, 9) else [("poll_status", {"job": "42"}, f"c{turn}")]
    )
    adapter = LoopGuardForLlamaIndex(SMALL, on_event=events)
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    ctx = Context(agent)
    first = agent.run(user_msg="first", ctx=ctx, max_iterations=50)
    await first
    second = agent.run(user_msg="second", ctx=ctx, max_iterations=50)
    await second
    assert events.actions() == ["warn", "warn"]  # the 4th call of each run
    assert [e.run_id for e in events.items] == [first.run_id, second.run_id]
    await settled(adapter)
    assert len(adapter.guard.store) == 0


async def test_agent_workflow_guards_each_agent_after_a_handoff(
    counter: Counter, events: Events
) -> None:
    """In an ``AgentWorkflow`` the handoff is a registered tool, and the agent handed to
    has its own history and agent id."""
    triage = Model(
        lambda turn: (
            [("handoff", {"to_agent": "poller", "reason": "it polls"}, "h0")]
            if turn == 0
            else "done"
        )
    )
    polls = Model(polling())
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="triage",
                description="Routes questions.",
                llm=triage.llm,
                tools=[poller(counter)],
                can_handoff_to=["poller"],
            ),
            FunctionAgent(
                name="poller", description="Polls jobs.", llm=polls.llm, tools=[poller(counter)]
            ),
        ],
        root_agent="triage",
    )
    adapter = LoopGuardForLlamaIndex(SMALL, on_event=events, on_stop="raise")
    adapter.protect(workflow)
    with pytest.raises(lw.CircuitBreakerTripped) as stop:
        await workflow.run(user_msg="Is job 42 done?", max_iterations=50)
    assert (stop.value.tool_name, stop.value.count) == ("poll_status", 7)
    assert {(e.agent_id, e.action) for e in events.items} == {
        ("poller", "warn"),
        ("poller", "block"),
        ("poller", "stop"),
    }
    assert len(counter.runs) == 5


# ReActAgent reads ctx.is_running inside its own step, which LlamaIndex deprecates.
@pytest.mark.filterwarnings("ignore:is_running called from within a step")
async def test_react_agent_is_guarded_alike(counter: Counter) -> None:
    """A ``ReActAgent`` (tool calls parsed from the model's text, ids made by LlamaIndex)
    goes through the same step."""
    turns = itertools.count()
    seen: list[list[ChatMessage]] = []

    def reply(messages: Any, **kwargs: Any) -> ChatMessage:
        seen.append(list(messages))
        next(turns)
        text = 'Thought: I need to check.\nAction: poll_status\nAction Input: {"job": "42"}'
        return ChatMessage(role="assistant", content=text)

    adapter = LoopGuardForLlamaIndex(SMALL, on_stop="raise")
    agent = adapter.protect(
        ReActAgent(
            name="poller",
            tools=[poller(counter)],
            llm=MockFunctionCallingLLM(response_generator=reply),
        )
    )
    with pytest.raises(lw.CircuitBreakerTripped) as stop:
        await agent.run(user_msg="Is job 42 done?", max_iterations=50)
    assert stop.value.count == 7 and len(counter.runs) == 5
    observations = [str(m.content) for m in seen[-1] if "Observation:" in str(m.content)]
    assert any(BLOCKED in text for text in observations)
    assert any(WARNING in text for text in observations)


async def test_a_tool_that_takes_the_context_still_gets_it(counter: Counter) -> None:
    """Tools with a ``Context`` parameter run through loopwarden unchanged."""

    async def remember(ctx: Context, job: str) -> str:
        """Remember a job."""
        await ctx.store.set("job", job)
        counter.hit(job)
        return "noted"

    # LlamaIndex finds the Context parameter by its annotation's type, not a string.
    remember.__annotations__ = {"ctx": Context, "job": str, "return": str}
    model = Model(polling(turns=2, name="remember"))
    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = adapter.protect(FunctionAgent(name="poller", tools=[remember], llm=model.llm))
    ctx = Context(agent)
    await agent.run(user_msg="go", ctx=ctx, max_iterations=50)
    assert await ctx.store.get("job") == "42"
    assert model.answers() == {"c0": "noted", "c1": "noted"}


async def test_with_a_sqlite_store(counter: Counter, tmp_path: Path, events: Events) -> None:
    """A store that does I/O: the guard's async methods are used, with the same results."""
    model = Model(polling())
    adapter = LoopGuardForLlamaIndex(
        SMALL, store=f"sqlite:///{tmp_path / 'lw.db'}", on_event=events, on_stop="raise"
    )
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    try:
        with pytest.raises(lw.CircuitBreakerTripped):
            await agent.run(user_msg="Is job 42 done?", max_iterations=50)
    finally:
        adapter.guard.close()
    assert len(counter.runs) == 5
    assert events.actions() == ["warn", "block", "block", "stop"]


def test_protect_is_idempotent_and_refuses_what_it_cannot_guard(counter: Counter) -> None:
    """Protecting twice changes nothing; another guard or a non-agent is refused."""
    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = FunctionAgent(name="poller", tools=[poller(counter)], llm=Model(polling()).llm)
    assert adapter.protect(adapter.protect(agent)) is agent
    with pytest.raises(ValueError, match="already protected"):
        LoopGuardForLlamaIndex(SMALL).protect(agent)
    with pytest.raises(TypeError, match="AgentWorkflow"):
        adapter.protect(object())  # type: ignore[arg-type]


async def test_protecting_twice_gives_one_note(counter: Counter) -> None:
    """One warning per due call, however often ``protect`` was called."""
    model = Model(polling(turns=4))
    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm)
    adapter.protect(adapter.protect(agent))
    with contextlib.redirect_stdout(io.StringIO()):
        await agent.run(user_msg="go", max_iterations=50)
    assert model.answers()["c3"].count(WARNING) == 1


# -- when loopwarden stops the run (onStop) ----------------------------------------------------
# LlamaIndex's OpenAI client (llama-index-llms-openai) pins openai<3, which the other extras'
# pins exclude: these tests drive the agents with LlamaIndex's offline MockFunctionCallingLLM,
# which is handed what the agent would send (the messages, and the tools it offers).


class StopModel:
    """A scripted function-calling model: polls job 42 while it is offered tools, writes
    FINAL when it is offered none, and UNDERSTOOD when a person's note answered its call;
    ``answer_at``: the turn at which it answers on its own."""

    def __init__(self, *, obeys: bool = True, answer_at: int | None = None) -> None:
        self.requests: list[tuple[list[ChatMessage], list[Any]]] = []

        def reply(messages: Any, **kwargs: Any) -> ChatMessage:
            tools = list(kwargs.get("tools") or [])
            turn = len(self.requests)
            self.requests.append((list(messages), tools))
            last = messages[-1]
            if not tools and obeys:
                return ChatMessage(role="assistant", content=FINAL)
            if last.role == "tool" and "decided the run should go on" in str(last.content):
                return ChatMessage(role="assistant", content=UNDERSTOOD)
            if turn == answer_at:
                return ChatMessage(role="assistant", content="Job 42 is still pending.")
            call = ToolCallBlock(
                tool_call_id=f"c{turn}", tool_name="poll_status", tool_kwargs={"job": "42"}
            )
            return ChatMessage(role="assistant", blocks=[call])

        self.llm = MockFunctionCallingLLM(response_generator=reply)

    def tool_messages(self) -> dict[str, str]:
        """Call id -> the tool message the model read for it (in its latest request)."""
        return {
            m.additional_kwargs["tool_call_id"]: str(m.content)
            for m in self.requests[-1][0]
            if m.role == "tool" and m.additional_kwargs.get("tool_call_id")
        }


def stopped_report(output: Any) -> StopReport:
    """The report a last answer's ``AgentOutput`` holds, checked to be loopwarden's."""
    found = output["loopwarden"]
    report = dataclasses.replace(report_of(found), limit_name="max_iterations")
    assert found["summary"] == report.summary()
    return report


async def test_answer_is_the_default_and_the_last_call_has_no_tools(counter: Counter) -> None:
    """By default a stop ends the run with one more model call, offered no tools and told
    why; its text plus the summary is the run's output, which holds the report."""
    model = StopModel()
    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    handler = agent.run(user_msg="Is job 42 done?", max_iterations=20)
    output = await handler
    report = stopped_report(output)
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused, report.turns, report.turn_limit) == (8, 3, 8, 20)
    assert report.limit_name == "max_iterations" and report.saved_turns == 12
    assert str(output) == f"{FINAL}\n\n{report.summary()}"
    assert "before its max_iterations of 20" in report.summary()
    assert len(model.requests) == 9 and len(counter.runs) == 5
    messages, tools = model.requests[-1]
    assert tools == []  # the last call offers no tools at all
    assert messages[-1].role == "user"
    assert messages[-1].content == stopping.final_answer_request(report)
    assert model.tool_messages()["c7"] == report.message  # the stopped call's answer
    # The agent's memory keeps the model's own answer, not the instruction.
    history = await handler.ctx.store.get("memory")
    texts = [str(m.content) for m in await history.aget_all()]
    assert texts[-1] == FINAL and stopping.final_answer_request(report) not in texts
    await settled(adapter)
    assert len(adapter.guard.store) == 0


async def test_answer_falls_back_when_the_model_still_calls_tools(counter: Counter) -> None:
    """A model that asks for a tool in its last call gets no tool: the run's output is the
    fallback answer, never an exception."""
    model = StopModel(obeys=False)
    adapter = LoopGuardForLlamaIndex(SMALL, on_stop="answer")
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    output = await agent.run(user_msg="Is job 42 done?", max_iterations=20)
    report = stopped_report(output)
    assert str(output) == stopping.fallback_answer(report)
    assert not output.response.blocks[1:] and model.requests[-1][1] == []
    assert len(counter.runs) == 5


async def test_answer_at_the_iteration_limit_is_still_the_answer(counter: Counter) -> None:
    """A stop in the turn before ``max_iterations`` runs out still ends with the last
    answer: that step does not trip LlamaIndex's own limit."""
    model = StopModel()
    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm))
    output = await agent.run(user_msg="Is job 42 done?", max_iterations=9)
    report = stopped_report(output)
    assert (report.turns, report.turn_limit, report.saved_turns) == (8, 9, 1)
    assert str(output) == f"{FINAL}\n\n{report.summary()}"


async def test_raise_comes_from_the_config(counter: Counter) -> None:
    """``loopwarden.onStop: raise`` in the config raises, when no argument says otherwise."""
    config = {**SMALL, "loopwarden": {"onStop": "raise"}}
    model = StopModel()
    agent = LoopGuardForLlamaIndex(config).protect(
        FunctionAgent(name="poller", tools=[poller(counter)], llm=model.llm)
    )
    with pytest.raises(lw.CircuitBreakerTripped):
        await agent.run(user_msg="Is job 42 done?", max_iterations=20)
    assert all(tools for _, tools in model.requests)  # no last call without tools


# ReActAgent reads ctx.is_running inside its own step, which LlamaIndex deprecates.
@pytest.mark.filterwarnings("ignore:is_running called from within a step")
async def test_react_agent_answers_without_tools(counter: Counter) -> None:
    """A ``ReActAgent``'s last step has no tools in its prompt and the instruction as the
    last message; its answer is the run's output."""
    requests: list[list[ChatMessage]] = []

    def reply(messages: Any, **kwargs: Any) -> ChatMessage:
        requests.append(list(messages))
        if "No tools are available any more" in str(messages[-1].content):
            return ChatMessage(role="assistant", content=f"Thought: I must stop.\nAnswer: {FINAL}")
        text = 'Thought: I need to check.\nAction: poll_status\nAction Input: {"job": "42"}'
        return ChatMessage(role="assistant", content=text)

    adapter = LoopGuardForLlamaIndex(SMALL)
    agent = adapter.protect(
        ReActAgent(
            name="poller",
            tools=[poller(counter)],
            llm=MockFunctionCallingLLM(response_generator=reply),
        )
    )
    output = await agent.run(user_msg="Is job 42 done?", max_iterations=20)
    report = stopped_report(output)
    assert str(output) == f"{FINAL}\n\n{report.summary()}"
    last = requests[-1]
    assert "poll_status" not in str(last[0].content)  # the prompt describes no tools
    assert str(last[-1].content) == "Observation: " + stopping.final_answer_request(report)
    assert len(counter.runs) == 5


async def test_agent_workflow_answers_from_the_stopped_agent(counter: Counter) -> None:
    """In an ``AgentWorkflow`` the agent whose call was stopped writes the last answer,
    without tools (no handoff either)."""
    triage = Model(lambda turn: [("handoff", {"to_agent": "poller", "reason": "it polls"}, "h0")])
    polls = StopModel()
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="triage",
                description="Routes questions.",
                llm=triage.llm,
                tools=[poller(counter)],
                can_handoff_to=["poller"],
            ),
            FunctionAgent(
                name="poller", description="Polls jobs.", llm=polls.llm, tools=[poller(counter)]
            ),
        ],
        root_agent="triage",
    )
    LoopGuardForLlamaIndex(SMALL).protect(workflow)
    output = await workflow.run(user_msg="Is job 42 done?", max_iterations=50)
    report = stopped_report(output)
    assert output.current_agent_name == "poller"
    assert str(output) == f"{FINAL}\n\n{report.summary()}"
    assert polls.requests[-1][1] == [] and len(triage.seen) == 1


async def ask_run(counter: Counter, choice: str, **model: Any) -> tuple[Any, StopModel, list[Any]]:
    """A run with ``on_stop="ask"`` whose question is answered with ``choice`` (a
    ``HumanResponseEvent``): its output, its model and the questions it streamed."""
    scripted = StopModel(**model)
    adapter = LoopGuardForLlamaIndex(SMALL, on_stop="ask")
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=scripted.llm))
    handler = agent.run(user_msg="Is job 42 done?", max_iterations=20)
    questions: list[Any] = []
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent) and event.get("loopwarden"):
            questions.append(event)
            handler.ctx.send_event(HumanResponseEvent(response=choice))
    output = await handler
    await settled(adapter)
    assert len(adapter.guard.store) == 0
    return output, scripted, questions


async def test_ask_puts_the_question_in_the_workflows_own_flow(counter: Counter) -> None:
    """``ask``: the stopped call waits on an ``InputRequiredEvent`` holding the question, the
    three choices and the report; "stop" ends the run as ``answer`` does."""
    output, model, questions = await ask_run(counter, "stop")
    [question] = questions
    report = stopped_report(output)
    assert question.question == stopping.ask_question(report)
    assert question.options == stopping.ask_options()
    assert question.prefix.startswith(stopping.ask_question(report))
    assert (question.tool, question.call_id) == ("poll_status", "c7")
    assert question.report["code"] == "global_circuit_breaker"
    assert str(output) == f"{FINAL}\n\n{report.summary()}"
    assert model.requests[-1][1] == [] and len(counter.runs) == 5


async def test_ask_allow_once_runs_the_call_once(counter: Counter) -> None:
    """ "allow once": the refused call runs once, and its result reaches the model."""
    output, model, questions = await ask_run(counter, "allow once", answer_at=8)
    assert len(questions) == 1
    assert len(counter.runs) == 6  # 5 before the stop, and the allowed one
    assert model.tool_messages()["c7"].startswith("pending")
    assert str(output) == "Job 42 is still pending." and output.get("loopwarden") is None


async def test_ask_continue_gives_the_model_the_note(counter: Counter) -> None:
    """ "continue" with a note: the model reads the note instead of the call's result, and
    the run goes on with tools."""
    output, model, questions = await ask_run(counter, "continue: check job 43 instead")
    assert len(questions) == 1 and len(counter.runs) == 5
    note = model.tool_messages()["c7"]
    assert "decided the run should go on" in note and "check job 43 instead" in note
    assert model.requests[-1][1] != []  # the model still has its tools
    assert str(output) == UNDERSTOOD and output.get("loopwarden") is None


async def test_ask_again_after_an_answer_it_does_not_understand(counter: Counter) -> None:
    """An answer that is none of the three is asked again, saying what was wrong."""
    scripted = StopModel()
    adapter = LoopGuardForLlamaIndex(SMALL, on_stop="ask")
    agent = adapter.protect(FunctionAgent(name="poller", tools=[poller(counter)], llm=scripted.llm))
    handler = agent.run(user_msg="Is job 42 done?", max_iterations=20)
    answers = iter(["maybe", "stop"])
    questions: list[Any] = []
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent) and event.get("loopwarden"):
            questions.append(event)
            handler.ctx.send_event(HumanResponseEvent(response=next(answers)))
    output = await handler
    assert len(questions) == 2
    assert questions[1].error == "loopwarden did not understand the answer 'maybe'."
    assert questions[1].prefix.startswith(questions[1].error)
    assert str(output).startswith(FINAL)


async def test_docs_ask_example_runs(counter: Counter) -> None:
    """The documented ``ask`` loop: the person is shown the question, and their note lets
    the run go on to the model's own answer."""
    model = StopModel()
    shown: list[str] = []

    async def ask_the_person(prompt: str) -> str:
        shown.append(prompt)
        return "continue: check job 43 instead"

    namespace: dict[str, Any] = {
        "LoopGuardForLlamaIndex": LoopGuardForLlamaIndex,
        "FunctionAgent": FunctionAgent,
        "config": SMALL,
        "tools": [poller(counter)],
        "llm": model.llm,
        "ask_the_person": ask_the_person,
    }
    exec(compile(snippet("llamaindex-ask"), "llamaindex-ask", "exec"), namespace)
    assert await namespace["run"]("Is job 42 done?") == UNDERSTOOD
    [prompt] = shown
    assert prompt.startswith("loopwarden stopped this run (rule global_circuit_breaker)")
    assert prompt.endswith("continue: <a note for the agent> (let it continue, with your note).")
    assert "check job 43 instead" in model.tool_messages()["c7"]
    await settled(namespace["guard"])
