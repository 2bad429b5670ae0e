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

from pydantic import BaseModel
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
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
)

import loopwarden as lw
from loopwarden.integrations.pydantic_ai import KEY, LoopGuardCapability, answer_stop
from loopwarden.stopping import (
    ask_options,
    ask_question,
    fallback_answer,
    final_answer_request,
    person_note,
)
from tests._snippets import snippet
from tests.integrations._chat_server import ChatServer, Reply
from tests.integrations._chat_server import tool_messages as sent_tool_messages
from tests.integrations._onstop import (
    FINAL,
    PARALLEL,
    UNDERSTOOD,
    poll_and_read,
    report_of,
    stuck_then_answers,
)
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
        guard = LoopGuardCapability(on_stop="raise")
        agent = make_agent(llm, counter, guard, retries={"tools": 100})
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


# -- When loopwarden stops the run (onStop), with Pydantic AI's real OpenAI client --------
def openai_model(server: ChatServer) -> Any:
    """Pydantic AI's OpenAI chat model, talking HTTP to the scripted server (no retries)."""
    openai = pytest.importorskip("openai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0)
    return OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))


def polling_agent(model: Any, counter: Counter, capability: LoopGuardCapability, **kw: Any) -> Any:
    agent: Any = Agent(model, capabilities=[capability], name="poller", **kw)

    @agent.tool_plain
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        return "pending"

    return agent


ASKING: Any = [str, DeferredToolRequests]  # an output type that admits a person's answer


@pytest.mark.parametrize("mode", MODES)
def test_answer_ends_the_run_with_the_models_last_answer(mode: str, counter: Counter) -> None:
    """A str output type, so nobody to ask: the stop ends the run with one more request over
    HTTP, without tools and told why; the output is its text with the summary as the last
    paragraph, and the report is in the result's and the response's metadata."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(openai_model(server), counter, LoopGuardCapability(SMALL))
        result = run(agent, mode)
    found = result.metadata[KEY]
    assert result.response.metadata[KEY] == found
    report = report_of(found)
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused) == (8, 3)
    # Pydantic AI reports the usage and its request limit: what the stop saved.
    assert (report.tokens, report.turns, report.turn_limit) == (8 * 15, 8, 50)
    assert (found["saved_turns"], found["saved_tokens"]) == (42, 630)
    assert found["summary"] == report.summary()
    assert result.output == f"{FINAL}\n\n{report.summary()}"
    assert len(counter.runs) == 5
    # The last request: no tools, the stop answering the stopped call, then the instruction.
    assert len(server.requests) == 9
    assert all(body.get("tools") for body in server.requests[:8])
    body = server.requests[-1]
    assert "tools" not in body and "tool_choice" not in body
    *_, stopped, instruction = body["messages"]
    assert stopped["tool_call_id"] == "c7" and report.message in stopped["content"]
    assert instruction == {"role": "user", "content": final_answer_request(report)}


def test_answer_falls_back_when_the_last_request_still_asks_for_tools(counter: Counter) -> None:
    """A model that asks for a tool even without tools: the output is the fallback text."""

    def always_polls(body: dict[str, Any]) -> Reply:
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(always_polls) as server:
        agent = polling_agent(openai_model(server), counter, LoopGuardCapability(SMALL))
        result = agent.run_sync("Is job 42 done?")
    report = report_of(result.metadata[KEY])
    assert result.output == fallback_answer(report)
    assert result.output.startswith(report.summary())
    assert "tools" not in server.requests[-1]


def test_answer_falls_back_when_the_last_request_fails(counter: Counter, lw_logs: Any) -> None:
    """The last request fails (HTTP 500): no exception reaches the caller, the output is
    the fallback text, and the failure is logged."""

    def fails_without_tools(body: dict[str, Any]) -> Reply:
        return stuck_then_answers(body) if body.get("tools") else (500, "model overloaded")

    with ChatServer(fails_without_tools) as server:
        agent = polling_agent(openai_model(server), counter, LoopGuardCapability(SMALL))
        result = agent.run_sync("Is job 42 done?")
    assert result.output == fallback_answer(report_of(result.metadata[KEY]))
    assert "loopwarden's last model request failed" in lw_logs.text
    assert len(server.requests) == 9


def test_raise_propagates_the_stop(counter: Counter) -> None:
    """``on_stop="raise"``: the stop leaves ``run_sync`` with its report; no last request."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardCapability(SMALL, on_stop="raise")
        agent = polling_agent(openai_model(server), counter, guard, output_type=ASKING)
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run_sync("Is job 42 done?")
    assert stop.value.report is not None and stop.value.report.calls == 8
    assert len(server.requests) == 8


