"""smolagents integration, driven through real agents and smolagents' own OpenAI client.

The model is a scripted chat-completions server on loopback (``_chatserver.py``):
``OpenAIServerModel`` sends it every request over HTTP, and the tests read what the
model was sent from the requests it kept. What every framework shares is in
``test_scenarios.py``; this file holds what is particular to smolagents.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("smolagents")
pytest.importorskip("openai")

from smolagents import CodeAgent, OpenAIServerModel, Tool, ToolCallingAgent, UserInputTool
from smolagents.agents import RunResult
from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.memory import FinalAnswerStep
from smolagents.monitoring import LogLevel

import loopwarden as lw
from loopwarden.integrations._base import ASK_ANSWERS, text_question
from loopwarden.integrations.smolagents import LoopGuardForSmolagents
from loopwarden.stopping import StopReport, fallback_answer, final_answer_request, person_note
from tests._snippets import snippet
from tests.integrations._chatserver import ChatServer
from tests.integrations._onstop import FINAL, UNDERSTOOD, report_of
from tests.integrations._shared import BLOCKED, REPEATED, SMALL, WARNING, Counter, Events

Reply = Callable[[int, dict[str, Any]], dict[str, Any]]
CODE_CONFIG = {  # warningThreshold 4: two interleaved tools at 3 already look like a ping-pong
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 4,
            "criticalThreshold": 6,
            "globalCircuitBreakerThreshold": 8,
        }
    }
}


class PollStatus(Tool):
    name = "poll_status"
    description = "Check whether a job has finished."
    inputs = {"job": {"type": "string", "description": "the job id"}}
    output_type = "string"

    def __init__(self, counter: Counter, result: Any = "pending") -> None:
        super().__init__()
        self.counter = counter
        self.result = result

    def forward(self, job: str) -> Any:
        self.counter.hit(job)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class ReadLog(Tool):
    name = "read_log"
    description = "Read the build log from an offset."
    inputs = {"offset": {"type": "integer", "description": "where to start"}}
    output_type = "string"

    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def forward(self, offset: int) -> str:
        self.counter.hit(f"read:{offset}")
        return f"log from {offset}: compiling"


@contextlib.contextmanager
def model_for(reply: Reply) -> Iterator[tuple[OpenAIServerModel, ChatServer]]:
    """smolagents' OpenAI client pointed at a scripted model; ``reply(turn, body)``."""
    turns = itertools.count()
    with ChatServer(lambda body: reply(next(turns), body)) as server:
        yield OpenAIServerModel("scripted", api_base=server.url, api_key="none"), server


def calling(*calls: tuple[str, dict[str, Any]], turns: int | None = None) -> Reply:
    """The same tool calls every turn (ids c0, c1, ... or c0a, c0b ...), then ``final_answer``."""

    def reply(turn: int, body: dict[str, Any]) -> dict[str, Any]:
        if turns is not None and turn >= turns:
            return {"tool_calls": [("final_answer", {"answer": "done"}, f"f{turn}")]}
        suffix = "ab" if len(calls) > 1 else ""
        ids = [f"c{turn}{s}" for s in suffix] or [f"c{turn}"]
        return {"tool_calls": [(n, a, i) for (n, a), i in zip(calls, ids, strict=True)]}

    return reply


def coding(code: Callable[[int], str | None]) -> Reply:
    """A code-writing model: ``code(turn)`` is the step's code, ``None`` the final answer."""

    def reply(turn: int, body: dict[str, Any]) -> dict[str, Any]:
        text = code(turn)
        if text is None:
            text = "final_answer('done')"
        return {"content": f"Thought: go on.\n<code>\n{text}\n</code>"}

    return reply


def tool_agent(model: Any, tools: list[Any], **kwargs: Any) -> Any:
    kwargs.setdefault("name", "poller")
    kwargs.setdefault("max_steps", 60)
    return ToolCallingAgent(tools=tools, model=model, verbosity_level=LogLevel.OFF, **kwargs)


