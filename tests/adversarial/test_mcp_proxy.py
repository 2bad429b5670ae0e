"""``loopwarden mcp-proxy`` against a hostile upstream and a hostile client.

Issue 11, defects 10 (raw results in the proxy's log) and 20 (one huge line
ends the proxy). The proxy runs as the real console script; a real ``mcp``
client drives it, except where the client itself would refuse to send what
the test needs (a 257 MiB line): there the JSON-RPC lines are written by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.adversarial._procs import LOOPWARDEN, MiB
from tests.adversarial.conftest import SMALL, leaks
from tests.mcp import conftest as mcp_conftest
from tests.mcp.conftest import stop_process

pytestmark = pytest.mark.timeout(180)
http_upstream = mcp_conftest.http_upstream  # the test upstream over streamable HTTP (a fixture)
UPSTREAM = [sys.executable, str(Path(__file__).with_name("_upstream.py"))]


def proxied(log: Path, *options: str) -> StdioServerParameters:
    """The proxy as a client launches it, with its stderr appended to ``log``."""
    script = 'exec "$0" "$@" 2>>"$LW_PROXY_LOG"'
    args = ["-c", script, LOOPWARDEN, "mcp-proxy", *options, "--", *UPSTREAM]
    env = {**os.environ, "LW_PROXY_LOG": str(log)}
    return StdioServerParameters(command="/bin/sh", args=args, env=env)


@pytest.fixture(name="config")
def fixture_config(tmp_path: Path) -> Path:
    path = tmp_path / "loopwarden.json"
    path.write_text(json.dumps(SMALL))
    return path


@pytest.mark.parametrize("level", ["warning", "info"])
async def test_invalid_upstream_result_is_not_logged_raw(
    tmp_path: Path, config: Path, level: str
) -> None:
    """An upstream result that fails validation is reported without its content."""
    secret = f"S{uuid.uuid4().hex[:12]}"  # short: pydantic elides the middle of long values
    log = tmp_path / "proxy.log"
    async with Client(proxied(log, "--config", str(config), "--log-level", level)) as client:
        result = await client.call_tool("invalid", {"token": secret})
    assert result.is_error  # the client is told the upstream answer was unusable
    text = log.read_text()
    assert "invalid" in text, "the failure is not logged at all"
    assert not leaks(secret, text), text


async def test_upstream_errors_are_not_logged_raw(tmp_path: Path, config: Path) -> None:
    """A JSON-RPC error carrying the arguments reaches the client, not the proxy's log."""
    secret = f"ARG-SECRET-{uuid.uuid4().hex}"
    log = tmp_path / "proxy.log"
    async with Client(proxied(log, "--config", str(config))) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("fail", {"token": secret})
    assert secret in raised.value.message
    assert not leaks(secret, log.read_text())


