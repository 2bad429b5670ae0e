"""Google ADK integration, driven offline: scripted ``BaseLlm`` models and ``InMemoryRunner``,
and ADK's ``Gemini`` model against a scripted Gemini API on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.events.event import Event
from google.adk.models import BaseLlm, Gemini, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

import loopwarden as lw
from loopwarden.integrations.google_adk import (
    ADK_LOGGERS,
    CONFIRMATION_CALL,
    WARNING_KEY,
    LoopGuardPlugin,
    confirmation_reply,
    loop_abort,
)
from loopwarden.stopping import StopReport, fallback_answer, final_answer_request, person_note
from tests._snippets import ROOT, snippet
from tests.integrations._drivers import _adk_model_class
from tests.integrations._gemini_server import (
    TOKENS,
    GeminiServer,
    function_responses,
    has_tools,
)
from tests.integrations._shared import BLOCKED, SMALL, Events

# The note on a poll whose result says the job still runs (`pending`): loopwarden's wait
# wording (docs/stopping.md, "Polls of a running job").
WARNING = "WARNING: the job is still running: poll_status has been polled"

# google-genai's async client (ADK's Gemini model over HTTP) subclasses aiohttp's
# ClientSession, which aiohttp warns about; pytest turns warnings into errors.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning"
)

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


class Standing(Looping):
    """Looping, and answers ``LAST`` whenever it is offered no tools (a last answer)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if not llm_request.config.tools:
            yield reply(LAST)
            return
        async for response in super().generate_content_async(llm_request, stream):
            if response.content and response.content.parts and response.content.parts[0].text:
                response = reply(LAST)
            yield response


def docs_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The docs' config and quickstart, run from a directory that holds the config, with an
    offline model in place of the Gemini model the example names."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loopwarden.json5").write_text(snippet("google-adk-config"))
    code = snippet("google-adk-quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    namespace: dict[str, Any] = {"__name__": "docs_snippet"}
    exec(compile(code, "google-adk-quickstart", "exec"), namespace)
    namespace["agent"].model = Standing(model="standing", calls=31)
    return namespace


def test_docs_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quickstart and the answer snippet of the docs run as shown: the stuck agent's
    last event is the model's answer with the summary, the report in its metadata."""
    namespace = docs_namespace(tmp_path, monkeypatch)
    exec(compile(snippet("google-adk-answer"), "google-adk-answer", "exec"), namespace)
    report = namespace["report"]
    assert (report["code"], report["count"], report["calls"]) == ("global_circuit_breaker", 30, 31)
    assert capsys.readouterr().out == f"{LAST}\n\n{report['summary']}\n"


def test_docs_raise_and_ask_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The raise snippet prints the stop; the ask snippet prints the question the docs
    quote, and the person's "continue" lets the agent finish with its answer."""
    namespace = docs_namespace(tmp_path, monkeypatch)
    exec(compile(snippet("google-adk-stop"), "google-adk-stop", "exec"), namespace)
    stop = namespace["stop"]
    assert isinstance(stop, lw.CircuitBreakerTripped) and stop.report is not None
    printed = capsys.readouterr().out
    assert printed == "loopwarden stopped the run: global_circuit_breaker poll_status 30\n"

    exec(compile(snippet("google-adk-ask"), "google-adk-ask", "exec"), namespace)
    question = capsys.readouterr().out.strip()
    page = (ROOT / "docs" / "integrations-google-adk.md").read_text("utf-8")
    assert f"> {question}\n" in page
    events = namespace["events"]
    assert responses(events)["c30"] == {"error": person_note("Job 42 is slow; say so and stop.")}
    assert events[-1].content.parts[0].text == LAST


def test_docs_show_what_the_code_writes() -> None:
    """The instruction and the summary the docs quote are loopwarden's own text for an
    invocation stopped at the 31st of its calls (11 not run), within max_llm_calls 500."""
    page = (ROOT / "docs" / "integrations-google-adk.md").read_text("utf-8")
    message = (
        "CRITICAL: the loopwarden global circuit breaker stopped this run: poll_status "
        "returned identical no-progress outcomes 30 times in a row for identical arguments."
    )
    report = StopReport("global_circuit_breaker", "poll_status", 30, message, 31, 11)
    report = report.with_usage(tokens=6200, turns=31, turn_limit=500, limit_name="max_llm_calls")
    assert f"> {final_answer_request(report)}\n" in page
    assert f"\n\n{report.summary()}\n```" in page


# -- onStop: what a stop does (docs/integrations-google-adk.md) ------------------------
# These runs use ADK's real Gemini model and its google-genai client over HTTP, against a
# scripted Gemini API on loopback (tests/integrations/_gemini_server.py).

LAST = "I polled job 42 five times and it is still pending. Check the job by hand."
# ResumabilityConfig warns that it is experimental; pytest turns warnings into errors.
resumable_is_experimental = pytest.mark.filterwarnings("ignore:.*ResumabilityConfig.*:UserWarning")


def gemini_looping(
    tool: str = "poll_status", last: Any = LAST, answers: int | None = None
) -> Callable[[dict[str, Any]], Any]:
    """A Gemini model that makes the same call every turn (call ids c0, c1 ...) while it is
    offered tools (for at most ``answers`` requests), and answers ``last`` otherwise."""
    requests = 0

    def reply(body: dict[str, Any]) -> Any:
        nonlocal requests
        requests += 1
        if not has_tools(body) or (answers is not None and requests > answers):
            return last
        return [(tool, {"job": "42"}, f"c{len(function_responses(body))}")]

    return reply


@contextlib.contextmanager
def gemini(reply: Callable[[dict[str, Any]], Any]) -> Iterator[tuple[GeminiServer, Gemini]]:
    """ADK's Gemini model, its client pointed at a scripted Gemini API."""
    with GeminiServer(reply) as server:
        yield (
            server,
            Gemini(
                model="gemini-2.5-flash", base_url=server.url, client_kwargs={"api_key": "test"}
            ),
        )


def gemini_runner(model: Gemini, plugin: LoopGuardPlugin, ran: list[str], **app: Any) -> Any:
    agent = LlmAgent(name="poller", model=model, tools=[poller(ran)])
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin], **app))