def test_on_stop_from_the_config_and_a_wrong_value(counter: Counter) -> None:
    """``loopwarden.onStop`` applies when no argument is given; an unknown value is refused
    when the capability is made."""
    guard = LoopGuardCapability({**SMALL, "loopwarden": {"onStop": "raise"}})
    agent = polling_agent(ScriptedModel(forever(("poll_status", {"job": "42"}))), counter, guard)
    with pytest.raises(lw.CircuitBreakerTripped):
        agent.run_sync("go")
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardCapability(SMALL, on_stop="explode")  # type: ignore[arg-type]


class Verdict(BaseModel):
    """A structured output type."""

    done: bool
    summary: str


def test_answer_with_a_structured_output_keeps_the_output_tool(counter: Counter) -> None:
    """A structured output type: the last request offers only the output tool; the output
    is the model's structured result and the report is in the metadata only."""

    def structured(body: dict[str, Any]) -> Reply:
        names = [tool["function"]["name"] for tool in body.get("tools", [])]
        if "poll_status" not in names:
            return [("final_result", {"done": False, "summary": "still pending"}, "out")]
        return stuck_then_answers(body)

    with ChatServer(structured) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=Verdict
        )
        result = agent.run_sync("Is job 42 done?")
    assert result.output == Verdict(done=False, summary="still pending")
    assert result.metadata[KEY]["code"] == "global_circuit_breaker"
    last = server.requests[-1]
    assert [tool["function"]["name"] for tool in last["tools"]] == ["final_result"]
    instruction = last["messages"][-1]["content"]
    assert instruction.startswith(final_answer_request(report_of(result.metadata[KEY])))
    assert "final result" in instruction


@pytest.mark.parametrize("mode", MODES)
def test_ask_ends_the_run_with_the_question(mode: str, counter: Counter) -> None:
    """An output type that admits ``DeferredToolRequests``: the stopped call is deferred for
    approval, with the question, the choices and the report; it has not run."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=ASKING
        )
        result = run(agent, mode)
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [call.tool_call_id for call in requests.approvals] == ["c7"]
    asked = requests.metadata["c7"][KEY]
    report = report_of(asked["report"])
    assert asked["question"] == ask_question(report)
    assert asked["options"] == ask_options()
    assert (report.calls, report.refused, report.tokens) == (8, 3, 8 * 15)
    assert len(counter.runs) == 5 and len(server.requests) == 8


def answered(
    server: ChatServer, counter: Counter, choice: str, note: str | None = None, **kw: Any
) -> tuple[Any, Any]:
    """A run stopped and asked, then the run that brings the person's answer."""
    agent = polling_agent(
        openai_model(server), counter, LoopGuardCapability(SMALL, **kw), output_type=ASKING
    )
    asked = agent.run_sync("Is job 42 done?")
    results = answer_stop(asked.output, choice, note)
    return agent, agent.run_sync(
        message_history=asked.all_messages(), deferred_tool_results=results
    )


def test_ask_allow_once_runs_the_call_and_the_next_repeat_asks_again(counter: Counter) -> None:
    """ "Allow once": the refused call runs once and its result reaches the model; the same
    loopwarden run goes on, so the next repeat is stopped and asked about again."""
    with ChatServer(stuck_then_answers) as server:
        _, result = answered(server, counter, "allow_once")
    assert len(counter.runs) == 6
    assert sent_tool_messages(server.requests[8])["c7"].startswith("pending")
    again = result.output
    assert isinstance(again, DeferredToolRequests)
    assert [call.tool_call_id for call in again.approvals] == ["c8"]
    report = again.metadata["c8"][KEY]["report"]
    assert (report["calls"], report["refused"]) == (9, 4)


def test_ask_stop_ends_the_run_as_answer_does(counter: Counter) -> None:
    """ "Stop": the run that brings the answer ends with the last answer, its report (with
    the usage of the run that was stopped) in the metadata."""
    with ChatServer(stuck_then_answers) as server:
        _, result = answered(server, counter, "stop")
    report = report_of(result.metadata[KEY])
    assert result.output == f"{FINAL}\n\n{report.summary()}"
    assert (report.calls, report.tokens, report.turn_limit) == (8, 8 * 15, 50)
    assert "tools" not in server.requests[-1] and len(server.requests) == 9
    assert len(counter.runs) == 5