def code_agent(model: Any, tools: list[Any], **kwargs: Any) -> Any:
    kwargs.setdefault("name", "poller")
    return CodeAgent(tools=tools, model=model, max_steps=60, verbosity_level=LogLevel.OFF, **kwargs)


def sent(server: ChatServer) -> list[str]:
    """Each request's last user message: what the model read about the previous step."""
    texts = []
    for request in server.requests[1:]:
        last = request["messages"][-1]
        content = last["content"]
        texts.append(content if isinstance(content, str) else content[0]["text"])
    return texts


# -- ToolCallingAgent ---------------------------------------------------------------------
def test_docs_example_runs(counter: Counter) -> None:
    """The documented example, with a model that never stops polling: loopwarden ends it,
    and the model's last answer (no tools) is the run's answer."""
    code = snippet("smolagents-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    printed = io.StringIO()
    polls = calling(("poll_status", {"job": "42"}))

    def reply(turn: int, body: dict[str, Any]) -> dict[str, Any]:
        return polls(turn, body) if body.get("tools") else {"content": FINAL}

    with model_for(reply) as (model, server):
        namespace: dict[str, Any] = {"model": model, "tools": [PollStatus(counter)]}
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "smolagents-quickstart", "exec"), namespace)
    # smolagents prints its own step log to stdout (the snippet keeps its verbosity).
    last = printed.getvalue().strip().splitlines()[-1]
    match = re.fullmatch(r"stopped: (\w+) poll_status (\d+)", last)
    assert match is not None, printed.getvalue()[-3000:]
    # Blocked calls never ran; after the stop the model was asked once more, without tools.
    assert len(counter.runs) < int(match.group(2)) < len(server.requests)
    assert len(server.requests) == int(match.group(2)) + 2
    assert "tools" not in server.requests[-1]
    assert str(namespace["answer"]).startswith(FINAL + "\n\nloopwarden stopped this run")


def test_streamed_outputs_are_guarded_alike(counter: Counter, events: Events) -> None:
    """``stream_outputs=True`` (the client streams the model's answer) changes nothing."""
    adapter = LoopGuardForSmolagents(SMALL, on_event=events, on_stop="raise")
    with model_for(calling(("poll_status", {"job": "42"}))) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)], stream_outputs=True))
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run("Is job 42 done?")
    assert stop.value.count == 7
    assert all(request.get("stream") for request in server.requests)
    got = sent(server)
    assert got[3].startswith("Observation:\npending\n\n" + WARNING + " 3 times")
    assert got[5].startswith("Observation:\n" + BLOCKED)
    assert len(counter.runs) == 5 and len(server.requests) == 8
    assert events.actions() == ["warn", "block", "block", "stop"]


def test_a_result_that_is_not_text_gets_the_note_too(counter: Counter) -> None:
    """A dict result: the observation is its text, with the warning after it."""
    tool = PollStatus(counter, result={"status": "pending"})
    tool.output_type = "object"
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(calling(("poll_status", {"job": "42"}), turns=4)) as (model, server):
        assert adapter.protect(tool_agent(model, [tool])).run("go") == "done"
    got = sent(server)
    assert got[2] == "Observation:\n{'status': 'pending'}"
    assert got[3].startswith("Observation:\n{'status': 'pending'}\n\n" + WARNING + " 3 times")


def test_failing_tool_is_warned_then_blocked(counter: Counter, events: Events) -> None:
    """The same failure over and over: the error is the outcome, the warning comes with the
    step's error, and the call is blocked (not run) from the 5th time."""
    tool = PollStatus(counter, result=ConnectionError("connection refused"))
    adapter = LoopGuardForSmolagents(SMALL, on_event=events, on_stop="raise")
    reply = calling(("poll_status", {"job": "42"}))
    with model_for(reply) as (model, server), pytest.raises(lw.CircuitBreakerTripped):
        adapter.protect(tool_agent(model, [tool])).run("go")
    got = sent(server)
    assert "connection refused" in got[0] and REPEATED not in got[0]
    # smolagents sends consecutive failed steps as one user message: read the newest part.
    warned = got[3][got[3].rindex("Observation:\n") :]
    assert warned.startswith("Observation:\n" + REPEATED + " 3 times")
    assert warned.index("Error:\nError executing tool 'poll_status'") > 0
    assert "connection refused" in warned
    assert got[5].startswith("Observation:\n" + BLOCKED)
    assert len(counter.runs) == 5
    assert events.actions() == ["warn", "block", "block", "stop"]


