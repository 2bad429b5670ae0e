"""CrewAI integration: what is specific to CrewAI beyond the shared scenarios.

CrewAI has no offline test model: every test drives its real OpenAI client against a
scripted chat-completions server on loopback (``_chat_server.py``).
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("crewai")  # imported by conftest.py first, with its environment set

from crewai import LLM, Agent, Crew, Task
from crewai.events import crewai_event_bus
from crewai.hooks import (
    get_after_tool_call_hooks,
    get_before_llm_call_hooks,
    get_before_tool_call_hooks,
    register_before_tool_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.hooks.dispatch import HookAborted
from crewai.tools import tool
from crewai.tools.tool_failure import ToolExecutionFailedError

import loopwarden as lw
from loopwarden import stopping
from loopwarden.integrations import _base
from loopwarden.integrations.crewai import LoopGuardHooks
from tests._snippets import snippet
from tests.integrations._chat_server import ChatServer, tool_messages
from tests.integrations._drivers_more import CREWAI_WARNINGS, crewai_repeat_limit_lifted
from tests.integrations._onstop import FINAL, UNDERSTOOD, report_of, stuck_then_answers
from tests.integrations._shared import BLOCKED, SMALL, WARNING, Events

pytestmark = [pytest.mark.filterwarnings(w) for w in CREWAI_WARNINGS]

DEFAULTS = {"tools": {"loopDetection": {"enabled": True}}}


def same_call(tool_name: str, args: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """A model that makes the same call every turn (ids c1, c2, ...: one per turn)."""

    def reply(body: dict[str, Any]) -> Any:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
        return [(tool_name, args, f"c{turn}")]

    return reply


@pytest.fixture(name="server")
def fixture_server() -> Iterator[ChatServer]:
    server = ChatServer(same_call("poll_status", {"job": "42"}))
    with server:
        yield server


@pytest.fixture(name="hooks")
def fixture_hooks() -> Iterator[list[LoopGuardHooks]]:
    """Installed adapters are uninstalled after the test: CrewAI's hooks are process-wide."""
    made: list[LoopGuardHooks] = []
    yield made
    for adapter in made:
        adapter.uninstall()


def agent_for(server: ChatServer, fn: Callable[..., Any], role: str = "poller") -> Agent:
    return Agent(
        role=role,
        goal="Find out whether the job is done",
        backstory="You check jobs.",
        tools=[tool(fn)],
        llm=LLM(model="openai/gpt-4o-mini", base_url=server.url, api_key="test"),
        max_iter=60,
    )


def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


def test_docs_quickstart_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], hooks: list[Any]
) -> None:
    """docs/integrations-crewai.md: the setup, run as shown against a scripted model API: a
    search that keeps finding nothing is warned at the 5th call, blocked at the 6th and 7th,
    and stopped at the 8th; the model's last answer, asked without tools, is the answer."""
    code = snippet("crewai-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 20
    searching = same_call("search_docs", {"query": "refund policy"})
    with ChatServer(lambda body: searching(body) if body.get("tools") else FINAL) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        namespace: dict[str, Any] = {"__name__": "docs_snippet"}
        capsys.readouterr()
        try:
            exec(compile(code, "crewai-quickstart", "exec"), namespace)
        finally:
            hooks.append(namespace["guard"])
        requests = list(server.requests)

    out = capsys.readouterr().out.splitlines()  # CrewAI may print its panels there too
    printed = [line for line in out if line.startswith("stopped by loopwarden:")]
    assert printed == ["stopped by loopwarden: unknown_tool_repeat search_docs 8"] or (
        len(printed) == 1 and printed[0].endswith(" search_docs 8")
    )
    assert len(requests) == 9  # one last call after the stop
    assert "tools" not in requests[-1]
    assert str(namespace["answer"]).startswith(FINAL + "\n\nloopwarden stopped this run")
    answered = tool_messages(requests[-2])
    assert answered["c5"].startswith("No matches found\n\nWARNING: search_docs has been called 5")
    assert answered["c6"].startswith(BLOCKED) and answered["c7"].startswith(BLOCKED)


def test_crewai_stops_identical_polls_itself_first(server: ChatServer, hooks: list[Any]) -> None:
    """CrewAI's own limit (5 identical calls with identical results) ends a polling loop
    before loopwarden's thresholds for polls (10/20/30) are reached, as documented."""
    events = Events()
    hooks.append(LoopGuardHooks(DEFAULTS, on_event=events).install())

    with pytest.raises(ToolExecutionFailedError, match="5 times"):
        agent_for(server, poll_status).kickoff("Is job 42 done?")

    assert len(server.requests) == 5
    assert events.items == []


def test_stop_is_both_loopwarden_and_crewai_stop(server: ChatServer, hooks: list[Any]) -> None:
    """The stop CrewAI raises out of kickoff is loopwarden's LoopAbort and CrewAI's HookAborted."""
    hooks.append(LoopGuardHooks(SMALL, on_stop="raise").install())
    agent = agent_for(server, poll_status)

    with pytest.raises(lw.LoopAbort) as stopped:
        agent.kickoff("Is job 42 done?")

    stop = stopped.value
    assert isinstance(stop, HookAborted) and isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.tool_name, stop.count) == ("poll_status", 7)
    assert stop.reason == stop.message and str(stop) == stop.message
    assert stop.to_dict()["tool"] == "poll_status"