def test_ask_continue_gives_the_model_the_note(counter: Counter) -> None:
    """ "Continue" with a note: the model reads the note instead of the call's result, with
    its tools, and the run goes on to its own answer."""
    note = "Check job 43 instead."
    with ChatServer(stuck_then_answers) as server:
        _, result = answered(server, counter, "continue", note)
    assert sent_tool_messages(server.requests[8])["c7"] == person_note(note)
    assert server.requests[8].get("tools")
    assert result.output == UNDERSTOOD and result.metadata is None
    assert len(counter.runs) == 5


def test_a_bare_approval_lets_the_call_run_once(counter: Counter) -> None:
    """A plain ``ToolApproved()`` for loopwarden's question counts as "allow once"."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=ASKING
        )
        asked = agent.run_sync("Is job 42 done?")
        results = DeferredToolResults(approvals={"c7": ToolApproved()})
        again = agent.run_sync(message_history=asked.all_messages(), deferred_tool_results=results)
    assert len(counter.runs) == 6
    assert isinstance(again.output, DeferredToolRequests)


def test_an_answer_reaches_the_run_through_a_shared_store(counter: Counter, tmp_path: Any) -> None:
    """The answer is brought by another capability (another process) on the same SQLite
    store: the question's report names the run, which goes on there."""
    store = f"sqlite:///{tmp_path / 'lw.db'}"
    with ChatServer(stuck_then_answers) as server:
        first = polling_agent(
            openai_model(server),
            counter,
            LoopGuardCapability(SMALL, store=store),
            output_type=ASKING,
        )
        asked = first.run_sync("Is job 42 done?")
        second = polling_agent(
            openai_model(server),
            counter,
            LoopGuardCapability(SMALL, store=store),
            output_type=ASKING,
        )
        results = answer_stop(asked.output, "allow_once")
        again = second.run_sync(message_history=asked.all_messages(), deferred_tool_results=results)
    assert len(counter.runs) == 6
    assert isinstance(again.output, DeferredToolRequests)
    assert again.output.metadata["c8"][KEY]["report"]["calls"] == 9


def test_ask_acts_as_answer_where_nobody_can_be_asked(counter: Counter) -> None:
    """``on_stop="ask"`` with a str output type (no ``DeferredToolRequests``) answers."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL, on_stop="ask")
        )
        result = agent.run_sync("Is job 42 done?")
    assert result.output.startswith(FINAL)


def test_answer_stop_refuses_what_it_cannot_answer(counter: Counter) -> None:
    """``answer_stop`` names the three choices for an unknown one, and refuses requests that
    hold no question from loopwarden."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=ASKING
        )
        asked = agent.run_sync("Is job 42 done?").output
    with pytest.raises(ValueError, match="allow_once, stop or continue"):
        answer_stop(asked, "maybe")
    with pytest.raises(ValueError, match="no question from loopwarden"):
        answer_stop(
            DeferredToolRequests(approvals=[ToolCallPart("x", {}, tool_call_id="z")]), "stop"
        )


