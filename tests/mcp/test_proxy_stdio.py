"""``loopwarden mcp-proxy`` end to end over stdio.

A real ``mcp.Client`` launches the proxy through the ``loopwarden`` console
script, the proxy launches an upstream server as a stdio subprocess: the test
server built on the MCP SDK, or the stdlib-only handshake-era server (it
starts in milliseconds, where the SDK takes seconds to import here).
"""

from __future__ import annotations

import sys

import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from .conftest import BLOCKED, HERE, STOPPED, UPSTREAM_TOOLS, WARNED, proxy_params, texts

pytestmark = pytest.mark.timeout(60)
LEGACY = [sys.executable, str(HERE / "legacy_server.py")]


async def test_passes_through_and_guards_without_blocking_progress(config_file):
    async with Client(proxy_params("--config", str(config_file))) as client:
        assert client.server_info is not None and client.server_info.name == "loopwarden"
        assert client.instructions == "A test server for loopwarden."

        listed = (await client.list_tools()).tools
        assert {tool.name for tool in listed} == UPSTREAM_TOOLS
        poll = next(tool for tool in listed if tool.name == "poll_status")
        assert "job" in poll.input_schema["properties"]

        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["memo://readme"]
        read = await client.read_resource("memo://readme")
        assert read.contents[0].text == "upstream readme"
        assert [p.name for p in (await client.list_prompts()).prompts] == ["greet"]
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert prompt.messages[0].content.text == "Hello Ada"

        # A tool that makes progress is never blocked, however often it is called.
        for n in range(1, 9):
            result = await client.call_tool("counter", {})
            assert not result.is_error
            assert texts(result)[0] == f"progress {n}"

        # Unknown names are checked against the upstream's list: a miss is answered
        # like an unknown tool, and once the threshold (2) is reached it is blocked.
        first, second, third = [await client.call_tool("no_such_tool", {}) for _ in range(3)]
        assert first.is_error and texts(first) == ["Unknown tool: no_such_tool"]
        assert second.is_error and texts(second) == ["Unknown tool: no_such_tool"]
        assert third.is_error and "there is no tool named 'no_such_tool'" in texts(third)[0]
        assert not (await client.call_tool("counter", {})).is_error

        # Upstream isError results are outcomes: the same failure repeated gets blocked.
        failures = [await client.call_tool("fail", {"reason": "disk full"}) for _ in range(5)]
        assert all(result.is_error for result in failures)
        assert texts(failures[0])[0] == "Error executing tool fail: cannot do it: disk full"
        assert texts(failures[3])[0] == texts(failures[0])[0]
        assert texts(failures[4])[0].startswith(BLOCKED)

        # A JSON-RPC error from upstream reaches the client as the same error.
        with pytest.raises(MCPError) as raised:
            await client.call_tool("rpc_fail", {})
        assert raised.value.code == -32001
        assert raised.value.message == "upstream refused the request"


async def test_stuck_loop_is_warned_then_blocked_then_stopped(config_file):
    params = proxy_params("--config", str(config_file), command=LEGACY)
    async with Client(params) as client:
        results = [await client.call_tool("poll_status", {"job": "42"}) for _ in range(8)]
        bodies = [texts(result) for result in results]

        # Calls 1-4 ran upstream; the 3rd carries the warning as an extra text block.
        for index in range(4):
            assert not results[index].is_error
            assert bodies[index][0] == "job 42: pending"
        assert [len(body) for body in bodies[:4]] == [1, 1, 2, 1]
        assert bodies[2][1].startswith(WARNED)

        # Calls 5-6 are blocked: not run, answered with an error saying why.
        for index in (4, 5):
            assert results[index].is_error
            assert bodies[index][0].startswith(BLOCKED)
            assert "poll_status" in bodies[index][0]

        # The 7th reaches the circuit breaker: the loop is stopped, and stays stopped.
        for index in (6, 7):
            assert results[index].is_error
            assert "(rule global_circuit_breaker): poll_status returned" in bodies[index][0]
            assert STOPPED in bodies[index][0]

        # Every further call of this run is refused too, whatever the tool.
        other = await client.call_tool("add_tool", {})
        assert other.is_error and STOPPED in texts(other)[0]


async def test_a_message_over_the_bound_is_refused_and_the_next_one_served():
    """``--max-message-bytes``: the too-long call gets an error, the proxy goes on."""
    params = proxy_params("--max-message-bytes", "2000", command=LEGACY)
    async with Client(params) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("poll_status", {"job": "x" * 3000})
        assert raised.value.code == -32600
        assert "over the proxy's limit of 2000 bytes" in raised.value.message
        result = await client.call_tool("poll_status", {"job": "x" * 1000})
        assert not result.is_error
