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
from ag2.events import ToolCallEvent, ToolErrorEvent, ToolResultsEvent
from ag2.knowledge import MemoryKnowledgeStore
from ag2.knowledge.config import KnowledgeConfig
from ag2.testing import TestConfig, TrackingConfig

import loopwarden as lw
from loopwarden.integrations.ag2 import LoopGuardMiddleware, ToolBlocked
from tests._snippets import snippet
from tests.integrations._chat_server import ChatServer, tool_messages
from tests.integrations._shared import BLOCKED, SMALL, WARNING, Events


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
    """Through AG2's real OpenAI client: the stop raises out of ``ask`` before the model is
    called again, the stopping call is answered in the history, and the next turn on the
    same stream sends every call with its answer."""
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
            middleware=[LoopGuardMiddleware(SMALL)],
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
    guard = LoopGuardMiddleware(None)
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


def test_docs_quickstart_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/integrations-ag2.md: the setup, run as shown against a scripted model API."""
    code = snippet("ag2-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 20

    def reply(body: dict[str, Any]) -> Any:
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(reply) as server:
        openai_config(server)  # skips without AG2's OpenAI client
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        namespace: dict[str, Any] = {"__name__": "docs_snippet"}
        exec(compile(code, "ag2-quickstart", "exec"), namespace)
        answer = asyncio.run(namespace["ask"]("Is job 42 done?"))
        requests = len(server.requests)

    code_name = answer.removeprefix("stopped by loopwarden: ")
    assert answer.startswith("stopped by loopwarden: ") and code_name.isidentifier()
    assert requests == 31  # the defaults: blocked from the 21st call, stopped at the 31st


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
