"""LangChain/LangGraph middleware, driven through real ``create_agent`` agents.

The model is a LangChain chat model whose replies come from a script that sees
every message the agent sends it, so the tests check what the model reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain.tools import ToolRuntime
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

import loopwarden as lw
from loopwarden.integrations.langchain import LoopGuardMiddleware
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
from tests.integrations._drivers import _lc_model_class
from tests.integrations._onstop import (
    FINAL,
    PARALLEL,
    UNDERSTOOD,
    poll_and_read,
    report_of,
    stuck_then_answers,
)
from tests.integrations._shared import BLOCKED, SMALL, Counter

Script = Callable[[list[BaseMessage]], AIMessage]


# A chat model whose every reply is computed by ``script`` from the messages it gets,
# keeping each list of messages in ``seen`` (shared with the scenario drivers).
ScriptedChatModel: Any = _lc_model_class()


def model(script: Script) -> Any:
    return ScriptedChatModel(script=script, seen=[])


def calls(*specs: tuple[str, dict[str, Any]]) -> Callable[[], AIMessage]:
    """A reply factory: the same tool calls each turn, with fresh call ids."""
    ids = itertools.count(1)

    def reply() -> AIMessage:
        return AIMessage(
            "", tool_calls=[{"name": n, "args": a, "id": f"call_{next(ids)}"} for n, a in specs]
        )

    return reply


def forever(*specs: tuple[str, dict[str, Any]]) -> Script:
    reply = calls(*specs)
    return lambda messages: reply()


def turns(count: int, *specs: tuple[str, dict[str, Any]]) -> Script:
    """Call the tools for ``count`` turns, then answer."""
    reply = calls(*specs)
    left = itertools.count(count, -1)
    return lambda messages: reply() if next(left) > 0 else AIMessage("done")


@pytest.fixture(name="poll_status")
def fixture_poll_status(counter: Counter) -> Any:
    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit("poll_status")
        return "pending"

    return poll_status


def user(text: str = "Is job 42 done?") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def invoke(agent: Any, mode: str, inputs: Any = None, config: Any = None) -> Any:
    inputs = user() if inputs is None else inputs
    if mode == "async":
        return asyncio.run(agent.ainvoke(inputs, config))
    return agent.invoke(inputs, config)


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def events_of(sink: list[lw.LoopEvent]) -> list[tuple[str, str, int]]:
    return [(e.action, e.detector, e.count) for e in sink]


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
class TestStuckAgent:
    def test_warned_then_blocked_then_stopped(
        self, mode: str, counter: Counter, poll_status: Any
    ) -> None:
        """Warning from the 4th identical call, blocks from the 6th, the run stops at the 8th."""
        events: list[lw.LoopEvent] = []
        llm = model(forever(("poll_status", {"job": "42"})))
        guard = LoopGuardMiddleware(SMALL, on_event=events.append, on_stop="raise")
        agent = create_agent(llm, [poll_status], middleware=[guard])

        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            invoke(agent, mode)

        assert stop.value.code == "global_circuit_breaker"
        assert (stop.value.tool_name, stop.value.count) == ("poll_status", 7)
        assert len(counter.runs) == 5  # blocked calls never ran
        # What the model read before each of its turns: the newest tool answer.
        answers = [tool_messages(seen)[-1] for seen in llm.seen[1:]]
        assert [m.status for m in answers] == ["success"] * 5 + ["error"] * 2
        assert [m.content for m in answers[:3]] == ["pending"] * 3
        assert answers[3].content.startswith(
            "pending\n\nWARNING: the job is still running: poll_status has been polled 3 times"
        )
        assert answers[4].content == "pending"  # no repeat of the note until 2x the threshold
        for blocked in answers[5:]:
            assert blocked.content.startswith(BLOCKED)
            assert blocked.response_metadata["loopwarden"]["action"] == "block"
        assert events_of(events) == [
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

        @tool
        def poll_status(job: str) -> str:
            """Check whether a job has finished."""
            counter.hit(job)
            return "pending"

        def script(messages: list[BaseMessage]) -> AIMessage:
            if len(tool_messages(messages)) == 15:
                return AIMessage("all done")
            n = next(jobs)
            return AIMessage(
                "", tool_calls=[{"name": "poll_status", "args": {"job": str(n)}, "id": f"c{n}"}]
            )

        agent = create_agent(model(script), [poll_status], middleware=[LoopGuardMiddleware(SMALL)])
        out = invoke(agent, mode)
        answers = tool_messages(out["messages"])
        assert len(counter.runs) == len(answers) == 15
        assert {m.content for m in answers} == {"pending"}
        assert out["messages"][-1].content == "all done"


@pytest.mark.parametrize("mode", MODES)
class TestHallucinatedTool:
    def test_stopped_with_no_config_at_all(self, mode: str, poll_status: Any) -> None:
        """Defaults (detection unset): the unknown-tool guard is on and stops at 30 misses."""
        llm = model(forever(("no_such_tool", {})))
        agent = create_agent(llm, [poll_status], middleware=[LoopGuardMiddleware(on_stop="raise")])
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            invoke(agent, mode)
        assert stop.value.count == 30
        answers = [tool_messages(seen)[-1] for seen in llm.seen[1:]]
        assert sum(BLOCKED in str(m.content) for m in answers) == 20
        assert sum("is not a valid tool" in str(m.content) for m in answers) == 10


def test_tools_answered_by_inner_middleware_are_not_unknown(poll_status: Any) -> None:
    """A tool the ToolNode lacks but a later middleware answers is not treated as unknown."""

    class Lookup(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            call = request.tool_call
            if call["name"] != "lookup":
                return handler(request)
            return ToolMessage(f"entry {call['args']['key']}", tool_call_id=call["id"])

    keys = itertools.count(1)

    def script(messages: list[BaseMessage]) -> AIMessage:
        n = next(keys)
        if n > 8:
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": n}, "id": f"k{n}"}])

    events: list[lw.LoopEvent] = []
    agent = create_agent(
        model(script),
        [poll_status],
        middleware=[LoopGuardMiddleware(SMALL, on_event=events.append), Lookup()],
    )
    out = agent.invoke(user())
    answers = tool_messages(out["messages"])
    assert [m.content for m in answers] == [f"entry {n}" for n in range(1, 9)]
    assert events == []


def summarizer() -> SummarizationMiddleware:
    """The real SummarizationMiddleware, with a fake summary model and a tiny trigger."""
    summary = FakeMessagesListChatModel(responses=[AIMessage("The job was polled; pending.")])
    return SummarizationMiddleware(summary, trigger=("messages", 8), keep=("messages", 2))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ["after_summarization", "before_summarization"])
class TestCompaction:
    def test_same_calls_after_summary_abort(
        self, mode: str, order: str, counter: Counter, poll_status: Any, lw_logs: Any
    ) -> None:
        """A summary followed by three identical calls and results ends the run."""
        llm = model(forever(("poll_status", {"job": "42"})))
        # Defaults: only the post-compaction guard is on.
        guard = LoopGuardMiddleware(on_stop="raise")
        middleware = (
            [summarizer(), guard] if order == "after_summarization" else [guard, summarizer()]
        )
        agent = create_agent(llm, [poll_status], middleware=middleware)

        with pytest.raises(lw.CompactionLoopPersisted) as abort:
            invoke(agent, mode)

        assert abort.value.code == "compaction_loop_persisted"
        assert (abort.value.tool_name, abort.value.count) == ("poll_status", 3)
        summaries = [
            i
            for i, seen in enumerate(llm.seen)
            if isinstance(seen[0], HumanMessage) and "summary of the conversation" in seen[0].text
        ]
        assert summaries, "the model never saw a summary"
        # The summary arrived, then exactly three identical calls ran.
        assert len(llm.seen) == summaries[0] + 3
        assert "post-compaction guard armed for 3 attempts" in lw_logs.text
        assert lw_logs.text.count("post-compaction guard armed") == 1

    def test_progress_after_summary_continues(
        self, mode: str, order: str, counter: Counter
    ) -> None:
        """After a summary, calls whose results change are not aborted."""

        @tool
        def poll_status(job: str) -> str:
            """Check whether a job has finished."""
            return f"{counter.hit(job)}0% done"

        llm = model(turns(9, ("poll_status", {"job": "42"})))
        guard = LoopGuardMiddleware()
        middleware = (
            [summarizer(), guard] if order == "after_summarization" else [guard, summarizer()]
        )
        agent = create_agent(llm, [poll_status], middleware=middleware)
        out = invoke(agent, mode)
        assert out["messages"][-1].content == "done"
        assert len(counter.runs) == 9
        assert isinstance(out["messages"][0], HumanMessage)
        assert "summary" in out["messages"][0].text


def test_summary_from_an_earlier_invocation_does_not_arm(
    counter: Counter, poll_status: Any, lw_logs: Any
) -> None:
    """The next invocation on a thread that was summarised before is not a new compaction."""
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "long-chat"}}
    summarising = create_agent(
        model(turns(5, ("poll_status", {"job": "1"}))),
        [poll_status],
        middleware=[summarizer(), LoopGuardMiddleware()],
        checkpointer=saver,
    )
    summarising.invoke(user(), config)
    assert lw_logs.text.count("post-compaction guard armed") == 1
    # Same thread, no summarizer now: the summary heads the history, three identical calls.
    plain = create_agent(
        model(turns(3, ("poll_status", {"job": "2"}))),
        [poll_status],
        middleware=[LoopGuardMiddleware()],
        checkpointer=saver,
    )
    out = plain.invoke(user("Check job 2"), config)
    assert "summary of the conversation" in out["messages"][0].text
    assert out["messages"][-1].content == "done"
    assert lw_logs.text.count("post-compaction guard armed") == 1


class TestRunsAndSessions:
    def test_concurrent_runs_do_not_share_counts(self, counter: Counter) -> None:
        """Two invocations in parallel threads, interleaved call by call, count separately."""
        barrier = threading.Barrier(2, timeout=10)

        @tool
        def poll_status(job: str) -> str:
            """Check whether a job has finished."""
            barrier.wait()  # both runs make each call at the same time
            counter.hit(job)
            return "pending"

        events: list[lw.LoopEvent] = []
        llm = model(lambda messages: _four_calls(messages))
        agent = create_agent(
            llm, [poll_status], middleware=[LoopGuardMiddleware(SMALL, on_event=events.append)]
        )
        results: list[Any] = [None, None]

        def work(i: int) -> None:
            results[i] = agent.invoke(user(), {"configurable": {"thread_id": f"t{i}"}})

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(counter.runs) == 8
        for out in results:
            answers = tool_messages(out["messages"])
            assert [m.status for m in answers] == ["success"] * 4
            assert ["WARNING" in str(m.content) for m in answers] == [False] * 3 + [True]
        assert sorted(e.session_id or "" for e in events) == ["t0", "t1"]
        assert len({e.run_id for e in events}) == 2

    def test_next_invocation_on_a_thread_is_a_new_run(
        self, counter: Counter, poll_status: Any
    ) -> None:
        """A thread's history persists, its loop counts do not: each invoke is a new run."""
        events: list[lw.LoopEvent] = []
        agent = create_agent(
            model(_four_calls),
            [poll_status],
            middleware=[LoopGuardMiddleware(SMALL, on_event=events.append)],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "ticket-7"}}
        agent.invoke(user(), config)
        out = agent.invoke(user("And now?"), config)
        answers = tool_messages(out["messages"])
        assert len(answers) == 8  # both invocations' answers are in the thread
        assert [m.status for m in answers] == ["success"] * 8
        assert [e.action for e in events] == ["warn", "warn"]
        assert events[0].run_id != events[1].run_id
        assert {e.session_id for e in events} == {"ticket-7"}

    def test_ids_come_from_the_framework(self, poll_status: Any) -> None:
        """Run id from the config's run_id, session from the thread id, agent id from the name."""
        events: list[lw.LoopEvent] = []
        agent = create_agent(
            model(_four_calls),
            [poll_status],
            middleware=[LoopGuardMiddleware(SMALL, on_event=events.append)],
            name="Support Bot",
        )
        run_id = uuid.uuid4()
        agent.invoke(user(), {"configurable": {"thread_id": "t-9"}, "run_id": run_id})
        assert [(e.run_id, e.session_id, e.agent_id) for e in events] == [
            (str(run_id), "t-9", "Support Bot")
        ]

    def test_resumed_run_keeps_its_counts(self, counter: Counter, poll_status: Any) -> None:
        """An interrupt and its resume are one run: the 4th identical call is still warned."""

        @tool
        def ask_human(question: str) -> str:
            """Ask the operator."""
            return str(interrupt(question))

        script = iter(
            [("poll_status", {"job": "42"})] * 3
            + [("ask_human", {"question": "keep waiting?"})]
            + [("poll_status", {"job": "42"})]
        )

        def reply(messages: list[BaseMessage]) -> AIMessage:
            step = next(script, None)
            if step is None:
                return AIMessage("done")
            return AIMessage(
                "", tool_calls=[{"name": step[0], "args": step[1], "id": uuid.uuid4().hex}]
            )

        events: list[lw.LoopEvent] = []
        agent = create_agent(
            model(reply),
            [poll_status, ask_human],
            middleware=[LoopGuardMiddleware(SMALL, on_event=events.append)],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "hitl"}}
        paused = agent.invoke(user(), config)
        assert "__interrupt__" in paused and events == []
        out = agent.invoke(Command(resume="yes"), config)
        assert out["messages"][-1].content == "done"
        assert [(e.action, e.count) for e in events] == [("warn", 3)]
        assert "WARNING" in str(tool_messages(out["messages"])[-1].content)

    def test_state_is_forgotten_when_the_run_ends(self, poll_status: Any) -> None:
        """A finished invocation leaves nothing in the store; one stopped under ``raise`` keeps
        its verdict."""
        guard = lw.LoopGuard(SMALL)
        agent = create_agent(
            model(_four_calls), [poll_status], middleware=[LoopGuardMiddleware(guard)]
        )
        agent.invoke(user())
        assert len(guard.store) == 0
        stuck = create_agent(
            model(forever(("poll_status", {"job": "42"}))),
            [poll_status],
            middleware=[LoopGuardMiddleware(guard, on_stop="raise")],
        )
        with pytest.raises(lw.CircuitBreakerTripped):
            stuck.invoke(user())
        assert len(guard.store) == 1

    def test_agent_name_selects_the_per_agent_config(self, poll_status: Any) -> None:
        """``create_agent(name=...)`` picks ``agents.list[].tools.loopDetection``."""
        config = {
            **SMALL,
            "agents": {
                "list": [{"id": "support-bot", "tools": {"loopDetection": {"warningThreshold": 2}}}]
            },
        }
        events: list[lw.LoopEvent] = []
        agent = create_agent(
            model(_four_calls),
            [poll_status],
            middleware=[LoopGuardMiddleware(config, on_event=events.append)],
            name="Support Bot",
        )
        agent.invoke(user())
        assert events_of(events) == [("warn", "generic_repeat", 2)]


