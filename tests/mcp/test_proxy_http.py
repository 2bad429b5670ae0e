"""``loopwarden mcp-proxy`` with a streamable-HTTP upstream, served over streamable HTTP."""

from __future__ import annotations

import subprocess

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import (
    BLOCKED,
    LOOPWARDEN,
    UPSTREAM_TOOLS,
    StderrLines,
    stop_process,
    texts,
)

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
