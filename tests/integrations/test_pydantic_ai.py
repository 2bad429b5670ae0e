"""Pydantic AI capability, driven through real agents with a scripted ``FunctionModel``.

The model function receives the whole history each turn, so the tests check
what the model reads, not only what loopwarden decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import loopwarden as lw
from loopwarden.integrations.pydantic_ai import LoopGuardCapability
from tests._snippets import snippet
from tests.integrations._shared import BLOCKED, SMALL, Counter

Script = Callable[[list[ModelMessage]], ModelResponse]
MODES = ["sync", "async"]


class ScriptedModel(FunctionModel):
    """A FunctionModel that keeps every history it was sent."""

    def __init__(self, script: Script) -> None:
        self.seen: list[list[ModelMessage]] = []

        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.seen.append(list(messages))
            return script(messages)

        super().__init__(reply)

    def answers(self) -> list[list[Any]]:
        """The parts of the newest request the model read each turn after the first."""
        return [list(seen[-1].parts) for seen in self.seen[1:]]


def tool_calls(*specs: tuple[str, dict[str, Any]]) -> Callable[[], ModelResponse]:
    ids = itertools.count(1)

    def reply() -> ModelResponse:
        return ModelResponse(
            parts=[ToolCallPart(n, a, tool_call_id=f"call_{next(ids)}") for n, a in specs]
        )

    return reply


def forever(*specs: tuple[str, dict[str, Any]]) -> Script:
    reply = tool_calls(*specs)
    return lambda messages: reply()


def turns(count: int, *specs: tuple[str, dict[str, Any]]) -> Script:
    """Call the tools for ``count`` turns, then answer."""
    reply = tool_calls(*specs)
    left = itertools.count(count, -1)
    return lambda messages: reply() if next(left) > 0 else ModelResponse(parts=[TextPart("done")])


def four_calls(messages: list[ModelMessage]) -> ModelResponse:
    """Four identical calls per user prompt, then an answer."""
    start = max(
        i
        for i, m in enumerate(messages)
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)
    )
    done = sum(
        isinstance(p, ToolReturnPart)
        for m in messages[start:]
        if isinstance(m, ModelRequest)
        for p in m.parts
    )
    if done == 4:
        return ModelResponse(parts=[TextPart("still pending")])
    return ModelResponse(
        parts=[ToolCallPart("poll_status", {"job": "42"}, tool_call_id=f"c{done}")]
    )


def close_sync_loop() -> None:
    """``run_sync`` leaves the event loop it made open and set on its thread; close it.

    Otherwise the loop is collected later, in some other test, as an unclosed resource.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture(autouse=True)
def _no_open_loops() -> Iterator[None]:
    yield
    close_sync_loop()


def make_agent(
    llm: FunctionModel,
    counter: Counter,
    capability: LoopGuardCapability,
    *more: AbstractCapability[None],
    **kwargs: Any,
) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(llm, capabilities=[capability, *more], **kwargs)

    @agent.tool_plain
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        return "pending"

    return agent


def run(agent: Agent[None, str], mode: str, prompt: str = "Is job 42 done?", **kwargs: Any) -> Any:
    if mode == "async":
        return asyncio.run(agent.run(prompt, **kwargs))
    return agent.run_sync(prompt, **kwargs)


def returns(parts: list[Any]) -> list[ToolReturnPart]:
    return [p for p in parts if isinstance(p, ToolReturnPart)]


@pytest.mark.parametrize("mode", MODES)
class TestStuckAgent:
    def test_warned_then_blocked_then_stopped(self, mode: str, counter: Counter) -> None:
        """Warning from the 4th identical call, blocks from the 6th, the run stops at the 8th."""
        events: list[lw.LoopEvent] = []
        llm = ScriptedModel(forever(("poll_status", {"job": "42"})))
        guard = LoopGuardCapability(SMALL, on_event=events.append, on_stop="raise")
        agent = make_agent(llm, counter, guard)

        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            run(agent, mode)

        assert stop.value.code == "global_circuit_breaker"
        assert (stop.value.tool_name, stop.value.count) == ("poll_status", 7)
        assert len(counter.runs) == 5
        answers = [returns(parts)[0] for parts in llm.answers()]
        assert [a.outcome for a in answers] == ["success"] * 5 + ["failed"] * 2
        assert [a.content for a in answers[:3]] == ["pending"] * 3
        assert answers[3].content.startswith(
            "pending\n\nWARNING: the job is still running: poll_status has been polled 3 times"
        )
        assert answers[4].content == "pending"
        assert all(a.content.startswith(BLOCKED) for a in answers[5:])
        assert [(e.action, e.detector, e.count) for e in events] == [
            ("warn", "generic_repeat", 3),
            ("block", "generic_repeat", 5),
            ("block", "generic_repeat", 6),
            ("stop", "global_circuit_breaker", 7),
        ]