def _four_calls(messages: list[BaseMessage]) -> AIMessage:
    """Four identical calls per user message (call ids repeat across invocations), then answer."""
    start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    done = len(tool_messages(messages[start:]))
    if done == 4:
        return AIMessage("still pending")
    return AIMessage(
        "", tool_calls=[{"name": "poll_status", "args": {"job": "42"}, "id": f"c{done}"}]
    )


def test_tool_errors_are_outcomes_and_propagate(counter: Counter) -> None:
    """A tool that raises: the exception still ends the run, and its message was recorded."""

    @tool
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        counter.hit(job)
        raise RuntimeError("backend down")

    events: list[lw.LoopEvent] = []
    guard = LoopGuardMiddleware(SMALL, on_event=events.append)
    agent = create_agent(
        model(forever(("poll_status", {"job": "1"}))), [poll_status], middleware=[guard]
    )
    with pytest.raises(RuntimeError, match="backend down"):
        agent.invoke(user(), {"run_id": uuid.UUID(int=1)})
    records = guard.guard.run(str(uuid.UUID(int=1))).snapshot()["records"]
    expected = lw.hash_outcome("poll_status", {"job": "1"}, error=RuntimeError("backend down"))
    assert [(r["call_id"], r["result_hash"]) for r in records] == [("call_1", expected.hash)]