def test_the_same_unknown_call_is_caught_by_consecutive_repeat(counter: Counter) -> None:
    """The docs page: with the default thresholds, the same call of a missing tool is warned
    at the 5th (in the step's observation), blocked at the 6th and 7th, and stopped at the
    8th as unknown_tool_repeat."""
    adapter = LoopGuardForSmolagents(
        {"tools": {"loopDetection": {"enabled": True}}}, on_stop="raise"
    )
    reply = calling(("no_such_tool", {"job": "42"}))
    with model_for(reply) as (model, server), pytest.raises(lw.CircuitBreakerTripped) as stopped:
        adapter.protect(tool_agent(model, [PollStatus(counter)])).run("go")
    assert (stopped.value.code, stopped.value.tool_name, stopped.value.count) == (
        "unknown_tool_repeat",
        "no_such_tool",
        8,
    )
    got = sent(server)
    assert len(got) == 7 and counter.runs == []
    # smolagents sends consecutive failed steps as one user message: read the newest part.
    newest = [
        text[text.rindex("Observation:\n") :] if "Observation:\n" in text else text for text in got
    ]
    warned = [
        n + 1
        for n, text in enumerate(newest)
        if "the tool 'no_such_tool' is not available" in text and BLOCKED not in text
    ]
    assert warned == [5]
    assert "Unknown tool no_such_tool" in got[4]
    assert [
        n + 1 for n, text in enumerate(newest) if text.startswith("Observation:\n" + BLOCKED)
    ] == [6, 7]


def test_each_run_starts_afresh(counter: Counter, events: Events) -> None:
    """A second ``run`` of the same agent (``reset=False`` keeps its memory) has its own counts."""
    adapter = LoopGuardForSmolagents(SMALL, on_event=events)

    def reply(turn: int, body: dict[str, Any]) -> dict[str, Any]:
        if turn in (4, 9):
            return {"tool_calls": [("final_answer", {"answer": "done"}, f"f{turn}")]}
        return {"tool_calls": [("poll_status", {"job": "42"}, f"c{turn}")]}

    with model_for(reply) as (model, _):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        assert agent.run("first") == "done"
        assert agent.run("second", reset=False) == "done"
    assert events.actions() == ["warn", "warn"]  # the 4th call of each run, not a block
    assert len({e.run_id for e in events.items}) == 2
    assert len(adapter.guard.store) == 0  # both runs' state was dropped at their end


def test_managed_agent_runs_are_guarded(counter: Counter, events: Events) -> None:
    """A managed agent is protected with its manager: its own loop is stopped inside its own
    run, and the manager reads that failure as the team member's answer and goes on."""
    adapter = LoopGuardForSmolagents(SMALL, on_event=events)
    manager_turns = itertools.count()

    def reply(turn: int, body: dict[str, Any]) -> dict[str, Any]:
        tools = {t["function"]["name"] for t in body.get("tools", [])}
        if "worker" in tools:  # the manager
            if next(manager_turns) == 0:
                return {"tool_calls": [("worker", {"task": "Is job 42 done?"}, "m0")]}
            return {"tool_calls": [("final_answer", {"answer": "done"}, "m1")]}
        return {"tool_calls": [("poll_status", {"job": "42"}, f"w{turn}")]}

    with model_for(reply) as (model, server):
        worker = tool_agent(model, [PollStatus(counter)], name="worker", description="Polls jobs.")
        manager = adapter.protect(tool_agent(model, [], name="manager", managed_agents=[worker]))
        assert manager.run("Is job 42 done?") == "done"
    assert len(counter.runs) == 5
    assert [(e.agent_id, e.action) for e in events.items] == [
        ("worker", "warn"),
        ("worker", "block"),
        ("worker", "block"),
        ("worker", "stop"),
    ]
    answer = sent(server)[-1]  # the manager's view of its call of the worker
    assert "worker" in answer and "global circuit breaker stopped this run" in answer