def test_the_post_compaction_abort_is_never_asked(counter: Counter) -> None:
    """The post-compaction abort ends the run with a last answer even where a person could
    be asked; the last request offers no tools and carries the instruction."""
    infos: list[AgentInfo] = []
    llm = ScriptedModel(forever(("poll_status", {"job": "42"})))
    inner = llm.function

    def recording(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        infos.append(info)
        return inner(messages, info)  # type: ignore[misc,return-value]  # a sync function

    llm.function = recording
    agent = make_agent(
        llm, counter, LoopGuardCapability(), ProcessHistory(summarize), output_type=ASKING
    )
    result = agent.run_sync("Is job 42 done?")
    report = report_of(result.metadata[KEY])
    assert report.code == "compaction_loop_persisted"
    assert result.output == fallback_answer(report)  # the scripted model only ever polls
    assert infos[-1].function_tools == [] and infos[-1].allow_text_output
    last_prompt = llm.seen[-1][-1].parts[-1]
    assert isinstance(last_prompt, UserPromptPart)
    assert last_prompt.content == final_answer_request(report)


def test_the_documented_last_answer(counter: Counter) -> None:
    """docs/integrations-pydantic-ai.md's last answer, word for word: the model's text and
    the summary of a stop at the 31st call with the default thresholds, with what it saved."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardCapability({"tools": {"loopDetection": {"enabled": True}}})
        result = polling_agent(openai_model(server), counter, guard).run_sync("Is job 42 done?")
    assert result.output == snippet("pydantic-ai-answer")


def test_docs_ask_example_runs(counter: Counter) -> None:
    """The documented ask loop: the question is printed, "continue" with a note, and the
    model's own answer is the output."""
    code = snippet("pydantic-ai-ask")
    printed = io.StringIO()

    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        return "pending"

    with ChatServer(stuck_then_answers) as server:
        namespace = {
            "Agent": Agent,
            "model": openai_model(server),
            "guard": LoopGuardCapability(SMALL),
            "poll_status": poll_status,
        }
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "pydantic-ai-ask", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("loopwarden stopped this run (rule global_circuit_breaker): ")
    assert lines[-1] == UNDERSTOOD and len(lines) == 2


def test_a_structured_output_raises_when_the_model_calls_a_tool(counter: Counter) -> None:
    """A structured output type and a model that calls a function tool in the last request:
    there is no output of that type to give, so the stop is raised."""

    def polls(body: dict[str, Any]) -> Reply:
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(polls) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=Verdict
        )
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.run_sync("Is job 42 done?")


def test_parallel_calls_get_one_question(counter: Counter) -> None:
    """Two calls per turn under ``ask``: only the stopped tool's call is deferred; the other
    call of the stopped turn ran or failed with the stop's message."""

    with ChatServer(poll_and_read) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(PARALLEL), output_type=ASKING
        )

        @agent.tool_plain
        def read_log(offset: int) -> str:
            """Read the build log from an offset."""
            return f"log {offset}"

        result = agent.run_sync("Is job 42 done?")
        requests = result.output
        assert isinstance(requests, DeferredToolRequests)
        (asked,) = requests.approvals
        assert asked.tool_name == "poll_status"
        done = agent.run_sync(
            message_history=result.all_messages(),
            deferred_tool_results=answer_stop(requests, "stop"),
        )
    assert done.output.startswith(FINAL)
    turn = asked.tool_call_id[1:]
    sibling = sent_tool_messages(server.requests[-1])[f"r{turn}"]
    stop_message = requests.metadata[asked.tool_call_id][KEY]["report"]["message"]
    assert sibling == f"log {turn}" or stop_message in sibling  # ran, or refused: not run


def test_a_denial_is_pydantic_ais_own_answer(counter: Counter) -> None:
    """``ToolDenied(message)`` for loopwarden's question: the model reads the message and
    the run goes on, counted afresh (loopwarden is not told, as documented)."""
    with ChatServer(stuck_then_answers) as server:
        agent = polling_agent(
            openai_model(server), counter, LoopGuardCapability(SMALL), output_type=ASKING
        )
        asked = agent.run_sync("Is job 42 done?")
        results = DeferredToolResults(approvals={"c7": ToolDenied("Not now.")})
        again = agent.run_sync(message_history=asked.all_messages(), deferred_tool_results=results)
    assert sent_tool_messages(server.requests[8])["c7"] == "Not now."
    # A fresh count: seven more calls (five run, two blocked) before the next question.
    assert isinstance(again.output, DeferredToolRequests)
    assert again.output.metadata["c15"][KEY]["report"]["calls"] == 8
    assert len(counter.runs) == 10


def test_a_stop_on_a_missing_tool_ends_with_the_last_answer(counter: Counter) -> None:
    """Calls of a tool that does not exist never reach a tool hook, so even where a person
    could be asked the unknown-tool stop ends the run with the model's last answer."""

    def made_up(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return FINAL
        return [("no_such_tool", {"q": "x"}, f"c{len(body['messages'])}")]

    with ChatServer(made_up) as server:
        guard = LoopGuardCapability(SMALL)
        agent = polling_agent(
            openai_model(server), counter, guard, output_type=ASKING, retries={"tools": 100}
        )
        result = agent.run_sync("Is job 42 done?")
    report = report_of(result.metadata[KEY])
    assert (report.code, report.tool, report.count) == ("unknown_tool_repeat", "no_such_tool", 7)
    assert result.output == f"{FINAL}\n\n{report.summary()}"
    assert "tools" not in server.requests[-1]
    assert len(server.requests) == report.calls + 1  # one call per request, then the last