def test_content_blocks_get_the_note_as_a_block(counter: Counter) -> None:
    """A tool answering with content blocks: the warning is one more text block."""

    @tool
    def screenshot(page: str) -> list[dict[str, str]]:
        """Render a page."""
        counter.hit(page)
        return [{"type": "text", "text": "blank page"}]

    llm = model(turns(4, ("screenshot", {"page": "home"})))
    agent = create_agent(llm, [screenshot], middleware=[LoopGuardMiddleware(SMALL)])
    answers = tool_messages(agent.invoke(user())["messages"])
    assert [m.content for m in answers[:3]] == [[{"type": "text", "text": "blank page"}]] * 3
    first, note = answers[3].content
    assert first == {"type": "text", "text": "blank page"}
    assert isinstance(note, dict) and note["type"] == "text"
    assert note["text"].startswith("WARNING: screenshot has been called 3 times")


def test_command_results_get_the_note(counter: Counter) -> None:
    """A tool answering with a ``Command``: the warning goes on the ToolMessage inside it."""

    @tool
    def set_mode(mode: str, runtime: ToolRuntime) -> Command[Any]:
        """Switch a mode."""
        counter.hit(mode)
        answer = ToolMessage("mode set", tool_call_id=runtime.tool_call_id, name="set_mode")
        return Command(update={"messages": [answer]})

    llm = model(turns(4, ("set_mode", {"mode": "fast"})))
    agent = create_agent(llm, [set_mode], middleware=[LoopGuardMiddleware(SMALL)])
    answers = tool_messages(agent.invoke(user())["messages"])
    assert [m.content for m in answers[:3]] == ["mode set"] * 3
    assert answers[3].content.startswith("mode set\n\nWARNING: set_mode has been called 3 times")
    assert len(counter.runs) == 4


