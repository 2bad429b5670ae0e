"""``onStop`` through the MCP proxy: what a stopped run's client gets, and a person's say.

Real processes throughout: the ``loopwarden mcp-proxy`` console script (stdio, or
streamable HTTP on loopback) in front of the test upstream server
(``upstream_server.py``), driven by the real MCP SDK client, ``Client`` (2026-07-28:
the question rides an ``input_required`` result) or ``ClientSession`` (the 2025
handshake: the proxy sends ``elicitation/create`` mid-call). A client with an
``elicitation_callback`` declares elicitation; one without does not.

With the small thresholds of :data:`SMALL`, the 7th identical ``poll_status`` call
reaches the circuit breaker: calls 1-4 run, 5-6 are blocked, 7 is stopped.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from loopwarden import LoopGuard
from loopwarden.integrations.mcp import GuardedProxy, MCPLoopGuardMiddleware, Upstream
from loopwarden.stopping import StopReport, ask_question, final_answer_request, person_note
from loopwarden.testing import FakeClock

from .conftest import (
    LOOPWARDEN,
    SMALL,
    StderrLines,
    proxy_params,
    stop_process,
    texts,
    upstream_command,
)

pytestmark = pytest.mark.timeout(180)

Call = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]
LOOP = ("poll_status", {"job": "7"})
PENDING = ["job 7: pending"]
BREAKER = (
    "CRITICAL: the loopwarden global circuit breaker stopped this run: poll_status returned "
    "identical no-progress outcomes 6 times in a row for identical arguments."
)
# The stop at the 7th call: 7 calls, of which 5, 6 (blocked) and 7 were not run.
FIRST_STOP = StopReport("global_circuit_breaker", "poll_status", 6, BREAKER, 7, 3)
REFUSED_LATER = "every further call of this server's tools in this agent run will be refused"


class Person:
    """A scripted person behind a client's elicitation callback: one answer per question
    (``"allow_once"``, ``"continue:<note>"``, ``"stop"``, ``"decline"``, ``"cancel"``)."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        answer = self.answers.pop(0)
        if answer in ("decline", "cancel"):
            return types.ElicitResult(action=answer)
        choice, _, note = answer.partition(":")
        content: dict[str, Any] = {"choice": choice}
        if note:
            content["note"] = note
        return types.ElicitResult(action="accept", content=content)


def config(tmp_path: Path, name: str, **loopwarden: Any) -> Path:
    """A config file with the small thresholds (and ``loopwarden`` settings, if any)."""
    data: dict[str, Any] = dict(SMALL)
    if loopwarden:
        data["loopwarden"] = loopwarden
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


async def until_asked(call: Call, person: Person, limit: int = 12) -> types.CallToolResult:
    """Repeat the looping call until the person is asked; the asked call's result."""
    asked = len(person.asked)
    for _ in range(limit):
        result = await call(*LOOP)
        if len(person.asked) > asked:
            return result
        assert not _stopped(result), "stopped without asking"
    raise AssertionError(f"nobody was asked in {limit} calls")


async def until_stopped(call: Call, limit: int = 12) -> types.CallToolResult:
    """Repeat the looping call until its answer is the stop's; that answer."""
    for _ in range(limit):
        result = await call(*LOOP)
        if _stopped(result):
            return result
    raise AssertionError(f"no stop in {limit} calls")


def _stopped(result: types.CallToolResult) -> bool:
    return bool(result.meta and "loopwarden" in result.meta)


def final_answer(result: types.CallToolResult) -> StopReport:
    """Check ``result`` is the ``answer`` of a stop, as docs/mcp.md shows it; its report."""
    assert result.is_error
    assert result.meta is not None
    meta = result.meta["loopwarden"]
    fields = ("code", "tool", "count", "message", "calls", "refused", "run_id")
    report = StopReport(*(meta[name] for name in fields))
    assert meta == report.to_dict()
    instruction, summary = texts(result)
    assert instruction.startswith(final_answer_request(report) + "\n\nThis call was not run, ")
    assert REFUSED_LATER in instruction
    assert summary == report.summary()
    return report


