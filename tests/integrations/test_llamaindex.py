"""LlamaIndex integration, driven through real agent workflows with LlamaIndex's own
``MockFunctionCallingLLM`` as the scripted model.

The model function receives every message list the agent sends, so the tests check
what the model read. What every framework shares is in ``test_scenarios.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import re
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

import loopwarden as lw
from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex
from tests._snippets import snippet
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
    """The documented example, with a model that never stops polling: loopwarden ends it."""
    code = snippet("llamaindex-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    model = Model(polling())
    namespace: dict[str, Any] = {"llm": model.llm, "tools": [poller(counter)]}
    exec(compile(code, "llamaindex-quickstart", "exec"), namespace)
    answer = await namespace["ask"]("Is job 42 done?")
    match = re.fullmatch(r"stopped by loopwarden: (\w+)", answer)
    assert match is not None, answer
    assert len(counter.runs) < len(model.seen)  # blocked calls never ran
    last = [m for m in model.seen[-1] if m.role == "tool"][-1]
    assert str(last.content).startswith(BLOCKED)  # what the model read before the stop


async def test_stream_events_carry_what_the_model_read(counter: Counter) -> None:
    """``ToolCallResult`` events show the warning and the block, like the tool messages;
    a blocked call still gets its ``ToolCall`` event."""
    model = Model(polling())
    adapter = LoopGuardForLlamaIndex(SMALL)
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
    adapter = LoopGuardForLlamaIndex(SMALL, on_event=events)
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
    adapter = LoopGuardForLlamaIndex({"tools": {"loopDetection": {"enabled": True}}})
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
    adapter = LoopGuardForLlamaIndex(SMALL, on_event=events)
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

    adapter = LoopGuardForLlamaIndex(SMALL)
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
        SMALL, store=f"sqlite:///{tmp_path / 'lw.db'}", on_event=events
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