def strict(script: Script) -> Any:
    """A model that rejects a history with an unanswered tool call, as providers do (400)."""

    def checked(messages: list[BaseMessage]) -> AIMessage:
        for i, message in enumerate(messages):
            if isinstance(message, AIMessage) and message.tool_calls:
                answers = set()
                for later in messages[i + 1 :]:
                    if not isinstance(later, ToolMessage):
                        break
                    answers.add(later.tool_call_id)
                missing = [c["id"] for c in message.tool_calls if c["id"] not in answers]
                if missing:
                    raise ValueError(f"tool calls without answers: {missing}")
        return script(messages)

    return model(checked)


def _stuck_until_asked_again(messages: list[BaseMessage]) -> AIMessage:
    """Two calls per turn (one of them repeated), until a user message says 'start over'."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and "start over" in last.text:
        return AIMessage("starting over")
    n = len(tool_messages(messages))
    return AIMessage(
        "",
        tool_calls=[
            {"name": "poll_status", "args": {"job": "42"}, "id": f"p{n}"},
            {"name": "read_log", "args": {"offset": n}, "id": f"r{n}"},
        ],
    )


def _saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if kind == "memory":
        return InMemorySaver()
    sqlite_saver = pytest.importorskip("langgraph.checkpoint.sqlite")
    import sqlite3

    conn = sqlite3.connect(tmp_path / "checkpoints.db", check_same_thread=False)
    request.addfinalizer(conn.close)
    return sqlite_saver.SqliteSaver(conn)


@pytest.mark.parametrize(
    ("saver", "mode"), [("memory", "sync"), ("memory", "async"), ("sqlite", "sync")]
)
def test_a_stopped_checkpointed_thread_continues(
    saver: str,
    mode: str,
    counter: Counter,
    poll_status: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """After a stop under ``raise``, the next invocation answers the stopped turn's calls, so
    a provider that rejects unanswered tool calls accepts the thread's history."""

    @tool
    def read_log(offset: int) -> str:
        """Read the build log from an offset."""
        return f"log {offset}"

    checkpointer = _saver(saver, tmp_path, request)
    llm = strict(_stuck_until_asked_again)
    guard = LoopGuardMiddleware(SMALL, on_stop="raise")
    agent = create_agent(
        llm, [poll_status, read_log], middleware=[guard], checkpointer=checkpointer
    )
    config = {"configurable": {"thread_id": "ticket-9"}}
    with pytest.raises(lw.CircuitBreakerTripped) as stop:
        invoke(agent, mode, config=config)

    out = invoke(agent, mode, user("Please start over."), config)

    assert out["messages"][-1].content == "starting over"
    history = out["messages"]
    stopped_turn = max(
        i for i, m in enumerate(history) if isinstance(m, AIMessage) and m.tool_calls
    )
    answers = history[stopped_turn + 1 : stopped_turn + 3]
    assert [m.tool_call_id for m in answers] == [c["id"] for c in history[stopped_turn].tool_calls]
    for answer in answers:
        assert answer.status == "error" and answer.content == stop.value.message
        assert answer.response_metadata["loopwarden"]["action"] == "stop"
    assert isinstance(history[stopped_turn + 3], HumanMessage)
    assert len(guard.guard.store) == 0  # the stopped run was ended by the repair
    # The thread goes on: a third invocation finds nothing to repair.
    again = invoke(agent, mode, user("start over once more"), config)
    assert again["messages"][-1].content == "starting over"
    assert len(again["messages"]) == len(history) + 2