def test_protect_is_idempotent_and_refuses_what_it_cannot_guard(counter: Counter) -> None:
    """Protecting twice changes nothing; another guard, an unknown agent type or a CodeAgent
    whose code runs in a remote sandbox is refused with a clear error."""
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(calling(("poll_status", {"job": "42"}), turns=4)) as (model, server):
        agent = adapter.protect(adapter.protect(tool_agent(model, [PollStatus(counter)])))
        agent.run("go")
        assert sent(server)[3].count(WARNING) == 1  # one note, from one guard
        with pytest.raises(ValueError, match="already protected"):
            LoopGuardForSmolagents(SMALL).protect(agent)

        class Remote(PythonExecutor):  # type: ignore[misc]
            def __call__(self, code_action: str) -> CodeOutput:
                raise AssertionError("not run")

            def send_tools(self, tools: dict[str, Any]) -> None:
                return None

            def send_variables(self, variables: dict[str, Any]) -> None:
                return None

        remote = code_agent(model, [PollStatus(counter)], executor=Remote())
        with pytest.raises(TypeError, match="remote sandbox"):
            adapter.protect(remote)
        with pytest.raises(TypeError, match="ToolCallingAgent and CodeAgent"):
            adapter.protect(object())  # type: ignore[arg-type]


def test_trimming_that_keeps_every_step_is_not_a_compaction(counter: Counter, lw_logs: Any) -> None:
    """A step callback that only edits old observations (as smolagents' docs do for
    screenshots) does not arm the post-compaction guard; one that drops steps does."""

    def shorten(step: Any, agent: Any = None) -> None:
        for old in agent.memory.steps[:-1]:
            if getattr(old, "observations", None):
                old.observations = old.observations[:3]

    adapter = LoopGuardForSmolagents(None, on_stop="raise")
    with model_for(calling(("poll_status", {"job": "42"}), turns=6)) as (model, _):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)], step_callbacks=[shorten]))
        assert agent.run("go") == "done"
    assert "post-compaction guard armed" not in lw_logs.text

    def drop(step: Any, agent: Any = None) -> None:
        if step.step_number == 2:
            del agent.memory.steps[1:]

    with model_for(calling(("poll_status", {"job": "42"}))) as (model, _):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)], step_callbacks=[drop]))
        with pytest.raises(lw.CompactionLoopPersisted):
            agent.run("go")
    assert lw_logs.text.count("post-compaction guard armed for 3 attempts") == 1