def final_event(events: list[Event]) -> tuple[str, dict[str, Any]]:
    """The invocation's last event: its text and loopwarden's report in its metadata."""
    last = events[-1]
    assert last.content is not None and last.content.parts
    text = "".join(part.text or "" for part in last.content.parts)
    return text, (last.custom_metadata or {})["loopwarden"]


def request_of(report: dict[str, Any]) -> str:
    """The instruction the last model request ends with, for this report."""
    stop = StopReport(report["code"], report["tool"], report["count"], report["message"])
    return final_answer_request(stop)


async def test_answer_ends_the_invocation_with_the_models_last_answer(events: Events) -> None:
    """Unset on_stop in an app that is not resumable: the next model request after the
    stop has no tools and ends with loopwarden's instruction; the answer, with the
    summary, is the invocation's final event, the report in its custom_metadata."""
    ran: list[str] = []
    with gemini(gemini_looping()) as (server, model):
        plugin = LoopGuardPlugin(SMALL, on_event=events)
        runner = gemini_runner(model, plugin, ran)
        seen = await ask(runner, "Is job 42 done?")

    text, report = final_event(seen)
    assert (report["code"], report["tool"], report["count"]) == (
        "global_circuit_breaker",
        "poll_status",
        7,
    )
    assert (report["calls"], report["refused"], report["turns"]) == (8, 3, 8)
    assert (report["tokens"], report["turn_limit"]) == (8 * TOKENS, 500)  # max_llm_calls
    assert text == f"{LAST}\n\n{report['summary']}"
    assert "could have gone on for 492 more model turns" in report["summary"]
    last = server.requests[-1]
    assert len(server.requests) == 9 and not has_tools(last)
    assert last["contents"][-1] == {"role": "user", "parts": [{"text": request_of(report)}]}
    stopped = function_responses(last)["c7"]["error"]
    assert stopped.startswith("CRITICAL: the loopwarden global circuit breaker")
    assert len(ran) == 5 and plugin._invocations == {}
    assert events.actions() == ["warn", "block", "block", "stop"]