def test_calls_left_by_an_interrupt_are_not_answered(poll_status: Any) -> None:
    """Only a stop's calls get loopwarden's answer: an interrupt the caller abandons for new
    input leaves the history as it is."""

    @tool
    def ask_human(question: str) -> str:
        """Ask the operator."""
        return str(interrupt(question))

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], HumanMessage) and "never mind" in messages[-1].text:
            return AIMessage("ok")
        return AIMessage(
            "", tool_calls=[{"name": "ask_human", "args": {"question": "?"}, "id": "q"}]
        )

    guard = LoopGuardMiddleware(SMALL)
    agent = create_agent(
        model(reply), [poll_status, ask_human], middleware=[guard], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "hitl-2"}}
    assert "__interrupt__" in agent.invoke(user(), config)
    out = agent.invoke(user("never mind"), config)
    assert out["messages"][-1].content == "ok"
    assert not any(isinstance(m, ToolMessage) for m in out["messages"])
    assert len(guard.guard.store) == 0


def test_the_documented_manual_repair_works(poll_status: Any) -> None:
    """Without the middleware, ``update_state(..., as_node="tools")`` answers the calls."""
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "t"}}
    guarded = create_agent(
        strict(_stuck_until_asked_again),
        [poll_status],
        middleware=[LoopGuardMiddleware(SMALL, on_stop="raise")],
        checkpointer=saver,
    )
    with pytest.raises(lw.CircuitBreakerTripped):
        guarded.invoke(user(), config)
    plain = create_agent(strict(_stuck_until_asked_again), [poll_status], checkpointer=saver)
    messages = plain.get_state(config).values["messages"]
    # Answer every call of the stopped turn. get_state may also show an answer that
    # finished before the stop: LangGraph keeps it only as a pending write of the
    # failed step, and update_state drops it, so it must be given again.
    pending = next(m for m in reversed(messages) if getattr(m, "tool_calls", None))
    plain.update_state(
        config,
        {
            "messages": [
                ToolMessage("Stopped by loopwarden.", tool_call_id=c["id"], status="error")
                for c in pending.tool_calls
            ]
        },
        as_node="tools",
    )
    answers = [
        m.tool_call_id
        for m in plain.get_state(config).values["messages"]
        if isinstance(m, ToolMessage)
    ]
    assert all(answers.count(c["id"]) == 1 for c in pending.tool_calls)
    assert plain.invoke(user("start over"), config)["messages"][-1].content == "starting over"


def test_docs_example_runs(counter: Counter) -> None:
    """The documented example, with a scripted model that never stops polling."""
    code = snippet("langchain-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15  # the limit
    printed = io.StringIO()
    namespace = {"model": model(forever(("poll_status", {"job": "42"})))}
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "langchain-quickstart", "exec"), namespace)
    assert printed.getvalue().strip() == "stopped: global_circuit_breaker poll_status 30"


# -- When loopwarden stops the run (onStop), with LangChain's real OpenAI client ----------
def openai_model(server: ChatServer) -> Any:
    """LangChain's OpenAI chat model, talking HTTP to the scripted server."""
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    return chat_openai(model="scripted", base_url=server.url, api_key="none", max_retries=0)


THREAD = {"configurable": {"thread_id": "ask"}}


def asking_agent(server: ChatServer, poll_status: Any, **options: Any) -> Any:
    """An agent with a checkpointer: a person can be asked (the default there)."""
    guard = LoopGuardMiddleware(SMALL, **options)
    return create_agent(
        openai_model(server), [poll_status], middleware=[guard], checkpointer=InMemorySaver()
    )


