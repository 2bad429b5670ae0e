"""AG2 (``ag2`` 1.x) integration: what is specific to AG2 beyond the shared scenarios.

Driven with AG2's own offline model (``ag2.testing.TestConfig``) and, where the wire
format matters, with its real OpenAI client against a scripted chat-completions server
on loopback.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag2")

from ag2 import Agent, MemoryStream, tool
from ag2.compact import CompactTrigger, TailWindowCompact
from ag2.events import (
    HumanInputRequest,
    ToolApprovalRequest,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResultsEvent,
)
from ag2.knowledge import MemoryKnowledgeStore
from ag2.knowledge.config import KnowledgeConfig
from ag2.testing import TestConfig, TrackingConfig

import loopwarden as lw
from loopwarden.integrations._base import ASK_ANSWERS, text_question
from loopwarden.integrations.ag2 import METADATA_KEY, LoopGuardMiddleware, ToolBlocked
from loopwarden.stopping import StopReport, fallback_answer, final_answer_request, person_note
from tests._snippets import snippet
from tests.integrations._chat_server import ChatServer, tool_messages
from tests.integrations._onstop import FINAL, UNDERSTOOD, report_of, stuck_then_answers
from tests.integrations._shared import BLOCKED, SMALL, WARNING, Counter, Events

DEFAULTS = {"tools": {"loopDetection": {"enabled": True}}}


def call(name: str, args: dict[str, Any], call_id: str) -> ToolCallEvent:
    return ToolCallEvent(name=name, arguments=json.dumps(args), id=call_id)


def polls(n: int, prefix: str = "c", job: str = "42") -> list[ToolCallEvent]:
    return [call("poll_status", {"job": job}, f"{prefix}{i}") for i in range(n)]


def openai_config(server: ChatServer) -> Any:
    """AG2's real OpenAI client aimed at the loopback model (needs ``ag2[openai]``)."""
    try:
        from ag2.config import OpenAIConfig

        return OpenAIConfig(model="gpt-4o-mini", base_url=server.url, api_key="test")
    except ImportError as exc:
        pytest.skip(f"AG2's OpenAI client is not installed: {exc}")


def scripted(*steps: Any) -> TrackingConfig:
    return TrackingConfig(TestConfig(*steps, raise_tool_errors=False))


def answers(model: TrackingConfig) -> dict[str, Any]:
    """Call id -> the result event the model was sent for it."""
    out: dict[str, Any] = {}
    for sent in model.mock.call_args_list:
        last = sent.args[0]
        if isinstance(last, ToolResultsEvent):
            for result in last.results:
                out[result.parent_id] = result
    return out


def text(event: Any) -> str:
    return "\n\n".join(
        str(getattr(part, "content", getattr(part, "data", part))) for part in event.result.parts
    )


async def test_dict_result_gets_the_warning_as_a_text_part(events: Events) -> None:
    """A tool that returns data keeps it; the warning is a text part after it."""

    @tool
    def job_status(job: str) -> dict[str, str]:
        """The status of a job."""
        return {"job": job, "status": "pending"}

    model = scripted(*[call("job_status", {"job": "42"}, f"c{i}") for i in range(4)], "done")
    guard = LoopGuardMiddleware(SMALL, on_event=events)
    agent = Agent("poller", config=model, tools=[job_status], middleware=[guard])

    reply = await agent.ask("Is job 42 done?")

    assert reply.body == "done"
    got = answers(model)
    parts = got["c3"].result.parts
    assert [getattr(p, "data", None) for p in parts[:1]] == [{"job": "42", "status": "pending"}]
    assert parts[1].content.startswith(
        "WARNING: the job is still running: job_status has been polled 3 times"
    )
    assert len(got["c2"].result.parts) == 1
    assert events.actions() == ["warn"]