def check_question(asked: types.ElicitRequestFormParams, report: StopReport) -> None:
    """The question a person sees about ``report``'s stop, and its form."""
    assert asked.message == f"{ask_question(report)}\n\n{report.summary()}"
    choice = asked.requested_schema["properties"]["choice"]
    assert choice["enum"] == ["allow_once", "stop", "continue"]
    assert choice["enumNames"] == [
        "Let the call run once more",
        "Stop the run",
        "Continue, with a note for the agent",
    ]
    assert asked.requested_schema["properties"]["note"]["type"] == "string"
    assert asked.requested_schema["required"] == ["choice"]


async def each_answer_does_what_it_says(call: Call, person: Person) -> None:
    """The person answers three stops of one run: allow once, continue with a note, stop."""
    allowed = await until_asked(call, person)
    check_question(person.asked[0], FIRST_STOP)
    # allow once: the refused call ran upstream, and its result reached the model.
    assert not allowed.is_error and texts(allowed) == PENDING
    # The rules kept their counts: the next repeat is stopped (and asked about) again.
    noted = await call(*LOOP)
    assert len(person.asked) == 2
    assert "rule global_circuit_breaker" in person.asked[1].message
    # continue: the model reads the person's note instead of the call's result...
    assert noted.is_error and texts(noted) == [person_note("check job 8 instead")]
    # ...and the run goes on from a clean slate: the next call runs.
    assert texts(await call(*LOOP)) == PENDING
    # stop: the run ends as under ``answer``.
    stopped = await until_asked(call, person)
    report = final_answer(stopped)
    assert report.code == "global_circuit_breaker"
    # Every later call of the stopped run, any tool, is answered the same way, unasked.
    later = await call("counter", {})
    assert final_answer(later).refused == report.refused + 1
    assert len(person.asked) == 3 and not person.answers


