"""The MCP proxy over streamable HTTP with many sessions.

A run stopped by the circuit breaker stays stopped until its session has been
idle for the run-idle time, however many other sessions call meanwhile (the
table of live sessions is bounded; stops outlive it in a small table of their own).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import httpx2

from tests.mcp.conftest import STOPPED
from tests.mcp.test_proxy_http import served

pytestmark = pytest.mark.timeout(300)

ERA = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": ERA,
    "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def call(http: httpx2.AsyncClient, url: str, session: str, job: str) -> str:
    """One stateless ``tools/call`` of ``poll_status`` in ``session``: the text answered."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "poll_status", "arguments": {"job": job}, "_meta": META},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": ERA,
        "mcp-method": "tools/call",
        "mcp-name": "poll_status",
        "x-loopwarden-session": session,
    }
    resp = await http.post(url, json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    answer: Any = resp.json()
    return str(answer["result"]["content"][0]["text"])


async def test_a_stopped_run_outlives_a_thousand_other_sessions() -> None:
    """Stopped, then 1,100 other sessions call once each: the stopped session's next call
    is still refused (it used to start a fresh run once 1,024 sessions had pushed it out)."""
    async with served() as url, httpx2.AsyncClient(timeout=60) as http:
        answers = [await call(http, url, "victim", "9") for _ in range(7)]
        assert STOPPED in answers[-1]

        async def others(first: int) -> None:
            for n in range(first, 1100, 8):
                assert "pending" in await call(http, url, f"other-{n}", str(n))

        async with anyio.create_task_group() as tg:
            for first in range(8):
                tg.start_soon(others, first)
        again = await call(http, url, "victim", "9")
        assert STOPPED in again, again
        fresh = await call(http, url, "newcomer", "9")
        assert "pending" in fresh