async def test_answer_after_calls_of_a_missing_tool() -> None:
    """A stop on a tool that does not exist ends the invocation the same way."""
    with gemini(gemini_looping("no_such_tool")) as (server, model):
        runner = gemini_runner(model, LoopGuardPlugin(SMALL), [])
        seen = await ask(runner, "Is job 42 done?")
    text, report = final_event(seen)
    assert (report["code"], report["tool"]) == ("unknown_tool_repeat", "no_such_tool")
    assert text == f"{LAST}\n\n{report['summary']}"
    assert not has_tools(server.requests[-1]) and len(server.requests) == 9


@pytest.mark.parametrize(
    "last",
    [(400, "the model service refused"), [("poll_status", {"job": "42"}, "late")], ""],
    ids=["fails", "asks-for-tools", "empty"],
)
async def test_answer_falls_back_to_the_summary(last: Any) -> None:
    """When the last model request fails, still asks for tools or says nothing, the final
    event holds loopwarden's fallback text: no exception reaches the caller."""
    ran: list[str] = []
    with gemini(gemini_looping(last=last)) as (server, model):
        runner = gemini_runner(model, LoopGuardPlugin(SMALL), ran)
        seen = await ask(runner, "Is job 42 done?")
    text, report = final_event(seen)
    stop = StopReport(**{k: report[k] for k in ("code", "tool", "count", "message")})
    expected = fallback_answer(
        dataclasses.replace(
            stop,
            calls=report["calls"],
            refused=report["refused"],
            tokens=report["tokens"],
            turns=report["turns"],
            turn_limit=report["turn_limit"],
            limit_name="max_llm_calls",
        )
    )
    assert text == expected
    assert len(ran) == 5 and not has_tools(server.requests[-1])


async def ask_adk(
    reply: Callable[[dict[str, Any]], Any], ran: list[str], **plugin: Any
) -> tuple[Any, GeminiServer, str, str, contextlib.ExitStack]:
    """A run loopwarden stops with a question; returns what resuming needs."""
    stack = contextlib.ExitStack()
    server, model = stack.enter_context(gemini(reply))
    app = plugin.pop("app", {})
    runner = gemini_runner(model, LoopGuardPlugin(SMALL, **plugin), ran, **app)
    session = await runner.session_service.create_session(app_name="app", user_id="me")
    seen = await ask(runner, "Is job 42 done?", session.id)
    [request] = [
        part.function_call
        for event in seen
        for part in (event.content.parts or [])
        if event.content
        if part.function_call and part.function_call.name == CONFIRMATION_CALL
    ]
    assert request.id is not None and request.args is not None
    assert request.args["originalFunctionCall"]["id"] == "c7"
    hint = request.args["toolConfirmation"]["hint"]
    assert hint.startswith("loopwarden stopped this run (rule global_circuit_breaker): ")
    assert len(server.requests) == 8 and len(ran) == 5  # paused: the model is not asked
    return runner, server, session.id, request.id, stack


async def resume(runner: Any, session_id: str, message: types.Content, **kw: Any) -> list[Event]:
    return [
        event
        async for event in runner.run_async(
            user_id="me", session_id=session_id, new_message=message, **kw
        )
    ]


def plain_confirmation(request_id: str, response: dict[str, Any]) -> types.Content:
    """ADK's own confirmation answer, as a UI without loopwarden's choices sends it."""
    answer = types.FunctionResponse(name=CONFIRMATION_CALL, id=request_id, response=response)
    return types.Content(role="user", parts=[types.Part(function_response=answer)])


NOTE = "Job 42 is slow today; report that and stop."