def test_crew_tasks_are_runs_of_their_own(server: ChatServer, hooks: list[Any]) -> None:
    """In a crew, each task an agent works on is a run: two tasks of the same agent with
    four identical calls each are warned once each (at the 4th), in two runs of one session."""
    events = Events()
    hooks.append(LoopGuardHooks(SMALL, on_event=events).install())
    turns = iter(range(1000))

    def reply(body: dict[str, Any]) -> Any:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done == 4:
            return "Job 42 is still pending."
        return [("poll_status", {"job": "42"}, f"t{next(turns)}")]

    server.reply = reply
    agent = agent_for(server, poll_status)
    tasks = [
        Task(description=f"Check job 42 ({n}).", expected_output="The status.", agent=agent)
        for n in (1, 2)
    ]

    Crew(agents=[agent], tasks=tasks).kickoff()

    assert events.actions() == ["warn", "warn"]
    assert len({e.run_id for e in events.items}) == 2
    assert len({e.session_id for e in events.items}) == 1
    assert {e.agent_id for e in events.items} == {"poller"}


def test_tool_exceptions_are_recorded_as_errors(
    server: ChatServer, hooks: list[Any], tmp_path: Path
) -> None:
    """CrewAI words a tool's exception as text; loopwarden records it as the call's error."""
    record = tmp_path / "run.jsonl"
    adapter = LoopGuardHooks(SMALL, run_record=record)
    hooks.append(adapter.install())

    def deploy(target: str) -> str:
        """Deploy to a target."""
        raise RuntimeError(f"no route to {target}")

    answers = iter([[("deploy", {"target": "eu"}, "d1")], "Deploy failed."])
    server.reply = lambda body: next(answers)
    agent_for(server, deploy).kickoff("Deploy.")
    adapter.guard.close()

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    outcomes = [line for line in lines if line["type"] == "outcome"]
    assert [(o["call_id"], o["is_error"]) for o in outcomes] == [("d1", True)]


def test_uninstall_removes_only_loopwardens_hooks(server: ChatServer, hooks: list[Any]) -> None:
    """After uninstall no loopwarden hook is left (another hook stays), and runs are ended."""

    def own_hook(context: Any) -> None:
        return None

    register_before_tool_call_hook(own_hook)
    try:
        events = Events()
        adapter = LoopGuardHooks(SMALL, on_event=events).install()
        hooks.append(adapter)
        before = (
            len(get_before_tool_call_hooks()),
            len(get_after_tool_call_hooks()),
            len(get_before_llm_call_hooks()),
        )
        answers = iter([[("poll_status", {"job": "42"}, f"c{n}")] for n in range(4)] + ["done"])
        server.reply = lambda body: next(answers)
        agent_for(server, poll_status).kickoff("Is job 42 done?")
        crewai_event_bus.flush()
        assert events.actions() == ["warn"]
        assert len(adapter._runs) == 0  # CrewAI's completion event ended the run

        adapter.uninstall()

        after = (
            len(get_before_tool_call_hooks()),
            len(get_after_tool_call_hooks()),
            len(get_before_llm_call_hooks()),
        )
        assert after == (before[0] - 1, before[1] - 1, before[2] - 1)
        assert own_hook in get_before_tool_call_hooks()
        answers = iter([[("poll_status", {"job": "42"}, f"d{n}")] for n in range(4)] + ["done"])
        agent_for(server, poll_status).kickoff("Is job 42 done?")
        assert events.actions() == ["warn"]  # nothing more: loopwarden is gone
    finally:
        unregister_before_tool_call_hook(own_hook)