async def test_block_is_a_tool_error_with_only_the_message(events: Events) -> None:
    """A blocked call does not run; the model reads loopwarden's text, not a traceback."""
    ran: list[str] = []

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        ran.append(job)
        return "pending"

    model = scripted(*polls(6), "done")
    guard = LoopGuardMiddleware(SMALL, on_event=events)
    agent = Agent("poller", config=model, tools=[poll_status], middleware=[guard])

    await agent.ask("Is job 42 done?")

    blocked = answers(model)["c5"]
    assert isinstance(blocked, ToolErrorEvent) and isinstance(blocked.error, ToolBlocked)
    assert text(blocked).startswith(BLOCKED) and "Traceback" not in text(blocked)
    assert len(ran) == 5
    assert events.actions() == ["warn", "block"]


async def test_tool_exceptions_are_recorded_as_errors(tmp_path: Path) -> None:
    """AG2 turns a tool's exception into a ToolErrorEvent; loopwarden records it as an error."""

    @tool
    def deploy(target: str) -> str:
        """Deploy to a target."""
        raise RuntimeError(f"no route to {target}")

    record = tmp_path / "run.jsonl"
    model = scripted(call("deploy", {"target": "eu"}, "d1"), "done")
    guard = LoopGuardMiddleware(SMALL, run_record=record)
    agent = Agent("deployer", config=model, tools=[deploy], middleware=[guard])

    await agent.ask("Deploy.")
    guard.guard.close()

    outcomes = [
        json.loads(line)
        for line in record.read_text().splitlines()
        if json.loads(line)["type"] == "outcome"
    ]
    assert [(o["call_id"], o["is_error"]) for o in outcomes] == [("d1", True)]
    assert "no route to eu" in text(answers(model)["d1"])


async def test_a_stopped_turn_leaves_a_conversation_the_provider_accepts() -> None:
    """Through AG2's real OpenAI client, ``on_stop="raise"``: the stop raises out of ``ask``
    before the model is called again, the stopping call is answered in the history, and the
    next turn on the same stream sends every call with its answer."""
    sent: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> Any:
        sent.append(body)
        if body["messages"][-1]["role"] == "user" and "next" in str(body["messages"][-1]):
            return "Moving on."
        return [("poll_status", {"job": "42"}, f"c{len(sent)}")]

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        return "pending"

    with ChatServer(reply) as server:
        config = openai_config(server)
        agent = Agent(
            "poller",
            config=config,
            tools=[poll_status],
            middleware=[LoopGuardMiddleware(SMALL, on_stop="raise")],
        )
        stream = MemoryStream()
        with pytest.raises(lw.LoopAbort) as stopped:
            await agent.ask("Is job 42 done?", stream=stream)
        calls_before = len(sent)
        reply_next = await agent.ask("next question", stream=stream)

    stop = stopped.value
    assert (stop.tool_name, stop.count) == ("poll_status", 7)
    assert calls_before == 8  # the 8th answer stopped the run; the model was not asked again
    assert reply_next.body == "Moving on."
    last = sent[-1]["messages"]
    calls = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    answered = tool_messages(sent[-1])
    assert calls == [f"c{n}" for n in range(1, 9)] and sorted(answered) == sorted(calls)
    assert answered["c4"].startswith("pending\n\n" + WARNING)
    assert answered["c6"].startswith(BLOCKED)
    assert answered["c8"] == stop.message


async def test_unknown_tool_answers_go_through_the_real_client() -> None:
    """AG2 answers an unknown name itself; from the 4th miss the model reads the block."""
    sent: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> Any:
        sent.append(body)
        return "done" if len(sent) > 5 else [("web_search", {"q": "x"}, f"u{len(sent)}")]

    with ChatServer(reply) as server:
        config = openai_config(server)
        agent = Agent("poller", config=config, middleware=[LoopGuardMiddleware(SMALL)])
        await agent.ask("Search.")

    answered = tool_messages(sent[-1])
    assert [("web_search" in answered[f"u{n}"]) for n in (1, 2, 3)] == [True] * 3
    assert all(BLOCKED not in answered[f"u{n}"] for n in (1, 2, 3))
    assert all("there is no tool named 'web_search'" in answered[f"u{n}"] for n in (4, 5)), answered