@pytest.mark.parametrize("mode", MODES)
def test_answer_ends_the_run_with_the_models_last_answer(
    mode: str, counter: Counter, poll_status: Any
) -> None:
    """No checkpointer, so nobody to ask: the stop ends the run with one more model call over
    HTTP, without tools and told why; its text, with the summary as the last paragraph, is
    the run's last message, which holds the report."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardMiddleware(SMALL)
        agent = create_agent(openai_model(server), [poll_status], middleware=[guard])
        out = invoke(agent, mode)
    last = out["messages"][-1]
    found = last.response_metadata["loopwarden"]
    report = report_of(found)
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused) == (8, 3)
    assert (report.tokens, report.turns) == (8 * 15, 8)  # the server reports 15 per call
    assert found["summary"] == report.summary()
    assert last.content == f"{FINAL}\n\n{report.summary()}"
    assert not last.tool_calls and len(counter.runs) == 5
    # The last request: no tools, the stop answering the stopped call, then the instruction.
    assert len(server.requests) == 9
    assert all(body.get("tools") for body in server.requests[:8])
    body = server.requests[-1]
    assert "tools" not in body and "tool_choice" not in body
    *_, stopped, instruction = body["messages"]
    assert stopped == {"role": "tool", "tool_call_id": "c7", "content": report.message}
    assert instruction == {"role": "user", "content": final_answer_request(report)}
    assert guard.guard.store is not None and len(guard.guard.store) == 0  # the run ended


def test_answer_falls_back_when_the_last_call_still_asks_for_tools(poll_status: Any) -> None:
    """A model that asks for a tool even without tools: the run ends with the fallback text."""

    def always_polls(body: dict[str, Any]) -> Reply:
        return [("poll_status", {"job": "42"}, f"c{len(body['messages'])}")]

    with ChatServer(always_polls) as server:
        agent = create_agent(
            openai_model(server), [poll_status], middleware=[LoopGuardMiddleware(SMALL)]
        )
        out = agent.invoke(user())
    last = out["messages"][-1]
    report = report_of(last.response_metadata["loopwarden"])
    assert last.content == fallback_answer(report) and not last.tool_calls
    assert last.content.startswith(report.summary())
    assert "tools" not in server.requests[-1]


def test_answer_falls_back_when_the_last_call_fails(poll_status: Any, lw_logs: Any) -> None:
    """The last model call fails (HTTP 500): no exception reaches the caller, the run ends
    with the fallback text, and the failure is logged."""

    def fails_without_tools(body: dict[str, Any]) -> Reply:
        return stuck_then_answers(body) if body.get("tools") else (500, "model overloaded")

    with ChatServer(fails_without_tools) as server:
        agent = create_agent(
            openai_model(server), [poll_status], middleware=[LoopGuardMiddleware(SMALL)]
        )
        out = agent.invoke(user())
    last = out["messages"][-1]
    assert last.content == fallback_answer(report_of(last.response_metadata["loopwarden"]))
    assert "loopwarden's last model call failed" in lw_logs.text


def test_raise_propagates_the_stop(poll_status: Any) -> None:
    """``on_stop="raise"``: the stop leaves ``invoke`` with its report; no last model call."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardMiddleware(SMALL, on_stop="raise")
        agent = create_agent(openai_model(server), [poll_status], middleware=[guard])
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.invoke(user())
    assert stop.value.report is not None and stop.value.report.calls == 8
    assert len(server.requests) == 8


def test_on_stop_from_the_config_and_a_wrong_value() -> None:
    """``loopwarden.onStop`` in the config applies when no argument is given; an unknown
    value is refused when the middleware is made."""
    config = {**SMALL, "loopwarden": {"onStop": "raise"}}
    guard = LoopGuardMiddleware(config)
    assert guard.on_stop is None and guard.guard.config.settings.on_stop == "raise"
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardMiddleware(SMALL, on_stop="explode")  # type: ignore[arg-type]


def test_config_raise_is_the_run_default(poll_status: Any) -> None:
    """With ``loopwarden.onStop: raise`` a checkpointed agent raises instead of asking."""
    with ChatServer(stuck_then_answers) as server:
        agent = create_agent(
            openai_model(server),
            [poll_status],
            middleware=[LoopGuardMiddleware({**SMALL, "loopwarden": {"onStop": "raise"}})],
            checkpointer=InMemorySaver(),
        )
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.invoke(user(), THREAD)


@pytest.mark.parametrize("mode", MODES)
def test_ask_interrupts_with_the_question(mode: str, counter: Counter, poll_status: Any) -> None:
    """With a checkpointer the stop is put to the person through LangGraph's interrupt: the
    question, the three choices and the report; the stopped call has not run."""
    with ChatServer(stuck_then_answers) as server:
        paused = invoke(asking_agent(server, poll_status), mode, config=THREAD)
    (pending,) = paused["__interrupt__"]
    question = pending.value
    report = report_of(question["report"])
    assert question["question"] == ask_question(report)
    assert question["options"] == ask_options()
    assert (question["tool"], question["call_id"]) == ("poll_status", "c7")
    assert (report.code, report.calls, report.tokens) == ("global_circuit_breaker", 8, 8 * 15)
    assert len(counter.runs) == 5 and len(server.requests) == 8