@pytest.mark.parametrize("mode", MODES)
class TestProgressingAgent:
    def test_distinct_calls_are_never_flagged(self, mode: str, counter: Counter) -> None:
        """Different arguments every turn: no note, no block, the agent finishes."""
        jobs = itertools.count(1)

        def script(messages: list[ModelMessage]) -> ModelResponse:
            n = next(jobs)
            if n > 15:
                return ModelResponse(parts=[TextPart("all done")])
            return ModelResponse(
                parts=[ToolCallPart("poll_status", {"job": str(n)}, tool_call_id=f"c{n}")]
            )

        llm = ScriptedModel(script)
        result = run(make_agent(llm, counter, LoopGuardCapability(SMALL)), mode)
        assert result.output == "all done"
        assert len(counter.runs) == 15
        answers = [p for parts in llm.answers() for p in parts]
        assert [p.content for p in answers] == ["pending"] * 15  # no note parts either


@pytest.mark.parametrize("mode", MODES)
class TestHallucinatedTool:
    def test_stopped_with_no_config_at_all(self, mode: str, counter: Counter) -> None:
        """Defaults: the unknown-tool guard is on and stops at 30 misses."""
        llm = ScriptedModel(forever(("no_such_tool", {})))
        agent = make_agent(llm, counter, LoopGuardCapability(), retries={"tools": 100})
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            run(agent, mode)
        assert stop.value.count == 30
        notes = [p for parts in llm.answers() for p in parts if isinstance(p, UserPromptPart)]
        assert len(notes) == 20

    def test_default_retry_budget_ends_it_first(self, mode: str, counter: Counter) -> None:
        """With Pydantic AI's default retries the framework ends the run itself, as documented."""
        llm = ScriptedModel(forever(("no_such_tool", {})))
        agent = make_agent(llm, counter, LoopGuardCapability(SMALL))
        with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
            run(agent, mode)


def compacting(after: int) -> Script:
    """Poll forever; the response of turn ``after`` carries a provider compaction part."""
    reply = tool_calls(("poll_status", {"job": "42"}))
    turn = itertools.count(1)

    def script(messages: list[ModelMessage]) -> ModelResponse:
        response = reply()
        if next(turn) == after:
            summary = CompactionPart(content="Polled job 42; pending.", provider_name="function")
            response.parts.insert(0, summary)
        return response

    return script