async def test_compaction_arms_only_the_next_turn_of_that_conversation(lw_logs: Any) -> None:
    """AG2 compacts after a turn: the next turn on that stream is armed, another
    conversation's turn is not."""
    ran: list[str] = []

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        ran.append(job)
        return "pending"

    knowledge = KnowledgeConfig(
        store=MemoryKnowledgeStore(),
        expose_tool=False,
        write_event_log=False,
        compact=TailWindowCompact(2),
        compact_trigger=CompactTrigger(max_events=4),
    )
    guard = LoopGuardMiddleware(None, on_stop="raise")
    agent = Agent(
        "poller", config=scripted("x"), tools=[poll_status], middleware=[guard], knowledge=knowledge
    )
    compacted, other = MemoryStream(), MemoryStream()

    await agent.ask("first", stream=compacted, config=scripted(*polls(2, "a"), "later"))
    assert "post-compaction guard armed" not in lw_logs.text
    # Another conversation: not armed, its identical calls run to the end.
    reply = await agent.ask("other", stream=other, config=scripted(*polls(4, "o"), "done"))
    assert reply.body == "done"
    assert "post-compaction guard armed" not in lw_logs.text
    with pytest.raises(lw.CompactionLoopPersisted) as stopped:
        await agent.ask("again", stream=compacted, config=scripted(*polls(6, "b"), "done"))

    assert (stopped.value.code, stopped.value.count) == ("compaction_loop_persisted", 3)
    assert lw_logs.text.count("post-compaction guard armed for 3 attempts") == 1
    assert len(ran) == 2 + 4 + 3


def test_agent_name_is_the_agent_id_and_the_stream_the_session() -> None:
    """Per-agent config by the agent's name (warned at 2, not 50); the stream id is the session."""
    seen = Events()
    config = {
        "tools": {"loopDetection": {"enabled": True, "warningThreshold": 50}},
        "agents": {"list": [{"id": "poller", "tools": {"loopDetection": {"warningThreshold": 2}}}]},
    }
    guard = LoopGuardMiddleware(config, on_event=seen)

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        return "pending"

    agent = Agent("Poller", config=scripted(*polls(3), "done"), tools=[poll_status])
    stream = MemoryStream()

    asyncio.run(agent.ask("?", stream=stream, middleware=[guard]))

    assert seen.actions() == ["warn"]
    # The per-agent block matched the normalised name; events carry the name as given.
    assert (seen.items[0].agent_id, seen.items[0].session_id) == ("Poller", str(stream.id))