@pytest.mark.parametrize(
    ("choice", "plain"),
    [
        ("allow_once", None),
        ("stop", None),
        ("continue", None),
        ("allow_once", {"confirmed": True}),
        ("stop", {"confirmed": False}),
        ("continue", {"confirmed": False, "payload": {"note": NOTE}}),
    ],
    ids=["allow_once", "stop", "continue", "adk-confirmed", "adk-rejected", "adk-note"],
)
async def test_ask_uses_adk_tool_confirmation(choice: str, plain: dict[str, Any] | None) -> None:
    """on_stop="ask": the stopped call becomes an adk_request_confirmation with
    loopwarden's question; the answer (confirmation_reply, or ADK's own confirmed/payload)
    re-runs it: allow once runs the call once, stop ends with a last answer, continue
    gives the model the note and the invocation goes on."""
    ran: list[str] = []
    runner, server, session_id, request_id, stack = await ask_adk(
        gemini_looping(answers=8), ran, on_stop="ask"
    )
    with stack:
        message = (
            confirmation_reply(request_id, choice, note=NOTE)
            if plain is None
            else plain_confirmation(request_id, plain)
        )
        seen = await resume(runner, session_id, message)

    answered = function_responses(server.requests[8])["c7"]
    if choice == "allow_once":  # the call ran once, its result reached the model
        assert len(ran) == 6 and answered == {"status": "pending"}
        assert seen[-1].content is not None and seen[-1].content.parts[0].text == LAST
    elif choice == "continue":  # the model read the note, and was offered its tools again
        assert len(ran) == 5 and has_tools(server.requests[8])
        assert answered == {"error": person_note(NOTE)}
        assert seen[-1].content is not None and seen[-1].content.parts[0].text == LAST
    else:  # the invocation ended as under answer
        text, report = final_event(seen)
        assert text == f"{LAST}\n\n{report['summary']}" and not has_tools(server.requests[8])
        assert answered["error"].startswith("CRITICAL: the loopwarden global circuit breaker")
    assert len(server.requests) == 9


@resumable_is_experimental
async def test_ask_is_the_default_in_a_resumable_app() -> None:
    """Unset on_stop in a resumable app (ResumabilityConfig): a stop is put to the person,
    and the answer resumes the paused invocation by its id."""
    from google.adk.apps import ResumabilityConfig

    ran: list[str] = []
    app = {"resumability_config": ResumabilityConfig(is_resumable=True)}
    runner, _, session_id, request_id, stack = await ask_adk(
        gemini_looping(answers=8), ran, app=app
    )
    with stack:
        session = await runner.session_service.get_session(
            app_name="app", user_id="me", session_id=session_id
        )
        paused = session.events[-1].invocation_id  # resumed as that invocation
        reply = confirmation_reply(request_id, "allow_once")
        seen = await resume(runner, session_id, reply, invocation_id=paused)
    # A resumable app ends the invocation with an event of agent state, without content.
    [*_, last] = [event for event in seen if event.content is not None]
    assert len(ran) == 6 and last.content is not None and last.content.parts
    assert last.content.parts[0].text == LAST


async def test_ask_is_the_default_where_a_tool_asks_for_confirmation() -> None:
    """Unset on_stop, and an agent with a tool that asks for confirmation (its caller
    answers confirmations): a stop is put to the person."""
    from google.adk.tools import FunctionTool

    def cancel_job(job: str) -> dict[str, str]:
        """Cancel a background job."""
        return {"status": "cancelled"}

    ran: list[str] = []
    with gemini(gemini_looping()) as (server, model):
        tools = [poller(ran), FunctionTool(cancel_job, require_confirmation=True)]
        agent = LlmAgent(name="poller", model=model, tools=tools)
        runner = InMemoryRunner(
            app=App(name="app", root_agent=agent, plugins=[LoopGuardPlugin(SMALL)])
        )
        seen = await ask(runner, "Is job 42 done?")
    names = [
        part.function_call.name
        for event in seen
        if event.content
        for part in event.content.parts or ()
        if part.function_call
    ]
    assert names[-1] == CONFIRMATION_CALL and len(server.requests) == 8


def test_a_wrong_on_stop_is_a_clear_error() -> None:
    """An on_stop that is none of the three modes is refused when the plugin is made, as is
    a confirmation reply that is none of the three answers."""
    with pytest.raises(ValueError, match="on_stop must be"):
        LoopGuardPlugin(SMALL, on_stop="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_once, stop or continue"):
        confirmation_reply("adk-1", "perhaps")


async def test_ask_then_continue_with_a_sqlite_store(tmp_path: Path) -> None:
    """With a store that does I/O (the guard's async methods), the person's "continue"
    lifts the stop in the stored state and the invocation goes on."""
    ran: list[str] = []
    store = f"sqlite:///{tmp_path / 'lw.db'}"
    runner, server, session_id, request_id, stack = await ask_adk(
        gemini_looping(answers=8), ran, on_stop="ask", store=store
    )
    with stack:
        seen = await resume(runner, session_id, confirmation_reply(request_id, "continue"))
    assert function_responses(server.requests[8])["c7"] == {"error": person_note(None)}
    assert seen[-1].content is not None and seen[-1].content.parts[0].text == LAST