def test_a_warning_reaches_the_model_in_its_tool_message(
    server: ChatServer, hooks: list[Any]
) -> None:
    """The note is appended to the tool message CrewAI sends the model next."""
    hooks.append(LoopGuardHooks(SMALL).install())
    answers = iter([[("poll_status", {"job": "42"}, f"c{n}")] for n in range(4)] + ["done"])
    server.reply = lambda body: next(answers)

    agent_for(server, poll_status).kickoff("Is job 42 done?")

    answered = tool_messages(server.requests[-1])
    assert answered["c0"] == answered["c1"] == answered["c2"] == "pending"
    assert answered["c3"].startswith("pending\n\n" + WARNING + " 3 times")


# -- when loopwarden stops the run (onStop) ----------------------------------------------------
@pytest.fixture(name="stuck")
def fixture_stuck() -> Iterator[ChatServer]:
    """A model that polls job 42 while offered tools and answers when offered none, with
    CrewAI's own stop at the 5th identical call lifted (loopwarden's thresholds decide)."""
    with ChatServer(stuck_then_answers) as server, crewai_repeat_limit_lifted():
        yield server


def report_in(found: dict[str, Any] | None) -> stopping.StopReport:
    """The StopReport behind ``last_stop``'s dict, checked to be whole."""
    assert found is not None
    report = dataclasses.replace(report_of(found), limit_name="max_iter")
    assert found["summary"] == report.summary()
    return report


def test_answer_is_the_default_and_the_last_call_has_no_tools(
    stuck: ChatServer, hooks: list[Any]
) -> None:
    """By default a stop ends the run with one more model call, sent no tools and told why;
    its text plus the summary is kickoff's answer, and last_stop gives the report."""
    adapter = LoopGuardHooks(SMALL)
    hooks.append(adapter.install())
    agent = agent_for(stuck, poll_status)

    out = agent.kickoff("Is job 42 done?")

    report = report_in(adapter.last_stop(agent))
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.turn_limit, report.refused) == (60, 3)
    assert report.turns is not None and report.saved_turns == 60 - report.turns
    assert str(out) == f"{FINAL}\n\n{report.summary()}"
    last = stuck.requests[-1]
    assert "tools" not in last  # the OpenAI client sends no tools at all
    assert last["messages"][-1] == {
        "role": "user",
        "content": stopping.final_answer_request(report),
    }
    assert all(body.get("tools") for body in stuck.requests[:-1])
    assert tool_messages(last)["c7"] == report.message  # the stopped call's answer
    # The instruction is not kept in the agent's messages.
    assert stopping.final_answer_request(report) not in str(out.messages)


def test_a_crew_task_output_is_the_last_answer(stuck: ChatServer, hooks: list[Any]) -> None:
    """In a crew, the task's output (``TaskOutput.raw``, the crew's ``raw``) is the last
    answer with the summary."""
    adapter = LoopGuardHooks(SMALL)
    hooks.append(adapter.install())
    agent = agent_for(stuck, poll_status)
    task = Task(description="Check job 42.", expected_output="The status.", agent=agent)

    out = Crew(agents=[agent], tasks=[task]).kickoff()

    report = report_in(adapter.last_stop(agent))
    assert out.raw == task.output.raw == f"{FINAL}\n\n{report.summary()}"
    assert "tools" not in stuck.requests[-1]


