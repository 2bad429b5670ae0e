"""smolagents integration, driven through real agents and smolagents' own OpenAI client.

The model is a scripted chat-completions server on loopback (``_chatserver.py``):
``OpenAIServerModel`` sends it every request over HTTP, and the tests read what the
model was sent from the requests it kept. What every framework shares is in
``test_scenarios.py``; this file holds what is particular to smolagents.
"""

from __future__ import annotations

import contextlib
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

from smolagents import CodeAgent, OpenAIServerModel, Tool, ToolCallingAgent
from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.monitoring import LogLevel

import loopwarden as lw
from loopwarden.integrations.smolagents import LoopGuardForSmolagents
from tests._snippets import snippet
from tests.integrations._chatserver import ChatServer
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
    return ToolCallingAgent(
        tools=tools, model=model, max_steps=60, verbosity_level=LogLevel.OFF, **kwargs
    )


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
    """The documented example, with a model that never stops polling: loopwarden ends it."""
    code = snippet("smolagents-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    printed = io.StringIO()
    with model_for(calling(("poll_status", {"job": "42"}))) as (model, server):
        namespace: dict[str, Any] = {"model": model, "tools": [PollStatus(counter)]}
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "smolagents-quickstart", "exec"), namespace)
    # smolagents prints its own step log to stdout (the snippet keeps its verbosity).
    last = printed.getvalue().strip().splitlines()[-1]
    match = re.fullmatch(r"stopped: (\w+) poll_status (\d+)", last)
    assert match is not None, last
    # Blocked calls never ran, and the model was not asked again after the stop.
    assert len(counter.runs) < int(match.group(2)) < len(server.requests)
    assert len(server.requests) == int(match.group(2)) + 1


def test_streamed_outputs_are_guarded_alike(counter: Counter, events: Events) -> None:
    """``stream_outputs=True`` (the client streams the model's answer) changes nothing."""
    adapter = LoopGuardForSmolagents(SMALL, on_event=events)
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
    adapter = LoopGuardForSmolagents(SMALL, on_event=events)
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
    adapter = LoopGuardForSmolagents({"tools": {"loopDetection": {"enabled": True}}})
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

    adapter = LoopGuardForSmolagents(None)
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
    adapter = LoopGuardForSmolagents(CODE_CONFIG, run_record=record, log_params=True)

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
    adapter = LoopGuardForSmolagents(SMALL, on_event=events)

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
    adapter = LoopGuardForSmolagents(SMALL)

    def code(turn: int) -> str:
        return "print(poll_status('42'))" if turn % 2 else "print(poll_status(job='42'))"

    with model_for(coding(code)) as (model, _):
        agent = adapter.protect(code_agent(model, [PollStatus(counter)]))
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run("Is job 42 done?")
    assert stop.value.count == 7 and len(counter.runs) == 5


def test_a_stop_the_code_catches_still_ends_the_run(counter: Counter) -> None:
    """Code that swallows every exception cannot keep the run going past a stop."""
    adapter = LoopGuardForSmolagents(SMALL)

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