@pytest.mark.parametrize("mode", MODES)
def test_ask_allow_once_runs_the_call_and_the_next_repeat_asks_again(
    mode: str, counter: Counter, poll_status: Any
) -> None:
    """ "Allow once": the refused call runs once and its result reaches the model; the rules
    kept their counts, so the next repeat is stopped and asked about again."""
    with ChatServer(stuck_then_answers) as server:
        agent = asking_agent(server, poll_status)
        invoke(agent, mode, config=THREAD)
        out = invoke(agent, mode, Command(resume={"choice": "allow_once"}), THREAD)
    assert len(counter.runs) == 6
    assert sent_tool_messages(server.requests[8])["c7"].startswith("pending")
    (again,) = out["__interrupt__"]
    assert again.value["call_id"] == "c8"
    assert (again.value["report"]["calls"], again.value["report"]["refused"]) == (9, 4)


def test_ask_stop_ends_the_run_as_answer_does(counter: Counter, poll_status: Any) -> None:
    """ "Stop" (a plain string is accepted): the run ends with the last answer, no tools
    offered, the report on the final message."""
    with ChatServer(stuck_then_answers) as server:
        agent = asking_agent(server, poll_status)
        agent.invoke(user(), THREAD)
        out = agent.invoke(Command(resume="stop"), THREAD)
    assert "__interrupt__" not in out
    last = out["messages"][-1]
    report = report_of(last.response_metadata["loopwarden"])
    assert last.content == f"{FINAL}\n\n{report.summary()}"
    assert "tools" not in server.requests[-1] and len(server.requests) == 9
    assert len(counter.runs) == 5


def test_ask_continue_gives_the_model_the_note(counter: Counter, poll_status: Any) -> None:
    """ "Continue" with a note: the model reads the note instead of the call's result, with
    its tools, and the run goes on to its own answer."""
    note = "Check job 43 instead."
    with ChatServer(stuck_then_answers) as server:
        agent = asking_agent(server, poll_status)
        agent.invoke(user(), THREAD)
        out = agent.invoke(Command(resume={"choice": "continue", "note": note}), THREAD)
    assert sent_tool_messages(server.requests[8])["c7"] == person_note(note)
    assert server.requests[8].get("tools")
    last = out["messages"][-1]
    assert last.content == UNDERSTOOD and "loopwarden" not in last.response_metadata
    assert len(counter.runs) == 5


def test_ask_again_after_an_answer_that_is_not_a_choice(poll_status: Any) -> None:
    """An answer that is none of the three is asked again, saying what was wrong."""
    with ChatServer(stuck_then_answers) as server:
        agent = asking_agent(server, poll_status)
        agent.invoke(user(), THREAD)
        out = agent.invoke(Command(resume={"choice": "maybe"}), THREAD)
        (again,) = out["__interrupt__"]
        assert "unknown answer 'maybe'" in again.value["error"]
        assert again.value["question"] and len(server.requests) == 8
        done = agent.invoke(Command(resume="stop"), THREAD)
    assert done["messages"][-1].content.startswith(FINAL)


