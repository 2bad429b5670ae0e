"""``loopwarden mcp-proxy`` with a streamable-HTTP upstream, served over streamable HTTP."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from loopwarden.integrations.mcp import GuardedProxy, Upstream

from .conftest import (
    BLOCKED,
    LOOPWARDEN,
    SMALL,
    STOPPED,
    UPSTREAM_TOOLS,
    StderrLines,
    stop_process,
    texts,
)
from .upstream_server import build

pytestmark = pytest.mark.timeout(90)


async def test_serves_streamable_http_on_loopback_for_an_http_upstream(config_file, http_upstream):
    options = ["--config", str(config_file), "--http", "--port", "0"]
    proc = subprocess.Popen(
        [LOOPWARDEN, "mcp-proxy", *options, "--upstream", f"tests={http_upstream}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = StderrLines(proc)
    try:
        url = stderr.wait_for("serving MCP at").split("serving MCP at ")[1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async with Client(url) as client:  # 2026-07-28 protocol: no session id
            assert {tool.name for tool in (await client.list_tools()).tools} == UPSTREAM_TOOLS
            results = [await client.call_tool("poll_status", {"job": "9"}) for _ in range(5)]
            assert texts(results[0]) == ["job 9: pending"]
            assert results[4].is_error and texts(results[4])[0].startswith(BLOCKED)

        # A handshake-era client gets an Mcp-Session-Id: its own session, its own run.
        async with Client(url, mode="legacy") as legacy:
            tools_capability = legacy.server_capabilities.tools
            assert tools_capability is not None and tools_capability.list_changed
            fresh = await legacy.call_tool("poll_status", {"job": "9"})
            assert not fresh.is_error and texts(fresh) == ["job 9: pending"]

        # Stateless requests from the same client name share one session...
        async with Client(url) as again:
            still = await again.call_tool("poll_status", {"job": "9"})
            assert still.is_error and texts(still)[0].startswith(BLOCKED)

        # ...unless the client names its session.
        headers = {"X-Loopwarden-Session": "second-agent"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as named,
        ):
            other = await named.call_tool("poll_status", {"job": "9"})
            assert not other.is_error and texts(other) == ["job 9: pending"]

        proc.terminate()
        assert proc.wait(timeout=15) == 0
        assert "Traceback" not in stderr.text
    finally:
        stop_process(proc)
        stderr.close()


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[str]:
    """A GuardedProxy over the test upstream, served over HTTP in this process: its URL."""
    async with (
        GuardedProxy([Upstream(build())], SMALL) as proxy,
        anyio.create_task_group() as tg,
    ):
        ready: list[str] = []
        listening, stop = anyio.Event(), anyio.Event()

        def on_ready(url: str) -> None:
            ready.append(url)
            listening.set()

        tg.start_soon(partial(proxy.serve_http, port=0, on_ready=on_ready, should_exit=stop))
        with anyio.fail_after(30):
            await listening.wait()
        try:
            yield ready[0]
        finally:
            stop.set()


def accepted_socket(client: socket.socket) -> socket.socket:
    """This process's end of ``client``'s connection (the server runs in this process)."""
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(os.fstat(fd).st_mode) or fd == client.fileno():
                continue
            candidate = socket.socket(fileno=os.dup(fd))
            with contextlib.suppress(OSError):
                if candidate.getpeername() == client.getsockname():
                    return candidate
            candidate.close()
    raise AssertionError("the server's end of the connection was not found")


@pytest.mark.skipif(sys.platform != "linux", reason="finds the server's socket in /proc/self/fd")
async def test_accepted_connections_turn_nagle_off():
    """Issue 12: without TCP_NODELAY a response written in two pieces waits ~40 ms for the
    client's delayed ACK, on every call."""
    async with served() as url:
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])

        def exchange() -> tuple[socket.socket, bytes]:
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            client.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}"
            )
            return client, client.recv(65536)

        client, answer = await anyio.to_thread.run_sync(exchange)
        with client:
            assert answer.startswith(b"HTTP/1.1 "), answer[:80]  # served on this connection
            with accepted_socket(client) as server_end:
                assert server_end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_sessions_with_the_same_client_name_have_their_own_runs():
    """Issue 12: two agents reporting the same client name over HTTP do not share a run; one
    stopped by the circuit breaker leaves the other's calls alone."""
    info = types.Implementation(name="same-agent", version="1.0")
    async with (
        served() as url,
        Client(url, mode="legacy", client_info=info) as first,
        Client(url, mode="legacy", client_info=info) as second,
    ):
        results = [await first.call_tool("poll_status", {"job": "1"}) for _ in range(7)]
        assert STOPPED in texts(results[6])[0]
        stopped = await first.call_tool("counter", {})
        assert stopped.is_error and STOPPED in texts(stopped)[0]  # the whole run is stopped
        # The other agent: its first calls of the same tool are fresh, nothing is refused.
        fresh = [await second.call_tool("poll_status", {"job": "1"}) for _ in range(2)]
        assert [texts(result) for result in fresh] == [["job 1: pending"]] * 2
        other = await second.call_tool("counter", {})
        assert not other.is_error and texts(other)[0].startswith("progress ")