# An upstream whose every tools/call answer comes after two lines that are not valid JSON-RPC,
# both holding the token of the call: the SDK's parse errors print them.
GARBLING = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    result = {}
    if m["method"] == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "garbling", "version": "1"}}
    elif m["method"] == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    elif m["method"] == "tools/call":
        token = m["params"]["arguments"]["token"]
        print('{"jsonrpc": "2.0", "result": {"text": "' + token + '"}, "x": [' + token)
        print(json.dumps({"jsonrpc": "2.0", "method": "x", "params": token}))
        result = {"content": [{"type": "text", "text": "ok"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"""


@pytest.mark.parametrize("level", ["info", "debug"])
async def test_unparseable_upstream_lines_are_not_logged_raw(tmp_path: Path, level: str) -> None:
    """Lines from the upstream that are not JSON-RPC are reported without their content."""
    secret = f"S{uuid.uuid4().hex[:12]}"
    script = tmp_path / "garbling.py"
    script.write_text(GARBLING)
    log = tmp_path / "proxy.log"
    shell = 'exec "$0" "$@" 2>>"$LW_PROXY_LOG"'
    args = ["-c", shell, LOOPWARDEN, "mcp-proxy", "--log-level", level]
    args += ["--", sys.executable, str(script)]
    env = {**os.environ, "LW_PROXY_LOG": str(log)}
    async with Client(StdioServerParameters(command="/bin/sh", args=args, env=env)) as client:
        result = await client.call_tool("echo", {"token": secret})
    assert not result.is_error
    text = log.read_text()
    assert "Failed to parse" in text or "transport error" in text, "not logged at all"
    assert not leaks(secret, text), text


async def test_http_upstream_traffic_is_not_logged_at_debug(
    tmp_path: Path, http_upstream: str
) -> None:
    """At ``--log-level debug`` the MCP SDK's own debug output (whole messages) stays out."""
    secret = f"ARG-SECRET-{uuid.uuid4().hex}"
    log = tmp_path / "proxy.log"
    shell = 'exec "$0" "$@" 2>>"$LW_PROXY_LOG"'
    args = [
        "-c",
        shell,
        LOOPWARDEN,
        "mcp-proxy",
        "--log-level",
        "debug",
        "--upstream",
        http_upstream,
    ]
    env = {**os.environ, "LW_PROXY_LOG": str(log)}
    async with Client(StdioServerParameters(command="/bin/sh", args=args, env=env)) as client:
        result = await client.call_tool("poll_status", {"job": secret})
    assert secret in str(result)
    text = log.read_text()
    assert "INFO loopwarden" in text  # logging works
    assert not leaks(secret, text), text


# -- defect 20: one message line over 256 MiB ---------------------------------------------------
class RawChannel:
    """JSON-RPC lines to and from a proxy over its real stdin/stdout pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.answers: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(None)

    def send(self, message: dict[str, Any]) -> None:
        self.write([json.dumps(message).encode() + b"\n"])

    def write(self, chunks: Iterator[bytes] | list[bytes]) -> bool:
        """Write ``chunks``; False if the proxy stopped reading (it exited)."""
        assert self.proc.stdin is not None
        try:
            for chunk in chunks:
                self.proc.stdin.write(chunk)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def answer(self, ident: int, timeout: float = 120.0) -> Any:
        """The answer with id ``ident`` (None if the proxy closed stdout first)."""
        while True:
            try:
                message = self.answers.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no answer to request {ident} within {timeout} s") from None
            if message is None or message.get("id") == ident:
                return message


def huge_line(ident: int, size: int) -> Iterator[bytes]:
    """A tools/call line of ``size`` bytes of argument, generated 1 MiB at a time."""
    yield (
        b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", '
        b'"params": {"name": "echo", "arguments": {"text": "' % ident
    )
    chunk = b"a" * MiB
    for _ in range(size // MiB):
        yield chunk
    yield b'"}}}\n'


@pytest.mark.slow
def test_oversized_message_is_refused_and_the_proxy_goes_on(tmp_path: Path) -> None:
    """A 257 MiB message line is refused with an error under its id; the next request is
    answered as usual."""
    stderr = (tmp_path / "stderr").open("wb")
    proc = subprocess.Popen(
        [LOOPWARDEN, "mcp-proxy", "--", *UPSTREAM],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
    )
    channel = RawChannel(proc)
    try:
        channel.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
        assert channel.answer(1)["result"]["serverInfo"]["name"] == "loopwarden"
        channel.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        channel.write(huge_line(2, 257 * MiB))
        refused = channel.answer(2)
        assert refused is not None, "the proxy exited: " + (tmp_path / "stderr").read_text()[-400:]
        assert refused["error"]["code"] == -32600 and "too large" in refused["error"]["message"]
        channel.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        pong = channel.answer(3)
        assert pong is not None, "the proxy exited: " + (tmp_path / "stderr").read_text()[-400:]
        assert pong == {"jsonrpc": "2.0", "id": 3, "result": {}}
        channel.send(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "still here"}},
            }
        )
        assert channel.answer(4)["result"]["content"][0]["text"] == "echo: still here"
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        stderr.close()


async def test_every_malformed_upstream_reply_gets_an_answer(tmp_path: Path, config: Path) -> None:
    """An upstream ``tools/call`` reply that is not valid JSON-RPC (a string or float error
    code, an error without message, ``error: null``, ``result: null``, a list result...) is
    answered to the client with an error, not left unanswered; the proxy goes on."""
    import anyio

    from tests.adversarial._upstream import MALFORMED

    log = tmp_path / "proxy.log"
    unanswered: list[str] = []
    async with Client(proxied(log, "--config", str(config))) as client:
        for shape in MALFORMED:
            try:
                with anyio.fail_after(10):
                    result = await client.call_tool("malformed", {"shape": shape})
            except MCPError as exc:
                assert exc.message, shape
            except TimeoutError:
                unanswered.append(shape)
            else:
                assert result.is_error, (shape, result)
        with anyio.fail_after(20):
            still = await client.call_tool("echo", {"text": "after"})
        assert not still.is_error
    assert unanswered == []


# -- a person's answer to a stop (onStop: ask) -------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_persons_note_reaches_the_model_only(tmp_path: Path, mode: str) -> None:
    """The note a person gives with *continue* (and the arguments of the loop) reach the
    model, never the proxy's log at DEBUG nor its run record."""
    secret = f"NOTE-{uuid.uuid4().hex}"
    record = tmp_path / "run.jsonl"
    config = tmp_path / "loopwarden.json"
    config.write_text(json.dumps({**SMALL, "loopwarden": {"runRecord": str(record)}}))
    log = tmp_path / "proxy.log"
    asked: list[str] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"choice": "continue", "note": secret})

    options = ("--config", str(config), "--log-level", "debug", "--on-stop", "ask")
    async with Client(proxied(log, *options), mode=mode, elicitation_callback=person) as client:
        results = [await client.call_tool("poll", {"job": secret}) for _ in range(5)]
    assert len(asked) == 1  # the 5th call reached the circuit breaker
    assert secret in results[4].content[0].text  # type: ignore[union-attr]
    assert "person answered the stop" in log.read_text()  # the resume event is logged...
    assert not leaks(secret, log.read_bytes()), log.read_text()  # ...without the note
    assert not leaks(secret, record.read_bytes())


HOSTILE: dict[str, Any] = {
    "not a choice": {"choice": "maybe"},
    "a number": {"choice": 42},
    "no choice": {"note": "go on"},
    "no content": None,
}


@pytest.mark.parametrize("content", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_an_answer_that_is_no_choice_leaves_the_stop_standing(content: Any) -> None:
    """An accepted elicitation whose content names none of the three answers (or has
    none) ends the run as under ``answer``; the proxy answers, it does not fail."""
    from mcp.server.mcpserver import MCPServer

    from loopwarden.integrations.mcp import GuardedProxy

    server = MCPServer("jobs")

    @server.tool()
    def poll(job: str) -> str:
        return f"job {job}: queued"

    asked: list[str] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult.model_construct(action="accept", content=content)

    async with (
        GuardedProxy([server], SMALL) as proxy,
        Client(proxy.server, mode="legacy", elicitation_callback=person) as client,
    ):
        results = [await client.call_tool("poll", {"job": "1"}) for _ in range(5)]
    assert len(asked) == 1  # the 5th call is stopped and asked about
    assert results[4].is_error and results[4].meta is not None
    assert results[4].meta["loopwarden"]["code"] == "global_circuit_breaker"


async def test_a_failing_elicitation_or_an_endless_note_is_handled() -> None:
    """A client whose elicitation fails (its callback raises: a JSON-RPC error back) gets
    the answer; a note of 100,000 characters reaches the model cut to 4,000."""
    from mcp.server.mcpserver import MCPServer

    from loopwarden.integrations.mcp import GuardedProxy

    server = MCPServer("jobs")

    @server.tool()
    def poll(job: str) -> str:
        return f"job {job}: queued"

    asked: list[str] = []

    async def broken(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        raise RuntimeError("the client's form crashed")

    async def verbose(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(
            action="accept", content={"choice": "continue", "note": "x" * 100_000}
        )

    async with (
        GuardedProxy([server], SMALL) as proxy,
        Client(proxy.server, mode="legacy", elicitation_callback=broken) as client,
    ):
        results = [await client.call_tool("poll", {"job": "1"}) for _ in range(5)]
    assert len(asked) == 1 and results[4].meta is not None and "loopwarden" in results[4].meta
    async with (
        GuardedProxy([server], SMALL) as proxy,
        Client(proxy.server, elicitation_callback=verbose) as client,  # 2026-07-28
    ):
        results = [await client.call_tool("poll", {"job": "2"}) for _ in range(5)]
    text = results[4].content[0].text  # type: ignore[union-attr]
    assert "x" * 4000 in text and "x" * 4001 not in text