def test_ask_without_a_checkpointer_answers(poll_status: Any) -> None:
    """``on_stop="ask"`` where nobody can be asked (no checkpointer) acts as ``answer``."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardMiddleware(SMALL, on_stop="ask")
        agent = create_agent(openai_model(server), [poll_status], middleware=[guard])
        out = agent.invoke(user())
    assert "__interrupt__" not in out
    assert out["messages"][-1].content.startswith(FINAL)


def test_the_post_compaction_abort_is_never_asked(poll_status: Any) -> None:
    """The post-compaction abort ends the run with a last answer even where a person could
    be asked; the model's last call gets the instruction and no tools."""
    llm = model(forever(("poll_status", {"job": "42"})))
    agent = create_agent(
        llm,
        [poll_status],
        middleware=[summarizer(), LoopGuardMiddleware()],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke(user(), THREAD)
    assert "__interrupt__" not in out
    last = out["messages"][-1]
    report = report_of(last.response_metadata["loopwarden"])
    assert report.code == "compaction_loop_persisted"
    assert last.content == fallback_answer(report)  # the scripted model only ever polls
    final_call = llm.seen[-1]
    assert isinstance(final_call[-1], HumanMessage)
    assert final_call[-1].content == final_answer_request(report)


def test_parallel_calls_get_one_question(counter: Counter, poll_status: Any) -> None:
    """Two calls per turn: only the stopped tool's call is asked about; the other one of
    the stopped turn ran or was answered as refused, and "stop" ends the run."""

    @tool
    def read_log(offset: int) -> str:
        """Read the build log from an offset."""
        return f"log {offset}"

    with ChatServer(poll_and_read) as server:
        agent = create_agent(
            openai_model(server),
            [poll_status, read_log],
            middleware=[LoopGuardMiddleware(PARALLEL)],
            checkpointer=InMemorySaver(),
        )
        paused = agent.invoke(user(), THREAD)
        (pending,) = paused["__interrupt__"]
        assert pending.value["tool"] == "poll_status"
        out = agent.invoke(Command(resume="stop"), THREAD)
    stopped_turn = pending.value["call_id"][1:]
    answers = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    sibling = answers[f"r{stopped_turn}"]
    if sibling.content != f"log {stopped_turn}":  # it came after the stop: refused, not run
        assert sibling.response_metadata["loopwarden"]["action"] == "refused"
    assert out["messages"][-1].content.startswith(FINAL)


def test_the_documented_last_answer(poll_status: Any) -> None:
    """docs/integrations-langchain.md's last answer, word for word: the model's text and the
    summary of a stop at the 31st call with the default thresholds."""
    with ChatServer(stuck_then_answers) as server:
        guard = LoopGuardMiddleware({"tools": {"loopDetection": {"enabled": True}}})
        agent = create_agent(openai_model(server), [poll_status], middleware=[guard])
        out = agent.invoke(user())
    assert out["messages"][-1].content == snippet("langchain-answer")


def test_docs_ask_example_runs(counter: Counter, poll_status: Any) -> None:
    """The documented ask loop: the question is printed, "continue" with a note, and the
    model's own answer ends the run."""
    code = snippet("langchain-ask")
    printed = io.StringIO()
    with ChatServer(stuck_then_answers) as server:
        namespace = {
            "model": openai_model(server),
            "poll_status": poll_status,
            "guard": LoopGuardMiddleware(SMALL),
            "create_agent": create_agent,
        }
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "langchain-ask", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("loopwarden stopped this run (rule global_circuit_breaker): ")
    assert lines[-1] == UNDERSTOOD and len(lines) == 2


def test_answer_keeps_a_structured_response(poll_status: Any) -> None:
    """With ``response_format``, the last call keeps the structured-output tool only; the
    structured response is the result and the report is on the final message."""
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Verdict(BaseModel):
        """Whether the job is done."""

        done: bool

    def structured(body: dict[str, Any]) -> Reply:
        names = [t["function"]["name"] for t in body.get("tools", [])]
        if "poll_status" not in names:
            return [("Verdict", {"done": False}, "v1")]
        return stuck_then_answers(body)

    with ChatServer(structured) as server:
        agent = create_agent(
            openai_model(server),
            [poll_status],
            middleware=[LoopGuardMiddleware(SMALL)],
            response_format=ToolStrategy(Verdict),
        )
        out = agent.invoke(user())
    assert out["structured_response"] == Verdict(done=False)
    names = [t["function"]["name"] for t in server.requests[-1]["tools"]]
    assert names == ["Verdict"]
    final = [m for m in out["messages"] if isinstance(m, AIMessage)][-1]
    assert [c["name"] for c in final.tool_calls] == ["Verdict"]
    assert final.response_metadata["loopwarden"]["code"] == "global_circuit_breaker"


def test_a_question_left_unanswered_is_closed_by_the_next_message(poll_status: Any) -> None:
    """The caller sends a new message instead of an answer: the asked call gets the stop's
    message, so a provider that rejects unanswered calls accepts the thread, and the new
    invocation is a new run."""

    def provider_like(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        called = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
        answered = {m["tool_call_id"] for m in messages if m.get("role") == "tool"}
        if called - answered:
            return (400, f"tool calls without answers: {sorted(called - answered)}")
        if messages[-1].get("role") == "user" and "start over" in messages[-1]["content"]:
            return "Starting over."
        return stuck_then_answers(body)

    with ChatServer(provider_like) as server:
        guard = LoopGuardMiddleware(SMALL)
        agent = create_agent(
            openai_model(server), [poll_status], middleware=[guard], checkpointer=InMemorySaver()
        )
        assert "__interrupt__" in agent.invoke(user(), THREAD)
        out = agent.invoke(user("Please start over."), THREAD)
    assert out["messages"][-1].content == "Starting over."
    asked = next(m for m in tool_messages(out["messages"]) if m.tool_call_id == "c7")
    assert asked.status == "error" and asked.content.startswith("CRITICAL: the loopwarden")
    assert len(guard.guard.store) == 0 and not guard._asking


def test_an_answer_reaches_the_run_through_a_shared_store(
    counter: Counter, poll_status: Any, tmp_path: Path
) -> None:
    """The graph is resumed through another middleware object (an agent built again, or
    another process) on the same SQLite store: the stopped run is found there, the
    question is answered, and "allow once" runs the call."""
    store = f"sqlite:///{tmp_path / 'lw.db'}"
    saver = InMemorySaver()
    with ChatServer(stuck_then_answers) as server:

        def build() -> Any:
            guard = LoopGuardMiddleware(SMALL, store=store)
            return create_agent(
                openai_model(server), [poll_status], middleware=[guard], checkpointer=saver
            )

        assert "__interrupt__" in build().invoke(user(), THREAD)
        out = build().invoke(Command(resume={"choice": "allow_once"}), THREAD)
    assert len(counter.runs) == 6
    (again,) = out["__interrupt__"]
    # The refusal seen again by the new middleware is counted once more (documented).
    assert again.value["call_id"] == "c8" and again.value["report"]["calls"] == 10