def summarize(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A history processor that writes a summary (CompactionPart) once the history grows."""
    if len(messages) < 7 or any(
        isinstance(p, CompactionPart) for m in messages[:1] for p in m.parts
    ):
        return messages
    summary = ModelRequest(parts=[CompactionPart(content="Summary: polled job 42, pending.")])
    return [summary, *messages[-1:]]


@pytest.mark.parametrize("mode", MODES)
class TestCompaction:
    def test_history_processor_summary_then_same_calls_abort(
        self, mode: str, counter: Counter, lw_logs: Any
    ) -> None:
        """A summary written into the history by a processor arms the guard once."""
        llm = ScriptedModel(forever(("poll_status", {"job": "42"})))
        guard = LoopGuardCapability(on_stop="raise")
        agent = make_agent(llm, counter, guard, ProcessHistory(summarize))
        with pytest.raises(lw.CompactionLoopPersisted) as abort:
            run(agent, mode)
        assert abort.value.count == 3
        first = next(
            i for i, seen in enumerate(llm.seen) if isinstance(seen[0].parts[0], CompactionPart)
        )
        assert len(llm.seen) == first + 3  # the summarised turn and two more
        assert lw_logs.text.count("post-compaction guard armed") == 1

    def test_changing_results_after_compaction_continue(self, mode: str, counter: Counter) -> None:
        """After a compaction, calls whose results change are not aborted."""
        reply = compacting(after=2)
        turn = itertools.count(1)
        llm = ScriptedModel(
            lambda m: reply(m) if next(turn) <= 6 else ModelResponse(parts=[TextPart("done")])
        )
        agent: Agent[None, str] = Agent(llm, capabilities=[LoopGuardCapability()])

        @agent.tool_plain
        def poll_status(job: str) -> str:
            """Check whether a job has finished."""
            return f"{counter.hit(job) * 10}% done"

        assert run(agent, mode).output == "done"
        assert len(counter.runs) == 6

    def test_summary_from_an_earlier_run_does_not_arm(
        self, mode: str, counter: Counter, lw_logs: Any
    ) -> None:
        """A summary already in ``message_history`` is not a compaction of the new run."""
        history: list[ModelMessage] = [
            ModelRequest(parts=[CompactionPart(content="Earlier: job 42 was pending.")]),
            ModelResponse(parts=[TextPart("Noted.")]),
        ]
        llm = ScriptedModel(four_calls)
        agent = make_agent(llm, counter, LoopGuardCapability())
        assert run(agent, mode, message_history=history).output == "still pending"
        assert "post-compaction guard armed" not in lw_logs.text


class TestRunsAndConversations:
    def test_concurrent_threads_do_not_share_counts(self, counter: Counter) -> None:
        """Two ``run_sync`` calls in parallel threads, forced to interleave."""
        barrier = threading.Barrier(2, timeout=10)
        agent: Agent[None, str] = Agent(
            ScriptedModel(four_calls), capabilities=[LoopGuardCapability(SMALL)]
        )

        @agent.tool_plain
        def poll_status(job: str) -> str:
            """Check whether a job has finished."""
            barrier.wait()
            counter.hit(job)
            return "pending"

        results: list[Any] = [None, None]

        def work(i: int) -> None:
            try:
                results[i] = agent.run_sync(f"prompt {i}")
            finally:
                close_sync_loop()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for result in results:
            parts = [
                p for m in result.new_messages() if isinstance(m, ModelRequest) for p in m.parts
            ]
            assert ["WARNING" in str(a.content) for a in returns(parts)] == [False] * 3 + [True]
        assert len(counter.runs) == 8

    def test_next_run_of_a_conversation_starts_afresh(self, counter: Counter) -> None:
        """A conversation's history carries over, its loop counts do not."""
        events: list[lw.LoopEvent] = []
        agent = make_agent(
            ScriptedModel(four_calls), counter, LoopGuardCapability(SMALL, on_event=events.append)
        )
        first = agent.run_sync("Is job 42 done?", conversation_id="ticket-7")
        second = agent.run_sync("And now?", message_history=first.all_messages())
        assert second.output == "still pending"
        assert len(counter.runs) == 8
        assert [e.action for e in events] == ["warn", "warn"]
        assert events[0].run_id != events[1].run_id
        assert {e.session_id for e in events} == {"ticket-7"}

    def test_ids_come_from_the_framework(self, counter: Counter) -> None:
        """Run id, conversation id and agent name become run, session and agent ids."""
        events: list[lw.LoopEvent] = []
        agent = make_agent(
            ScriptedModel(four_calls),
            counter,
            LoopGuardCapability(SMALL, on_event=events.append),
            name="Support Bot",
        )
        agent.run_sync("go", run_id="run-1", conversation_id="conv-1")
        assert [(e.run_id, e.session_id, e.agent_id) for e in events] == [
            ("run-1", "conv-1", "Support Bot")
        ]

    def test_state_is_forgotten_when_the_run_ends(self, counter: Counter) -> None:
        """Finished or stopped, a run leaves nothing in the store."""
        guard = lw.LoopGuard(SMALL)
        make_agent(ScriptedModel(four_calls), counter, LoopGuardCapability(guard)).run_sync("go")
        assert len(guard.store) == 0
        stuck = make_agent(
            ScriptedModel(forever(("poll_status", {"job": "42"}))),
            counter,
            LoopGuardCapability(guard, on_stop="raise"),
        )
        with pytest.raises(lw.CircuitBreakerTripped):
            stuck.run_sync("go")
        assert len(guard.store) == 0

    def test_iterated_runs_are_guarded(self, counter: Counter) -> None:
        """``Agent.iter`` goes through the same hooks as ``run``."""
        events: list[lw.LoopEvent] = []
        agent = make_agent(
            ScriptedModel(four_calls), counter, LoopGuardCapability(SMALL, on_event=events.append)
        )

        async def iterate() -> None:
            async with agent.iter("go") as agent_run:
                async for _ in agent_run:
                    pass

        asyncio.run(iterate())
        assert [(e.action, e.count) for e in events] == [("warn", 3)]
        assert len(counter.runs) == 4

    def test_agent_name_selects_the_per_agent_config(self, counter: Counter) -> None:
        """``Agent(name=...)`` picks ``agents.list[].tools.loopDetection``."""
        config = {
            **SMALL,
            "agents": {
                "list": [{"id": "support-bot", "tools": {"loopDetection": {"warningThreshold": 2}}}]
            },
        }
        events: list[lw.LoopEvent] = []
        agent = make_agent(
            ScriptedModel(four_calls),
            counter,
            LoopGuardCapability(config, on_event=events.append),
            name="Support Bot",
        )
        agent.run_sync("go")
        assert [(e.action, e.count) for e in events] == [("warn", 2)]


def test_non_string_results_get_the_note_next_to_them(counter: Counter) -> None:
    """A dict result stays as it is; the warning follows it in the same request."""
    llm = ScriptedModel(turns(4, ("job_info", {"job": "42"})))
    agent: Agent[None, str] = Agent(llm, capabilities=[LoopGuardCapability(SMALL)])

    @agent.tool_plain
    def job_info(job: str) -> dict[str, str]:
        """Describe a job."""
        counter.hit(job)
        return {"job": job, "state": "pending"}

    assert agent.run_sync("go").output == "done"
    answers = llm.answers()
    assert [len(parts) for parts in answers] == [1, 1, 1, 2]
    result, note = answers[3]
    assert isinstance(result, ToolReturnPart) and result.content == {
        "job": "42",
        "state": "pending",
    }
    assert isinstance(note, UserPromptPart)
    assert str(note.content).startswith("WARNING: job_info has been called 3 times")


def test_failing_tool_is_blocked_without_using_retries(counter: Counter) -> None:
    """ModelRetry failures are outcomes: the same failure repeated is blocked, then stopped."""
    llm = ScriptedModel(forever(("fetch", {"url": "https://example.invalid"})))
    agent: Agent[None, str] = Agent(
        llm, capabilities=[LoopGuardCapability(SMALL, on_stop="raise")], retries={"tools": 50}
    )

    @agent.tool_plain
    def fetch(url: str) -> str:
        """Fetch a URL."""
        counter.hit(url)
        raise ModelRetry("connection refused")

    with pytest.raises(lw.CircuitBreakerTripped):
        agent.run_sync("go")
    assert len(counter.runs) == 5
    answers = [returns(parts)[0] for parts in llm.answers()]
    assert all("connection refused" in str(a.content) for a in answers[:5])
    assert [a.outcome for a in answers[5:]] == ["failed", "failed"]


def test_docs_example_runs() -> None:
    """The documented example, with a scripted model that never stops polling."""
    code = snippet("pydantic-ai-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15  # the limit
    printed = io.StringIO()
    script = forever(("poll_status", {"job": "42"}))
    namespace = {"model": FunctionModel(lambda messages, info: script(messages))}
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "pydantic-ai-quickstart", "exec"), namespace)
    assert printed.getvalue().strip() == "stopped: global_circuit_breaker poll_status 30"


def test_made_up_tool_with_deeply_nested_arguments_is_handled(counter: Counter) -> None:
    """A call of a tool that does not exist, whose arguments are a JSON string nested too
    deep to parse, reaches loopwarden's unknown-tool path without a RecursionError: the run
    goes on and the model is told the tool does not exist."""
    nested = "[" * 100_000 + "]" * 100_000
    replies = iter(
        [
            ModelResponse(parts=[ToolCallPart("no_such_tool", nested, tool_call_id="c1")]),
            ModelResponse(parts=[TextPart("done")]),
        ]
    )
    llm = ScriptedModel(lambda messages: next(replies))
    agent = make_agent(llm, counter, LoopGuardCapability(SMALL))
    result = agent.run_sync("go")
    assert result.output == "done"
    texts = [str(part.content) for part in llm.answers()[0]]
    assert any("no_such_tool" in text for text in texts)