STORY = ("allow_once", "continue:check job 8 instead", "stop")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The config file with the small thresholds and no onStop."""
    return str(config(tmp_path_factory.mktemp("onstop"), "small"))


# -- stdio -----------------------------------------------------------------------------
async def test_ask_over_stdio_with_a_2026_client(small: str):
    """``--on-stop ask``, stdio, a 2026-07-28 ``Client``: the question rides an
    ``input_required`` result, and allow once, continue with a note and stop each do what
    they say."""
    person = Person(*STORY)
    params = proxy_params("--config", small, "--on-stop", "ask")
    async with Client(params, elicitation_callback=person) as client:
        assert client.protocol_version == "2026-07-28"
        await each_answer_does_what_it_says(client.call_tool, person)


async def test_ask_is_the_default_over_stdio_for_a_handshake_client(small: str):
    """With no onStop set, a 2025 ``ClientSession`` that declared elicitation is asked with
    ``elicitation/create`` mid-call over stdio, and each answer does what it says."""
    person = Person(*STORY)
    params = proxy_params("--config", small)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, elicitation_callback=person) as session,
    ):
        init = await session.initialize()
        assert init.protocol_version == "2025-11-25"
        await each_answer_does_what_it_says(session.call_tool, person)


async def test_decline_cancel_and_no_elicitation_end_the_run_with_the_answer(small: str):
    """Declined (2026 client) or cancelled (2025 client), the stop stands and the run ends
    as under ``answer`` with no further question, as it does, even under ``--on-stop ask``,
    for a client that did not declare elicitation."""

    async def declined() -> None:
        person = Person("decline")
        async with Client(proxy_params("--config", small), elicitation_callback=person) as c:
            final_answer(await until_asked(c.call_tool, person))
            final_answer(await c.call_tool(*LOOP))
            assert len(person.asked) == 1

    async def cancelled() -> None:
        person = Person("cancel")
        async with (
            stdio_client(proxy_params("--config", small)) as (read, write),
            ClientSession(read, write, elicitation_callback=person) as session,
        ):
            await session.initialize()
            final_answer(await until_asked(session.call_tool, person))
            final_answer(await session.call_tool("counter", {}))
            assert len(person.asked) == 1

    async def unasked() -> None:  # ask without a person to ask is answer
        async with Client(proxy_params("--config", small, "--on-stop", "ask")) as client:
            report = final_answer(await until_stopped(client.call_tool))
            assert (report.calls, report.refused) == (7, 3)
            assert final_answer(await client.call_tool("counter", {})).calls == 8

    async with anyio.create_task_group() as tg:  # each a proxy process: start them together
        for case in (declined, cancelled, unasked):
            tg.start_soon(case)


async def test_raise_and_a_configured_answer(small: str, tmp_path: Path):
    """``--on-stop raise`` makes the stop a JSON-RPC error carrying the report, and the
    config's ``loopwarden.onStop: "answer"`` wins over the default ``ask`` of a client that
    could be asked."""
    answering = config(tmp_path, "answer", onStop="answer")

    async def raised() -> None:
        async with Client(proxy_params("--config", small, "--on-stop", "raise")) as c:
            for _ in range(6):
                await c.call_tool(*LOOP)
            with pytest.raises(MCPError) as stop:
                await c.call_tool(*LOOP)
            assert stop.value.code == -32070
            assert stop.value.message.startswith(BREAKER + "\n\nloopwarden stopped this loop.")
            report = stop.value.data["loopwarden"]
            assert (report["code"], report["calls"], report["refused"]) == (
                "global_circuit_breaker",
                7,
                3,
            )
            with pytest.raises(MCPError):  # and so is every later call of the run
                await c.call_tool("counter", {})

    async def configured() -> None:
        person = Person()
        async with Client(
            proxy_params("--config", str(answering)), elicitation_callback=person
        ) as client:
            final_answer(await until_stopped(client.call_tool))
        assert person.asked == []

    async with anyio.create_task_group() as tg:
        tg.start_soon(raised)
        tg.start_soon(configured)


# -- streamable HTTP -------------------------------------------------------------------
@contextlib.contextmanager
def http_proxy(*options: str) -> Iterator[str]:
    """``loopwarden mcp-proxy --http`` in front of the test upstream (stdio): its URL."""
    proc = subprocess.Popen(
        [LOOPWARDEN, "mcp-proxy", "--http", "--port", "0", *options, "--", *upstream_command()],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = StderrLines(proc)
    try:
        yield stderr.wait_for("serving MCP at").split("serving MCP at ")[1].strip()
        assert "Traceback" not in stderr.text
    finally:
        stop_process(proc)
        stderr.close()


def client_named(url: str, name: str, **options: Any) -> Client:
    """A client whose name is its session (2026-07-28 clients have no session id)."""
    return Client(url, client_info=types.Implementation(name=name, version="1"), **options)


async def test_ask_over_streamable_http_in_both_eras_and_nobody_waits(small: str):
    """Over streamable HTTP, a 2026 client (``input_required``) and a 2025 session
    (``elicitation/create`` on the call's stream) are each asked and each answer does what
    it says, other sessions are served while a person takes their time, and a question
    left unanswered past ``--ask-timeout`` ends that run as under ``answer``."""
    with http_proxy("--config", small, "--ask-timeout", "2") as url:
        modern, legacy = Person(*STORY), Person(*STORY)
        async with client_named(url, "modern-agent", elicitation_callback=modern) as client:
            await each_answer_does_what_it_says(client.call_tool, modern)
        async with Client(url, mode="legacy", elicitation_callback=legacy) as session:
            await each_answer_does_what_it_says(session.call_tool, legacy)

        released = anyio.Event()
        served: list[list[str]] = []

        async def slow_person(context: Any, params: Any) -> types.ElicitResult:
            await released.wait()  # answers only once the other session was served
            return types.ElicitResult(action="accept", content={"choice": "allow_once"})

        async def others() -> None:
            async with client_named(url, "other-agent") as other:
                served.append(texts(await other.call_tool("counter", {})))
                served.append(texts(await other.call_tool(*LOOP)))
            released.set()

        async with Client(url, mode="legacy", elicitation_callback=slow_person) as waiting:
            for _ in range(6):
                await waiting.call_tool(*LOOP)
            async with anyio.create_task_group() as tg:
                tg.start_soon(others)
                allowed = await waiting.call_tool(*LOOP)  # asked, and waits for the answer
            assert texts(allowed) == PENDING
        assert served == [["progress 1"], PENDING]

        async def nobody(context: Any, params: Any) -> types.ElicitResult:
            await anyio.Event().wait()  # never answers
            raise AssertionError("unreachable")

        async with Client(url, mode="legacy", elicitation_callback=nobody) as unanswered:
            for _ in range(6):
                await unanswered.call_tool(*LOOP)
            final_answer(await unanswered.call_tool(*LOOP))
            final_answer(await unanswered.call_tool(*LOOP))  # and it is not asked again


async def test_answer_over_streamable_http_for_a_client_without_elicitation(small: str):
    """Over HTTP, a client that did not declare elicitation gets the answer at the stop,
    and for every later call of the run."""
    with http_proxy("--config", small) as url:
        async with client_named(url, "plain-agent") as client:
            report = final_answer(await until_stopped(client.call_tool))
            assert (report.calls, report.refused) == (7, 3)
            again = final_answer(await client.call_tool("counter", {}))
            assert again.run_id == report.run_id


# -- from Python: GuardedProxy and MCPLoopGuardMiddleware, in-process -----------------
def jobs_server(runs: list[str]) -> MCPServer:
    """An MCP server whose ``poll_status`` records each time it really runs."""
    server = MCPServer("jobs")

    @server.tool()
    def poll_status(job: str) -> str:
        """Report the status of a job (this one never finishes)."""
        runs.append(job)
        return f"job {job}: pending"

    @server.tool()
    def counter() -> str:
        """Count the calls that really ran."""
        runs.append("counter")
        return f"progress {len(runs)}"

    return server


async def test_no_tool_runs_once_the_run_is_stopped():
    """``answer``: neither the stopped call nor any later call of the run reaches the
    upstream server."""
    runs: list[str] = []
    async with (
        GuardedProxy([Upstream(jobs_server(runs))], SMALL, on_stop="answer") as proxy,
        Client(proxy.server, elicitation_callback=Person()) as client,
    ):
        final_answer(await until_stopped(client.call_tool))
        assert runs == ["7"] * 4  # calls 1-4 ran; 5-6 were blocked, 7 stopped
        for name, args in (LOOP, ("counter", {}), LOOP):
            final_answer(await client.call_tool(name, args))
        assert runs == ["7"] * 4


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_middleware_asks_and_allow_once_runs_the_tool(mode: str):
    """``MCPLoopGuardMiddleware(on_stop="ask")`` in the server itself, both eras: allow
    once runs the tool body once more, continue gives the note, stop ends the run."""
    runs: list[str] = []
    server = jobs_server(runs)
    server.middleware.append(MCPLoopGuardMiddleware(SMALL, server=server, on_stop="ask"))
    person = Person(*STORY)
    async with Client(server, mode=mode, elicitation_callback=person) as client:
        allowed = await until_asked(client.call_tool, person)
        assert texts(allowed) == PENDING and runs == ["7"] * 5
        check_question(person.asked[0], FIRST_STOP)
        noted = await client.call_tool(*LOOP)
        assert texts(noted) == [person_note("check job 8 instead")] and len(runs) == 5
        final_answer(await until_asked(client.call_tool, person))
        final_answer(await client.call_tool("counter", {}))
    assert "counter" not in runs


async def test_middleware_raise_is_a_json_rpc_error():
    """``on_stop="raise"`` in the middleware: the client's ``call_tool`` raises the stop."""
    server = jobs_server([])
    server.middleware.append(MCPLoopGuardMiddleware(SMALL, server=server, on_stop="raise"))
    async with Client(server) as client:
        for _ in range(6):
            await client.call_tool(*LOOP)
        with pytest.raises(MCPError) as stop:
            await client.call_tool(*LOOP)
    assert stop.value.code == -32070
    assert stop.value.data["loopwarden"]["summary"] == FIRST_STOP.summary()


async def test_an_answer_after_the_ask_timeout_ends_the_run():
    """2026 client: an answer that comes back after ``ask_timeout`` (on the guard's clock)
    does not count: the run ends as under ``answer``, and nobody is asked again."""
    clock = FakeClock()
    guard = LoopGuard(SMALL, clock=clock)

    async def late(context: Any, params: Any) -> types.ElicitResult:
        clock.advance(31)
        return types.ElicitResult(action="accept", content={"choice": "allow_once"})

    runs: list[str] = []
    async with (
        GuardedProxy([Upstream(jobs_server(runs))], guard, ask_timeout=30) as proxy,
        Client(proxy.server, elicitation_callback=late) as client,
    ):
        final_answer(await until_stopped(client.call_tool))
        final_answer(await client.call_tool(*LOOP))
    assert len(runs) == 4


async def test_a_call_made_while_a_question_is_open_is_answered_at_once():
    """2025 client: while the person is being asked about the stop, another call of the
    same run is answered as under ``answer`` (it neither waits nor asks again); the
    person's later allow once still lets the asked call run."""
    released = anyio.Event()
    asked: list[str] = []

    async def slow(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        await released.wait()
        return types.ElicitResult(action="accept", content={"choice": "allow_once"})

    runs: list[str] = []
    async with (
        GuardedProxy([Upstream(jobs_server(runs))], SMALL) as proxy,
        Client(proxy.server, mode="legacy", elicitation_callback=slow) as client,
    ):
        for _ in range(6):
            await client.call_tool(*LOOP)
        outcome: list[types.CallToolResult] = []

        async def asked_call() -> None:
            outcome.append(await client.call_tool(*LOOP))

        async with anyio.create_task_group() as tg:
            tg.start_soon(asked_call)
            with anyio.fail_after(30):
                while not asked:
                    await anyio.sleep(0.01)
            final_answer(await client.call_tool("counter", {}))
            released.set()
        assert texts(outcome[0]) == PENDING
    assert len(asked) == 1 and runs == ["7"] * 5


async def test_a_stale_or_foreign_request_state_is_checked_as_a_new_call():
    """A retry whose ``requestState`` is not the open question's (forged, replayed, or
    for other arguments) is never taken as a person's answer."""
    runs: list[str] = []
    async with (
        GuardedProxy([Upstream(jobs_server(runs))], SMALL) as proxy,
        Client(proxy.server, elicitation_callback=Person()) as client,
    ):
        for _ in range(6):
            await client.call_tool(*LOOP)
        first = await client.session.call_tool(*LOOP, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        token = first.request_state
        assert token is not None and token.startswith("loopwarden-ask.")
        yes = {"loopwarden": types.ElicitResult(action="accept", content={"choice": "allow_once"})}
        for name, args, state in (
            (*LOOP, token + "0"),  # forged
            (*LOOP, token[:-1] + "é"),  # forged, not ASCII
            ("poll_status", {"job": "8"}, token),  # another call
        ):
            again = await client.session.call_tool(
                name, args, input_responses=yes, request_state=state
            )
            final_answer(again)  # a new call of the stopped run, not the answer
        answered = await client.session.call_tool(*LOOP, input_responses=yes, request_state=token)
        assert texts(answered) == PENDING  # the open question's own retry counts
        # Replayed, the spent token is a new call: the repeat is stopped, and asked anew.
        replayed = await client.session.call_tool(
            *LOOP, input_responses=yes, request_state=token, allow_input_required=True
        )
        assert isinstance(replayed, types.InputRequiredResult)
        assert replayed.request_state not in (None, token)
    assert runs == ["7"] * 5


def test_bad_settings_are_refused_clearly():
    """A misspelt ``on_stop`` or a non-positive ``ask_timeout`` is a ``ValueError``."""
    with pytest.raises(ValueError, match="on_stop must be 'answer', 'raise' or 'ask'"):
        MCPLoopGuardMiddleware(SMALL, on_stop="ansewr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ask_timeout must be positive"):
        GuardedProxy([Upstream(jobs_server([]))], SMALL, ask_timeout=0)
