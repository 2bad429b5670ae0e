"""Google ADK integration, driven offline: scripted ``BaseLlm`` models and ``InMemoryRunner``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.events.event import Event
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

import loopwarden as lw
from loopwarden.integrations.google_adk import (
    ADK_LOGGERS,
    WARNING_KEY,
    LoopGuardPlugin,
    loop_abort,
)
from tests._snippets import snippet
from tests.integrations._drivers import _adk_model_class
from tests.integrations._shared import BLOCKED, SMALL, Events

# The note on a poll whose result says the job still runs (`pending`): loopwarden's wait
# wording (docs/stopping.md, "Polls of a running job").
WARNING = "WARNING: the job is still running: poll_status has been polled"

# EventsCompactionConfig warns that it is experimental; pytest turns warnings into errors.
experimental = pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")


def reply(step: Any, prompt_tokens: int | None = None) -> LlmResponse:
    usage = (
        types.GenerateContentResponseUsageMetadata(prompt_token_count=prompt_tokens)
        if prompt_tokens is not None
        else None
    )
    if isinstance(step, str):
        parts = [types.Part(text=step)]
    else:
        parts = [
            types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))
            for name, args, call_id in step
        ]
    return LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


# Answers with the next scripted step: text, or a list of ``(tool, args, call id)``;
# ``big_prompt_at`` holds request numbers that report a huge prompt.
Scripted: Any = _adk_model_class()


class Looping(BaseLlm):
    """Calls ``poll_status(job="42")`` until it has seen ``calls`` answers, then says done.

    It reads only the request, so concurrent invocations cannot disturb each other.
    """

    calls: int = 5

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answers = sum(1 for c in llm_request.contents for p in c.parts or () if p.function_response)
        if answers < self.calls:
            yield reply([("poll_status", {"job": "42"}, f"c{answers}")])
        else:
            yield reply("done")


def stuck(n: int, tool: str = "poll_status", args: dict[str, Any] | None = None) -> list[Any]:
    return [[(tool, args if args is not None else {"job": "42"}, f"c{i}")] for i in range(n)]


def poller(ran: list[str], result: Any = None) -> Any:
    def poll_status(job: str) -> Any:
        """Status of a background job."""
        ran.append(job)
        return result(job, len(ran)) if callable(result) else {"status": "pending"}

    return poll_status


def runner_for(agent: LlmAgent, plugin: LoopGuardPlugin) -> InMemoryRunner:
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))


def message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def ask(runner: InMemoryRunner, text: str, session_id: str | None = None) -> list[Event]:
    if session_id is None:
        session = await runner.session_service.create_session(
            app_name=runner.app_name, user_id="me"
        )
        session_id = session.id
    return [
        event
        async for event in runner.run_async(
            user_id="me", session_id=session_id, new_message=message(text)
        )
    ]


def responses(events: list[Event]) -> dict[str, Any]:
    """call id -> the function response the model got."""
    return {
        part.function_response.id: part.function_response.response
        for event in events
        if event.content
        for part in event.content.parts or ()
        if part.function_response and part.function_response.id
    }


def collecting(runner: InMemoryRunner, session_id: str, mode: str) -> tuple[list[Event], Any]:
    """Run one invocation, keeping the events yielded before any exception."""
    seen: list[Event] = []
    try:
        if mode == "sync":
            events = runner.run(user_id="me", session_id=session_id, new_message=message("hi"))
            for event in events:  # not list(): keep what came before the exception
                seen.append(event)  # noqa: PERF402
        else:

            async def consume() -> None:
                async for event in runner.run_async(
                    user_id="me", session_id=session_id, new_message=message("hi")
                ):
                    seen.append(event)

            asyncio.run(consume())
    except Exception as exc:
        return seen, exc
    return seen, None


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_stuck_agent_is_warned_then_blocked_then_stopped(mode: str, events: Events) -> None:
    ran: list[str] = []
    model = Scripted(model="scripted", steps=stuck(12))
    plugin = LoopGuardPlugin(SMALL, on_event=events, on_stop="raise")
    runner = runner_for(LlmAgent(name="poller", model=model, tools=[poller(ran)]), plugin)
    session = runner.session_service.create_session_sync(app_name=runner.app_name, user_id="me")

    seen, error = collecting(runner, session.id, mode)

    # ADK wraps exceptions from plugins in RuntimeError; ours is behind it.
    assert isinstance(error, RuntimeError)
    stop = loop_abort(error)
    assert isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.code, stop.tool_name, stop.count) == ("global_circuit_breaker", "poll_status", 7)
    assert len(ran) == 5
    assert model.requests == 8
    got = responses(seen)
    assert got["c2"] == {"status": "pending"}
    assert got["c3"]["status"] == "pending" and got["c3"][WARNING_KEY].startswith(WARNING)
    assert got["c5"]["error"].startswith(BLOCKED) and got["c6"]["error"].startswith(BLOCKED)
    assert events.actions() == ["warn", "block", "block", "stop"]
    assert {(e.agent_id, e.session_id) for e in events.items} == {("poller", session.id)}
    assert plugin._invocations == {}  # the failed run's state was dropped


async def test_stuck_agent_with_a_sqlite_store(tmp_path: Path, events: Events) -> None:
    # A store that does I/O: the plugin goes through the guard's async methods.
    ran: list[str] = []
    model = Scripted(model="scripted", steps=stuck(12))
    plugin = LoopGuardPlugin(
        SMALL, store=f"sqlite:///{tmp_path / 'lw.db'}", on_event=events, on_stop="raise"
    )
    runner = runner_for(LlmAgent(name="poller", model=model, tools=[poller(ran)]), plugin)
    try:
        with pytest.raises(RuntimeError) as caught:
            await ask(runner, "hi")
    finally:
        plugin.guard.close()
    assert isinstance(loop_abort(caught.value), lw.CircuitBreakerTripped)
    assert len(ran) == 5
    assert events.actions() == ["warn", "block", "block", "stop"]


def compacting_app(model: BaseLlm, plugin: LoopGuardPlugin, ran: list[str], **config: Any) -> App:
    from google.adk.apps._configs import EventsCompactionConfig

    summarizer = LlmEventSummarizer(llm=Scripted(model="summarizer", steps=["Job 42 pending."] * 9))
    agent = LlmAgent(name="poller", model=model, tools=[poller(ran)])
    compaction = EventsCompactionConfig(summarizer=summarizer, **config) if config else None
    return App(name="app", root_agent=agent, plugins=[plugin], events_compaction_config=compaction)


@experimental
@pytest.mark.parametrize("compact", [True, False])
async def test_compaction_after_an_invocation_arms_the_next_one(compact: bool) -> None:
    ran: list[str] = []
    model = Scripted(model="scripted", steps=[*stuck(2), "pending, I will check later", *stuck(4)])
    plugin = LoopGuardPlugin(SMALL, on_stop="raise")
    config = {"compaction_interval": 1, "overlap_size": 0} if compact else {}
    runner = InMemoryRunner(app=compacting_app(model, plugin, ran, **config))
    session = await runner.session_service.create_session(app_name="app", user_id="me")
    await ask(runner, "Is job 42 done?", session.id)

    if compact:  # ADK compacted the session after the first invocation
        with pytest.raises(RuntimeError) as caught:
            await ask(runner, "And now?", session.id)
        abort = loop_abort(caught.value)
        assert isinstance(abort, lw.CompactionLoopPersisted)
        assert (abort.code, abort.count) == ("compaction_loop_persisted", 3)
        assert len(ran) == 2 + 3
    else:
        seen = await ask(runner, "And now?", session.id)
        assert responses(seen)["c3"]["status"] == "pending"
        assert len(ran) == 2 + 4


async def test_failing_tool_is_recorded_as_an_error(tmp_path: Path) -> None:
    def poll_status(job: str) -> str:
        """Status of a background job."""
        raise ConnectionError("status service unreachable")

    record = tmp_path / "run.jsonl"
    plugin = LoopGuardPlugin(SMALL, run_record=record)
    model = Scripted(model="scripted", steps=stuck(2))
    runner = runner_for(LlmAgent(name="poller", model=model, tools=[poll_status]), plugin)

    # ADK ends the run with a tool's exception; loopwarden records it and lets it through.
    with pytest.raises(ConnectionError):
        await ask(runner, "hi")
    plugin.guard.close()

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(x["tool"], x["is_error"]) for x in lines if x["type"] == "outcome"] == [
        ("poll_status", True)
    ]


async def test_a_stop_is_not_logged_as_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    """ADK logs a plugin's exception three times with its traceback at ERROR; for a
    loopwarden stop those records become one INFO line each, and the stop still ends the run."""
    caplog.set_level(logging.DEBUG)
    model = Scripted(model="scripted", steps=stuck(12))
    runner = runner_for(
        LlmAgent(name="poller", model=model, tools=[poller([])]),
        LoopGuardPlugin(SMALL, on_stop="raise"),
    )
    with pytest.raises(RuntimeError) as caught:
        await ask(runner, "hi")
    assert isinstance(loop_abort(caught.value), lw.CircuitBreakerTripped)
    adk = [r for r in caplog.records if r.name in ADK_LOGGERS]
    crash = ("Error in plugin 'loopwarden'", "Node execution failed", "Root node poller failed")
    reports = [r for r in adk if r.getMessage().startswith(crash)]
    assert sorted(r.name for r in reports) == sorted(ADK_LOGGERS)  # one each, ADK's own words
    assert all(r.levelno == logging.INFO for r in reports)
    assert not any(r.levelno >= logging.WARNING for r in adk)
    assert not any(r.exc_info for r in caplog.records)
    stops = [
        r for r in caplog.records if r.name == "loopwarden" and "loopwarden stop" in r.getMessage()
    ]
    assert len(stops) == 1 and stops[0].levelno == logging.ERROR


async def test_other_plugin_errors_keep_their_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """The filter leaves every other exception's records as ADK wrote them."""

    class Broken(LoopGuardPlugin):
        async def before_tool_callback(self, **kwargs: Any) -> Any:
            raise ValueError("plugin bug")

    caplog.set_level(logging.DEBUG)
    model = Scripted(model="scripted", steps=stuck(2))
    runner = runner_for(LlmAgent(name="poller", model=model, tools=[poller([])]), Broken(SMALL))
    with pytest.raises(RuntimeError, match="plugin bug"):
        await ask(runner, "hi")
    errors = [r for r in caplog.records if r.name in ADK_LOGGERS and r.levelno == logging.ERROR]
    assert errors and all(r.exc_info for r in errors)


def test_docs_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loopwarden.json5").write_text(snippet("google-adk-config"))
    code = snippet("google-adk-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    namespace: dict[str, Any] = {"__name__": "docs_snippet"}
    exec(compile(code, "google-adk-quickstart", "exec"), namespace)
    # The example names a Gemini model; an offline model that never stops stands in for it.
    namespace["agent"].model = Looping(model="looping", calls=100)
    exec(compile(snippet("google-adk-stop"), "google-adk-stop", "exec"), namespace)
    stop = namespace["stop"]
    assert isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.code, stop.count) == ("global_circuit_breaker", 30)
    printed = capsys.readouterr().out
    assert printed == "loopwarden stopped the run: global_circuit_breaker poll_status 30\n"