def test_docs_quickstart_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/integrations-ag2.md: the setup, run as shown against a scripted model API: the
    31st identical call stops the turn, and the model's last answer (no tools) is the reply."""
    code = snippet("ag2-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 20

    def reply(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return FINAL
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(reply) as server:
        openai_config(server)  # skips without AG2's OpenAI client
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        namespace: dict[str, Any] = {"__name__": "docs_snippet"}
        exec(compile(code, "ag2-quickstart", "exec"), namespace)
        answer = asyncio.run(namespace["ask"]("Is job 42 done?"))
        requests = len(server.requests)

    assert capsys.readouterr().out == "stopped: global_circuit_breaker poll_status 30\n"
    assert answer is not None and answer.startswith(FINAL + "\n\nloopwarden stopped this run")
    assert requests == 32  # blocked from the 21st call, stopped at the 31st, one last answer


async def test_middleware_given_to_ask_runs_inside_the_compaction(lw_logs: Any) -> None:
    """As documented: middleware passed to ``ask`` runs inside AG2's compaction, so it does
    not see the compaction (the next turn is not armed); in ``Agent(middleware=...)`` it is."""
    knowledge = KnowledgeConfig(
        store=MemoryKnowledgeStore(),
        expose_tool=False,
        write_event_log=False,
        compact=TailWindowCompact(2),
        compact_trigger=CompactTrigger(max_events=4),
    )

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        return "pending"

    guard = LoopGuardMiddleware(None)
    agent = Agent("poller", config=scripted("x"), tools=[poll_status], knowledge=knowledge)
    stream = MemoryStream()
    for question in ("first", "again"):
        model = scripted(*polls(2, question), "later")
        await agent.ask(question, stream=stream, config=model, middleware=[guard])
        # AG2 did compact: of the turn's dozen events, the last two are left.
        assert len(await stream.history.get_events()) <= 3

    assert "post-compaction guard armed" not in lw_logs.text


# -- When loopwarden stops the run (onStop), with AG2's real OpenAI client ----------------
def poller(counter: Counter) -> Any:
    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        return "pending"

    return poll_status


class Person:
    """An AG2 human-input hook (``hitl_hook``) answering from a script; keeps what it was
    asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[HumanInputRequest] = []

    def hook(self) -> Any:
        def hitl_hook(event: HumanInputRequest) -> str:
            self.asked.append(event)
            return self.answers.pop(0)

        return hitl_hook


async def run_turn(
    server: ChatServer, counter: Counter, person: Person | None = None, **options: Any
) -> Any:
    """One ``ask`` through AG2's OpenAI client; ``person`` is the agent's human-input hook."""
    agent = Agent(
        "poller",
        config=openai_config(server),
        tools=[poller(counter)],
        middleware=[LoopGuardMiddleware(options.pop("config", SMALL), **options)],
        hitl_hook=person.hook() if person is not None else None,
    )
    return await agent.ask("Is job 42 done?")


def last_answer_report(reply: Any) -> StopReport:
    return report_of(reply.response.metadata[METADATA_KEY])


async def test_answer_ends_the_turn_with_the_models_last_answer(counter: Counter) -> None:
    """No human-input hook, so nobody to ask: the stop ends the turn with one more model
    call over HTTP, without tools and told why; its text, with the summary as the last
    paragraph, is ``ask``'s reply, whose metadata holds the report."""
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter)
    report = last_answer_report(reply)
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused) == (8, 3)
    assert (report.tokens, report.turns) == (8 * 15, 8)  # the server reports 15 per call
    assert reply.body == f"{FINAL}\n\n{report.summary()}"
    assert reply.response.metadata[METADATA_KEY]["summary"] == report.summary()
    assert not reply.response.tool_calls and len(counter.runs) == 5
    assert len(server.requests) == 9
    assert all(body.get("tools") for body in server.requests[:8])
    body = server.requests[-1]
    assert "tools" not in body and "tool_choice" not in body
    *_, stopped, instruction = body["messages"]
    assert stopped == {"role": "tool", "tool_call_id": "c7", "content": report.message}
    assert instruction == {"role": "user", "content": final_answer_request(report)}


async def test_answer_falls_back_when_the_last_call_still_asks_for_tools(counter: Counter) -> None:
    """A model that asks for a tool even without tools: the reply is the fallback text."""

    def always_polls(body: dict[str, Any]) -> Any:
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(always_polls) as server:
        reply = await run_turn(server, counter)
    report = last_answer_report(reply)
    assert reply.body == fallback_answer(report) and reply.body.startswith(report.summary())
    assert not reply.response.tool_calls
    assert "tools" not in server.requests[-1] and len(counter.runs) == 5


async def test_answer_falls_back_when_the_last_call_fails(counter: Counter, lw_logs: Any) -> None:
    """The last model call fails (HTTP 500, AG2's client gives up): no exception reaches the
    caller, the reply is the fallback text, and the failure is logged."""

    def fails_without_tools(body: dict[str, Any]) -> Any:
        return stuck_then_answers(body) if body.get("tools") else (500, "model overloaded")

    with ChatServer(fails_without_tools) as server:
        reply = await run_turn(server, counter)
    assert reply.body == fallback_answer(last_answer_report(reply))
    assert "loopwarden's last model call failed" in lw_logs.text