# -- CodeAgent ---------------------------------------------------------------------------------
def test_code_calls_in_one_step_are_each_guarded_and_paired(
    counter: Counter, tmp_path: Path
) -> None:
    """Two calls per code block: each is checked and recorded under its own id
    (``call_<step>.<n>``); a blocked call stops the code there, so the call after it
    does not run, and the model reads why."""
    record = tmp_path / "run.jsonl"
    adapter = LoopGuardForSmolagents(
        CODE_CONFIG, run_record=record, log_params=True, on_stop="raise"
    )

    def code(turn: int) -> str:
        return f"print(poll_status(job='42'))\nprint(read_log(offset={turn * 100}))"

    with model_for(coding(code)) as (model, server):
        agent = adapter.protect(code_agent(model, [PollStatus(counter), ReadLog(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run("Watch the build.")
    adapter.guard.close()

    assert (stop.value.tool_name, stop.value.count) == ("poll_status", 8)
    assert counter.runs.count("42") == 6
    assert [r for r in counter.runs if r.startswith("read:")] == [
        f"read:{n * 100}" for n in range(6)
    ]  # steps 7 and 8 stopped at their blocked first call
    got = sent(server)
    assert got[4].startswith("Observation:\nExecution logs:\npending\nlog from 400: compiling\n")
    assert got[4].endswith(
        "\n\n" + WARNING + " 4 times, and its result has not changed. Polling again at once "
        "will not make it finish sooner: wait 30 s before checking again (for example "
        "`sleep 30` before the next check), or do something else meanwhile."
    )
    assert "due to: ToolCallBlocked: " + BLOCKED in got[6]

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    calls = {line["call_id"]: line for line in lines if line["type"] == "call"}
    # Step n's code is smolagents' call_<n>: the task is memory step 0.
    assert sorted(calls) == sorted(
        [f"call_{n}.1" for n in range(1, 10)] + [f"call_{n}.2" for n in range(1, 7)]
    )
    outcomes = [line for line in lines if line["type"] == "outcome"]
    assert len(outcomes) == 12
    for line in outcomes:
        call = calls[line["call_id"]]
        if call["tool"] == "poll_status":
            assert line["call_id"].endswith(".1") and line["result"] == "pending"
        else:
            offset = call["params"]["offset"]
            assert line["result"] == f"log from {offset}: compiling"


def test_every_call_of_a_loop_inside_the_code_is_guarded(counter: Counter, events: Events) -> None:
    """One step whose code calls the tool ten times: the 4th call's warning goes into the
    step's observation, the 6th call is blocked and the code stops there; the next step's
    call is blocked again and the third step's stops the run."""
    adapter = LoopGuardForSmolagents(SMALL, on_event=events, on_stop="raise")

    def code(turn: int) -> str:
        return "for _ in range(10):\n    print(poll_status(job='42'))"

    with model_for(coding(code)) as (model, server):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run("Is job 42 done?")
    assert stop.value.count == 7
    assert len(counter.runs) == 5
    first = sent(server)[0]
    assert first.startswith("Observation:\nExecution logs:\n" + "pending\n" * 5)
    assert first.count(WARNING + " 3 times") == 1
    assert (
        "due to: ToolCallBlocked: " + BLOCKED + ": the job is still running, and poll_status "
        "has been polled 5 times" in first
    )
    assert len(server.requests) == 3
    assert events.actions() == ["warn", "block", "block", "stop"]


def test_positional_and_keyword_calls_are_the_same_call(counter: Counter) -> None:
    """``poll_status('42')`` and ``poll_status(job='42')`` count as one repeated call."""
    adapter = LoopGuardForSmolagents(SMALL, on_stop="raise")

    def code(turn: int) -> str:
        return "print(poll_status('42'))" if turn % 2 else "print(poll_status(job='42'))"

    with model_for(coding(code)) as (model, _):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run("Is job 42 done?")
    assert stop.value.count == 7 and len(counter.runs) == 5


def test_a_stop_the_code_catches_still_ends_the_run(counter: Counter) -> None:
    """Code that swallows every exception cannot keep the run going past a stop."""
    adapter = LoopGuardForSmolagents(SMALL, on_stop="raise")

    def code(turn: int) -> str:
        return "try:\n    print(poll_status(job='42'))\nexcept Exception as exc:\n    print(exc)"

    with model_for(coding(code)) as (model, server):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.run("Is job 42 done?")
    assert len(server.requests) == 8  # not asked again after the 8th step's stop
    assert BLOCKED in sent(server)[5]  # the caught block was printed, so the model read it


def test_code_agent_tools_are_wrapped_when_run_sends_them() -> None:
    """A ``CodeAgent`` protected before its first run is guarded from the first call: the
    executor receives the wrapped tools when ``run`` sends them."""
    counter = Counter()
    adapter = LoopGuardForSmolagents(SMALL)

    def code(turn: int) -> str | None:
        return "print(poll_status(job='42'))" if turn < 3 else None

    with model_for(coding(code)) as (model, _):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        assert agent.run("go") == "done"
        wrapped = agent.python_executor.static_tools["poll_status"]
    assert type(wrapped).__name__ == "_CodeTool" and wrapped.name == "poll_status"
    assert wrapped.description == "Check whether a job has finished."  # the tool's own


# -- When loopwarden stops the run (onStop), with smolagents' OpenAI client ----------------
def stuck(turn: int, body: dict[str, Any]) -> dict[str, Any]:
    """Poll job 42 while offered tools, answer when not, and give a final answer once a
    person's note answered the call."""
    if not body.get("tools"):
        return {"content": FINAL}
    if "decided the run should go on" in str(body["messages"][-1].get("content")):
        return {"tool_calls": [("final_answer", {"answer": UNDERSTOOD}, f"f{turn}")]}
    return {"tool_calls": [("poll_status", {"job": "42"}, f"c{turn}")]}


def stuck_coding(turn: int, body: dict[str, Any]) -> dict[str, Any]:
    """The same for a CodeAgent: code that polls, text when offered no tools... which a
    CodeAgent never is, so the last answer is told apart by its instruction."""
    last = str(body["messages"][-1].get("content"))
    if "No tools are available any more" in last:
        return {"content": FINAL}
    if "decided the run should go on" in last:
        return {"content": f"<code>\nfinal_answer({UNDERSTOOD!r})\n</code>"}
    return {"content": "Thought: check it.\n<code>\nprint(poll_status(job='42'))\n</code>"}


def texts(request: dict[str, Any]) -> str:
    """A request's last message as text."""
    content = request["messages"][-1]["content"]
    return content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content)


def smol_report(found: dict[str, Any]) -> StopReport:
    """The StopReport behind ``last_stop``'s dict (its turn limit is ``max_steps``)."""
    return dataclasses.replace(report_of(found), limit_name="max_steps")


@pytest.fixture(name="person")
def fixture_person(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """What the person types at smolagents' ``user_input`` prompt, one answer a line."""

    def answers(*lines: str) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{line}\n" for line in lines)))

    return answers


def test_answer_ends_the_run_with_the_models_last_answer(counter: Counter) -> None:
    """No ``user_input`` tool, so nobody to ask: the stop ends the run with one more model
    call over HTTP, without tools and told why; its text, with the summary as the last
    paragraph, is ``run``'s answer, and ``last_stop`` gives the report."""
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        answer = agent.run("Is job 42 done?")
    found = adapter.last_stop(agent)
    assert found is not None
    report = report_of({**found, "turn_limit": None})
    assert (report.code, report.tool, report.count) == ("global_circuit_breaker", "poll_status", 7)
    assert (report.calls, report.refused, report.tokens, report.turns) == (8, 3, 8 * 15, 8)
    assert (found["turn_limit"], found["saved_turns"], found["saved_tokens"]) == (60, 52, 780)
    assert found["summary"].endswith("before its max_steps of 60.")
    assert str(answer) == f"{FINAL}\n\n{found['summary']}"
    assert len(counter.runs) == 5 and len(server.requests) == 9
    assert all(body.get("tools") for body in server.requests[:8])
    last = server.requests[-1]
    assert "tools" not in last and "tool_choice" not in last
    # smolagents sends the stopped step's observation (the stop's message) and the
    # instruction as one user message.
    assert texts(last).endswith(f"{report.message}\n{final_answer_request(smol_report(found))}")
    final = agent.memory.steps[-1]
    assert final.is_final_answer and final.action_output == str(answer)


def test_answer_for_a_code_agent(counter: Counter) -> None:
    """A ``CodeAgent`` stopped in its code ends the same way: the model's last answer, asked
    without tools, is ``run``'s answer."""
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck_coding) as (model, server):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        answer = agent.run("Is job 42 done?")
    found = adapter.last_stop(agent)
    assert found is not None and str(answer) == f"{FINAL}\n\n{found['summary']}"
    assert "tools" not in server.requests[-1] and len(counter.runs) == 5


def test_answer_falls_back_when_the_last_call_still_asks_for_tools(counter: Counter) -> None:
    """A model that asks for a tool even without tools: the answer is the fallback text."""
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(calling(("poll_status", {"job": "42"}))) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        answer = agent.run("Is job 42 done?")
    found = adapter.last_stop(agent)
    assert found is not None and str(answer) == fallback_answer(smol_report(found))
    assert "tools" not in server.requests[-1]


def test_answer_falls_back_when_the_last_call_fails(counter: Counter, lw_logs: Any) -> None:
    """The last model call fails (HTTP 500): no exception reaches the caller, the answer is
    the fallback text, and the failure is logged."""

    def fails_without_tools(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):
            raise RuntimeError("model overloaded")  # the server answers 500
        return stuck(0, body)

    adapter = LoopGuardForSmolagents(SMALL)
    with ChatServer(fails_without_tools) as server:
        model = OpenAIServerModel(
            "scripted", api_base=server.url, api_key="none", client_kwargs={"max_retries": 0}
        )
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        answer = agent.run("Is job 42 done?")
    found = adapter.last_stop(agent)
    assert found is not None and str(answer) == fallback_answer(smol_report(found))
    assert "loopwarden's last model call failed" in lw_logs.text


def test_answer_when_streaming_and_with_the_full_result(counter: Counter) -> None:
    """``stream=True`` ends with smolagents' ``FinalAnswerStep`` holding the last answer;
    ``return_full_result=True`` returns a ``RunResult`` with it."""
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, _):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        items = list(agent.run("Is job 42 done?", stream=True))
        full = agent.run("Is job 42 done?", return_full_result=True)
    assert isinstance(items[-1], FinalAnswerStep)
    assert str(items[-1].output).startswith(FINAL + "\n\nloopwarden stopped this run")
    assert isinstance(full, RunResult) and full.state == "success"
    assert str(full.output).startswith(FINAL + "\n\nloopwarden stopped this run")
    assert full.token_usage is not None and full.token_usage.total_tokens == 9 * 15


def test_raise_and_on_stop_from_the_config(counter: Counter) -> None:
    """``loopwarden.onStop: raise`` in the config applies when no argument is given: the
    stop leaves ``run``; an unknown value is refused when the guard is made."""
    adapter = LoopGuardForSmolagents({**SMALL, "loopwarden": {"onStop": "raise"}})
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.run("Is job 42 done?")
    assert len(server.requests) == 8 and adapter.last_stop(agent) is None
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardForSmolagents(SMALL, on_stop="explode")  # type: ignore[arg-type]


def test_ask_puts_the_stop_to_the_person_through_user_input(
    counter: Counter, person: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent with smolagents' ``user_input`` tool: the stop is put to the person through
    it (the question and the answers on its prompt); "stop" ends the run with the last
    answer."""
    person("stop")
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter), UserInputTool()]))
        answer = agent.run("Is job 42 done?")
    found = adapter.last_stop(agent)
    assert found is not None and str(answer) == f"{FINAL}\n\n{found['summary']}"
    prompt = capsys.readouterr().out
    assert f"{text_question(smol_report(found))} => Type your answer here:" in prompt
    assert prompt.count(ASK_ANSWERS) == 1
    assert len(counter.runs) == 5 and "tools" not in server.requests[-1]


def test_ask_allow_once_runs_the_call_and_the_next_repeat_asks_again(
    counter: Counter, person: Callable[..., None]
) -> None:
    """ "Allow once": the refused call runs once and its result reaches the model; the next
    repeat is put to the person again."""
    person("allow_once", "stop")
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter), UserInputTool()]))
        agent.run("Is job 42 done?")
    assert len(counter.runs) == 6
    assert texts(server.requests[8]).startswith("Observation:\npending")
    found = adapter.last_stop(agent)
    assert found is not None and (found["calls"], found["refused"]) == (9, 4)


def test_ask_continue_gives_the_model_the_note(
    counter: Counter, person: Callable[..., None]
) -> None:
    """ "Continue" with a note: the model reads the note as the call's observation, with
    its tools, and the run goes on to its own final answer."""
    note = "Check job 43 instead."
    person(f"continue: {note}")
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter), UserInputTool()]))
        answer = agent.run("Is job 42 done?")
    assert texts(server.requests[8]) == f"Observation:\n{person_note(note)}"
    assert server.requests[8].get("tools")
    assert str(answer) == UNDERSTOOD and adapter.last_stop(agent) is None
    assert len(counter.runs) == 5


def test_ask_continue_in_a_code_agent(counter: Counter, person: Callable[..., None]) -> None:
    """In a ``CodeAgent`` the note stops the code like a block: the model reads it in the
    step's error and goes on."""
    note = "Check job 43 instead."
    person(f"continue: {note}")
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck_coding) as (model, server):
        agent = adapter.protect(code_agent(model, [PollStatus(counter), UserInputTool()]))
        answer = agent.run("Is job 42 done?")
    assert f"ToolCallBlocked: {person_note(note)}" in texts(server.requests[8])
    assert str(answer) == UNDERSTOOD and len(counter.runs) == 5


def test_ask_again_and_a_person_who_cannot_answer(
    counter: Counter,
    person: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
    lw_logs: Any,
) -> None:
    """An answer that is none of the three is asked again; a prompt that fails (no more
    input) ends the run with the last answer."""
    person("maybe")  # then the input ends
    adapter = LoopGuardForSmolagents(SMALL)
    with model_for(stuck) as (model, server):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter), UserInputTool()]))
        answer = agent.run("Is job 42 done?")
    prompts = capsys.readouterr().out
    assert "loopwarden did not understand the answer 'maybe'.\n" in prompts
    assert prompts.count(ASK_ANSWERS) == 2
    assert str(answer).startswith(FINAL) and "tools" not in server.requests[-1]
    assert "nobody answered loopwarden's question" in lw_logs.text