def test_answer_falls_back_when_the_model_still_calls_tools(
    server: ChatServer, hooks: list[Any]
) -> None:
    """A model that asks for a tool in its last call gets none run: the answer is the
    fallback text, never an exception."""
    adapter = LoopGuardHooks(SMALL, on_stop="answer")
    hooks.append(adapter.install())
    ran: list[str] = []

    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        ran.append(job)
        return "pending"

    agent = agent_for(server, poll_status)
    with crewai_repeat_limit_lifted():
        out = agent.kickoff("Is job 42 done?")

    report = report_in(adapter.last_stop(agent))
    assert str(out) == stopping.fallback_answer(report)
    assert "tools" not in server.requests[-1]
    assert len(server.requests) == report.calls + 1  # the last call, and no more
    assert len(ran) == report.calls - report.refused


def test_raise_comes_from_the_config(stuck: ChatServer, hooks: list[Any]) -> None:
    """``loopwarden.onStop: raise`` in the config raises, when no argument says otherwise."""
    hooks.append(LoopGuardHooks({**SMALL, "loopwarden": {"onStop": "raise"}}).install())
    with pytest.raises(lw.CircuitBreakerTripped):
        agent_for(stuck, poll_status).kickoff("Is job 42 done?")
    assert all(body.get("tools") for body in stuck.requests)


def ask_run(
    stuck: ChatServer, hooks: list[Any], monkeypatch: pytest.MonkeyPatch, typed: str
) -> tuple[Any, LoopGuardHooks, list[str], Agent]:
    """A kickoff with ``on_stop="ask"`` whose person types ``typed`` on the console: its
    output, the adapter, the calls that ran and the agent."""
    adapter = LoopGuardHooks(SMALL, on_stop="ask")
    hooks.append(adapter.install())
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    ran: list[str] = []

    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        ran.append(job)
        return "pending"

    def reply(body: dict[str, Any]) -> Any:
        if body.get("tools") and ran.count("42") == 6:  # after the allowed call's result
            return "Job 42 is still pending."
        return stuck_then_answers(body)

    stuck.reply = reply
    agent = agent_for(stuck, poll_status)
    return agent.kickoff("Is job 42 done?"), adapter, ran, agent