async def test_raise_propagates_the_stop(counter: Counter) -> None:
    """``on_stop="raise"``: the stop leaves ``ask`` with its report; no last model call."""
    with ChatServer(stuck_then_answers) as server, pytest.raises(lw.CircuitBreakerTripped) as stop:
        await run_turn(server, counter, on_stop="raise")
    assert stop.value.report is not None and stop.value.report.calls == 8
    assert len(server.requests) == 8


async def test_on_stop_from_the_config_and_a_wrong_value(counter: Counter) -> None:
    """``loopwarden.onStop`` in the config applies when no argument is given (here ``raise``,
    even with a person to ask); an unknown value is refused when the middleware is made."""
    config = {**SMALL, "loopwarden": {"onStop": "raise"}}
    with ChatServer(stuck_then_answers) as server, pytest.raises(lw.CircuitBreakerTripped):
        await run_turn(server, counter, Person("stop"), config=config)
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardMiddleware(SMALL, on_stop="explode")  # type: ignore[arg-type]


async def test_ask_puts_the_stop_to_the_person_through_ag2s_human_input(
    counter: Counter,
) -> None:
    """With a human-input hook, the stop is AG2's ``ToolApprovalRequest`` for the stopped
    call: the question, the three answers; "stop" ends the turn with the last answer."""
    person = Person("stop")
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, person)
    (asked,) = person.asked
    report = last_answer_report(reply)
    assert isinstance(asked, ToolApprovalRequest) and asked.tool_call_id == "c7"
    assert asked.content == text_question(report)  # the report as it was when asked
    assert ASK_ANSWERS in asked.content
    assert reply.body == f"{FINAL}\n\n{report.summary()}"
    assert "tools" not in server.requests[-1] and len(server.requests) == 9
    assert len(counter.runs) == 5  # the stopped call did not run


async def test_ask_allow_once_runs_the_call_and_the_next_repeat_asks_again(
    counter: Counter,
) -> None:
    """ "Allow once": the refused call runs once and its result reaches the model; the rules
    kept their counts, so the next repeat is put to the person again."""
    person = Person("allow_once", "stop")
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, person)
    assert [event.tool_call_id for event in person.asked] == ["c7", "c8"]  # type: ignore[attr-defined]
    assert len(counter.runs) == 6
    assert tool_messages(server.requests[8])["c7"].startswith("pending")
    report = last_answer_report(reply)
    assert (report.calls, report.refused) == (9, 4)
    assert reply.body.startswith(FINAL)


async def test_ask_continue_gives_the_model_the_note(counter: Counter) -> None:
    """ "Continue" with a note: the model reads the note instead of the call's result, with
    its tools, and the turn goes on to its own answer."""
    note = "Check job 43 instead."
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, Person(f"continue: {note}"))
    assert tool_messages(server.requests[8])["c7"] == person_note(note)
    assert server.requests[8].get("tools")
    assert reply.body == UNDERSTOOD and METADATA_KEY not in reply.response.metadata
    assert len(counter.runs) == 5


async def test_ask_again_after_an_answer_that_is_not_a_choice(counter: Counter) -> None:
    """An answer that is none of the three is asked again, saying what was wrong; after
    three such answers the turn stops with the last answer."""
    person = Person("maybe", "stop")
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, person)
    assert len(person.asked) == 2
    assert person.asked[1].content.startswith("loopwarden did not understand the answer 'maybe'.\n")
    assert reply.body.startswith(FINAL)
    person = Person("maybe", "perhaps", "later")
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, person)
    assert len(person.asked) == 3 and reply.body.startswith(FINAL)
    assert "tools" not in server.requests[-1]