def test_the_documented_last_answer(counter: Counter) -> None:
    """docs/integrations-smolagents.md's last answer, word for word: the model's text and
    the summary of a stop at the 31st call with the default thresholds and max_steps 40."""
    adapter = LoopGuardForSmolagents({"tools": {"loopDetection": {"enabled": True}}})
    with model_for(stuck) as (model, _):
        agent = adapter.protect(tool_agent(model, [PollStatus(counter)], max_steps=40))
        answer = agent.run("Is job 42 done?")
    assert str(answer) == snippet("smolagents-answer")


def test_docs_ask_example_runs(counter: Counter, person: Callable[..., None]) -> None:
    """The documented agent with ``UserInputTool``: the person's "continue" with a note
    reaches the model, and the model's own final answer ends the run."""
    person("continue: Check job 43 instead.")
    with model_for(stuck) as (model, server):
        namespace: dict[str, Any] = {
            "guard": LoopGuardForSmolagents(SMALL),
            "tools": [PollStatus(counter)],
            "model": model,
        }
        with contextlib.redirect_stdout(io.StringIO()):  # smolagents' own step log
            exec(compile(snippet("smolagents-ask"), "smolagents-ask", "exec"), namespace)
    assert str(namespace["answer"]) == UNDERSTOOD
    assert texts(server.requests[8]).endswith(person_note("Check job 43 instead."))


def test_the_docs_quote_the_codes_question() -> None:
    """docs/integrations-smolagents.md quotes how to answer loopwarden's question as the
    code words it."""
    page = (Path(__file__).parents[2] / "docs" / "integrations-smolagents.md").read_text()
    quoted = " ".join(
        line.removeprefix("> ").strip() for line in page.splitlines() if line.startswith("> ")
    )
    assert ASK_ANSWERS in quoted