def test_ask_stop_ends_with_the_last_answer(
    stuck: ChatServer,
    hooks: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ask``: CrewAI's human input shows the person the question on the console; "stop"
    ends the run as ``answer`` does."""
    out, adapter, ran, agent = ask_run(stuck, hooks, monkeypatch, "stop\n")
    shown = capsys.readouterr().out
    assert "loopwarden stopped this run (rule global_circuit_breaker)" in shown
    assert _base.ASK_ANSWERS in shown
    assert len(ran) == 5 and "tools" not in stuck.requests[-1]
    assert str(out) == f"{FINAL}\n\n{report_in(adapter.last_stop(agent)).summary()}"


def test_ask_allow_once_runs_the_call_once(
    stuck: ChatServer, hooks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "allow once": the refused call runs once, and its result reaches the model."""
    out, adapter, ran, agent = ask_run(stuck, hooks, monkeypatch, "allow once\n")
    assert len(ran) == 6 and adapter.last_stop(agent) is None
    assert tool_messages(stuck.requests[-1])["c7"].startswith("pending")
    assert str(out) == "Job 42 is still pending."


def test_ask_continue_gives_the_model_the_note(
    stuck: ChatServer, hooks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "continue" with a note: the model reads the note instead of the call's result, keeps
    its tools, and the run goes on."""
    out, adapter, ran, agent = ask_run(
        stuck, hooks, monkeypatch, "continue: check job 43 instead\n"
    )
    assert len(ran) == 5
    note = tool_messages(stuck.requests[-1])["c7"]
    assert "decided the run should go on" in note and "check job 43 instead" in note
    assert stuck.requests[-1].get("tools")
    assert str(out) == UNDERSTOOD and adapter.last_stop(agent) is None


def test_ask_again_after_an_answer_it_does_not_understand(
    stuck: ChatServer,
    hooks: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An answer that is none of the three is asked again, saying what was wrong; a console
    that has no more input ends the run as ``answer`` does."""
    out, adapter, ran, agent = ask_run(stuck, hooks, monkeypatch, "maybe\n")
    shown = capsys.readouterr().out
    assert "loopwarden did not understand the answer 'maybe'." in shown
    assert str(out) == f"{FINAL}\n\n{report_in(adapter.last_stop(agent)).summary()}"
    assert len(ran) == 5


def test_a_task_with_human_input_asks_by_default(
    stuck: ChatServer,
    hooks: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A task with ``human_input=True`` has a person at the console: unset, a stop asks."""
    adapter = LoopGuardHooks(SMALL)
    hooks.append(adapter.install())
    monkeypatch.setattr("sys.stdin", io.StringIO("stop\n\n"))  # then CrewAI's own review
    agent = agent_for(stuck, poll_status)
    task = Task(
        description="Check job 42.", expected_output="The status.", agent=agent, human_input=True
    )
    out = Crew(agents=[agent], tasks=[task]).kickoff()
    assert "loopwarden stopped this run (rule global_circuit_breaker)" in capsys.readouterr().out
    assert out.raw.startswith(FINAL + "\n\nloopwarden stopped this run")


def test_text_mode_agents_answer_in_crewais_format(hooks: list[Any]) -> None:
    """An LLM without native function calling (CrewAI's text "Action:" format): the last
    answer is what CrewAI parses as the final answer, with the summary; a reply that still
    asks for a tool gives the fallback."""

    def reply(body: dict[str, Any]) -> Any:
        last = str(body["messages"][-1]["content"])
        if "No tools are available any more" in last:
            return f"Thought: I have to stop.\nFinal Answer: {FINAL}"
        return 'Thought: I need to check.\nAction: poll_status\nAction Input: {"job": "42"}'

    adapter = LoopGuardHooks(SMALL)
    hooks.append(adapter.install())
    with ChatServer(reply) as server, crewai_repeat_limit_lifted():
        agent = agent_for(server, poll_status)
        # The model's client says it has no function calling: CrewAI's text mode.
        object.__setattr__(agent.llm, "supports_function_calling", lambda: False)
        out = agent.kickoff("Is job 42 done?")
        requests = list(server.requests)
    report = report_in(adapter.last_stop(agent))
    assert str(out) == f"{FINAL}\n\n{report.summary()}"
    assert all("tools" not in body for body in requests)
    assert requests[-1]["messages"][-1]["content"] == stopping.final_answer_request(report)

    def stubborn(body: dict[str, Any]) -> Any:
        return 'Thought: I need to check.\nAction: poll_status\nAction Input: {"job": "42"}'

    with ChatServer(stubborn) as server, crewai_repeat_limit_lifted():
        agent = agent_for(server, poll_status)
        object.__setattr__(agent.llm, "supports_function_calling", lambda: False)
        out = agent.kickoff("Is job 42 done?")
        calls = len(server.requests)
    report = report_in(adapter.last_stop(agent))
    assert str(out) == stopping.fallback_answer(report)
    assert calls == report.calls + 1  # the last call, and no more


def test_a_structured_task_output_keeps_the_models_text(
    stuck: ChatServer, hooks: list[Any]
) -> None:
    """A task with ``output_pydantic`` gets the model's last answer as written (CrewAI parses
    it); the report is in ``last_stop`` only."""
    from pydantic import BaseModel

    class Status(BaseModel):
        job: str
        state: str

    answer = '{"job": "42", "state": "pending"}'
    stuck.reply = lambda body: stuck_then_answers(body) if body.get("tools") else answer
    adapter = LoopGuardHooks(SMALL)
    hooks.append(adapter.install())
    agent = agent_for(stuck, poll_status)
    task = Task(
        description="Check job 42.",
        expected_output="The status.",
        agent=agent,
        output_pydantic=Status,
    )
    out = Crew(agents=[agent], tasks=[task]).kickoff()
    assert out.pydantic == Status(job="42", state="pending")
    assert task.output is not None and task.output.raw == answer  # no summary appended
    assert report_in(adapter.last_stop(agent)).code == "global_circuit_breaker"