async def test_ask_acts_as_answer_when_the_question_goes_unanswered(counter: Counter) -> None:
    """A human-input hook that fails (AG2's ``HumanInputFailedError``): the question went
    nowhere, so the turn ends with the last answer, and that is logged."""

    def broken(event: HumanInputRequest) -> str:
        raise ConnectionError("approval queue down")

    with ChatServer(stuck_then_answers) as server:
        agent = Agent(
            "poller",
            config=openai_config(server),
            tools=[poller(counter)],
            middleware=[LoopGuardMiddleware(SMALL)],
            hitl_hook=broken,
        )
        reply = await agent.ask("Is job 42 done?")
    assert reply.body.startswith(FINAL) and "tools" not in server.requests[-1]


async def test_a_person_given_to_ask_is_asked_too(counter: Counter) -> None:
    """A human-input hook passed to one ``ask`` (not the agent) is AG2's channel for that
    turn: loopwarden's question goes there."""
    person = Person("continue")
    with ChatServer(stuck_then_answers) as server:
        agent = Agent(
            "poller",
            config=openai_config(server),
            tools=[poller(counter)],
            middleware=[LoopGuardMiddleware(SMALL)],
        )
        reply = await agent.ask("Is job 42 done?", hitl_hook=person.hook())
    assert len(person.asked) == 1 and reply.body == UNDERSTOOD
    assert tool_messages(server.requests[8])["c7"] == person_note(None)


async def test_a_stop_on_unknown_tool_calls_ends_with_the_last_answer() -> None:
    """Calls of a tool the agent lacks, which AG2 answers itself, stop the turn with the
    last answer (nobody is asked: there is no tool execution to approve)."""
    person = Person("allow_once")

    def searches(body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return FINAL
        return [("web_search", {"q": "x"}, f"u{len(body['messages'])}")]

    with ChatServer(searches) as server:
        agent = Agent(
            "poller",
            config=openai_config(server),
            tools=[poller(Counter())],
            middleware=[LoopGuardMiddleware(SMALL)],
            hitl_hook=person.hook(),
        )
        reply = await agent.ask("Search.")
    report = last_answer_report(reply)
    assert (report.code, report.tool) == ("unknown_tool_repeat", "web_search")
    assert reply.body == f"{FINAL}\n\n{report.summary()}" and person.asked == []
    assert "tools" not in server.requests[-1]


async def test_the_documented_last_answer(counter: Counter) -> None:
    """docs/integrations-ag2.md's last answer, word for word: the model's text and the
    summary of a stop at the 31st call with the default thresholds."""
    with ChatServer(stuck_then_answers) as server:
        reply = await run_turn(server, counter, config=DEFAULTS)
    assert reply.body == snippet("ag2-answer")


async def test_docs_ask_example_runs(counter: Counter, capsys: pytest.CaptureFixture[str]) -> None:
    """The documented human-input hook: the question is printed, the person's line is the
    answer ("continue" with a note), and the model's own answer ends the turn."""
    code = snippet("ag2-ask")
    with ChatServer(stuck_then_answers) as server:
        namespace: dict[str, Any] = {
            "config": openai_config(server),
            "poll_status": poller(counter),
            "guard": LoopGuardMiddleware(SMALL),
            "input": lambda prompt: "continue: Check job 43 instead.",
        }
        exec(compile(code, "ag2-ask", "exec"), namespace)
        reply = await namespace["agent"].ask("Is job 42 done?")
    printed = capsys.readouterr().out
    assert printed.startswith("loopwarden stopped this run (rule global_circuit_breaker): ")
    assert reply.body == UNDERSTOOD
    assert tool_messages(server.requests[8])["c7"] == person_note("Check job 43 instead.")


def test_the_docs_quote_the_codes_question() -> None:
    """docs/integrations-ag2.md quotes how to answer loopwarden's question as the code words
    it."""
    page = (Path(__file__).parents[2] / "docs" / "integrations-ag2.md").read_text()
    quoted = " ".join(
        line.removeprefix("> ").strip() for line in page.splitlines() if line.startswith("> ")
    )
    assert ASK_ANSWERS in quoted
