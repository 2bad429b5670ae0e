"""The proxy and the middleware from Python, with real MCP servers and a real MCP client.

Upstreams are the test server run in-process (``mcp.Client`` connects to it
without a subprocess), the stdlib-only handshake-era server as a subprocess,
or programs that are not MCP servers at all.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import anyio
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.mcpserver.utilities.types import Image
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types import ToolListChangedNotification
from pydantic import BaseModel

import loopwarden as lw
from loopwarden.integrations.mcp import (
    GuardedProxy,
    MCPLoopGuardMiddleware,
    Upstream,
    UpstreamError,
)

from .conftest import BLOCKED, HERE, SMALL, STOPPED, UPSTREAM_TOOLS, WARNED, free_port, texts
from .upstream_server import build

pytestmark = pytest.mark.timeout(60)
LEGACY = [sys.executable, str(HERE / "legacy_server.py")]


async def call_n(client: Client, name: str, args: dict[str, Any], n: int) -> list[Any]:
    return [await client.call_tool(name, args) for _ in range(n)]


async def test_several_upstreams_are_prefixed_and_routed():
    async with (
        GuardedProxy([Upstream(build(), name="a"), Upstream(build(), name="b")], SMALL) as proxy,
        Client(proxy.server) as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {f"{up}__{tool}" for up in "ab" for tool in UPSTREAM_TOOLS}
        # Each upstream has its own counter: the calls reach the right one.
        assert texts(await client.call_tool("a__counter", {})) == ["progress 1"]
        assert texts(await client.call_tool("a__counter", {})) == ["progress 2"]
        assert texts(await client.call_tool("b__counter", {})) == ["progress 1"]
        assert [p.name for p in (await client.list_prompts()).prompts] == ["a__greet", "b__greet"]
        prompt = await client.get_prompt("b__greet", {"name": "Bo"})
        assert prompt.messages[0].content.text == "Hello Bo"
        # The unprefixed upstream name is not a tool of the proxy.
        misses = await call_n(client, "poll_status", {"job": "1"}, 3)
        assert texts(misses[0]) == ["Unknown tool: poll_status"]
        assert "there is no tool named 'poll_status'" in texts(misses[2])[0]


async def test_tools_added_upstream_are_announced_and_not_unknown():
    async with (
        GuardedProxy([Upstream(build())], SMALL) as proxy,
        Client(proxy.server) as client,
    ):
        async with client.listen(tools_list_changed=True) as events:
            assert texts(await client.call_tool("add_tool", {})) == ["added late_tool"]
            with anyio.fail_after(10):
                assert await events.__anext__() == ToolsListChanged()
        assert "late_tool" in {tool.name for tool in (await client.list_tools()).tools}
        for _ in range(3):  # more than unknownToolThreshold: it is a registered tool now
            result = await client.call_tool("late_tool", {})
            assert not result.is_error and texts(result)[0] == "late tool ran"


async def test_handshake_era_clients_get_list_changed_notifications():
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with (
        GuardedProxy([Upstream(build())], SMALL) as proxy,
        Client(proxy.server, mode="legacy", message_handler=on_message) as client,
    ):
        await client.list_tools()  # the proxy learns where to send notifications
        await client.call_tool("add_tool", {})
        with anyio.fail_after(10):
            while not any(isinstance(m, ToolListChangedNotification) for m in seen):
                await anyio.sleep(0.01)
        assert "late_tool" in {tool.name for tool in (await client.list_tools()).tools}


async def test_upstream_progress_reaches_the_client():
    server = MCPServer("progress")

    @server.tool()
    async def build_job(ctx: Context) -> str:
        """Report progress twice, then finish."""
        await ctx.report_progress(1, 2, "compiling")
        await ctx.report_progress(2, 2, "linking")
        return "built"

    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with GuardedProxy([server], SMALL) as proxy, Client(proxy.server) as client:
        result = await client.call_tool("build_job", {}, progress_callback=on_progress)
    assert texts(result) == ["built"]
    assert reports == [(1, 2, "compiling"), (2, 2, "linking")]


async def test_handshake_era_upstream_over_stdio():
    """A 2025-era server: JSON-RPC errors for unknown tools, spontaneous list_changed."""
    async with (
        GuardedProxy([Upstream.stdio(LEGACY[0], LEGACY[1:])], SMALL) as proxy,
        Client(proxy.server) as client,
    ):
        assert proxy.tool_names == {"poll_status", "add_tool"}
        results = await call_n(client, "poll_status", {"job": "3"}, 5)
        assert texts(results[0]) == ["job 3: pending"]
        assert results[2].content[1].text.startswith(WARNED)
        assert texts(results[4])[0].startswith(BLOCKED)

        async with client.listen(tools_list_changed=True) as events:
            await client.call_tool("add_tool", {})
            with anyio.fail_after(10):
                assert await events.__anext__() == ToolsListChanged()
        assert proxy.tool_names == {"poll_status", "add_tool", "late_tool"}
        assert texts(await client.call_tool("late_tool", {})) == ["late tool ran"]


async def test_a_new_run_starts_after_an_idle_gap():
    async with (
        GuardedProxy([Upstream(build())], SMALL, run_idle_seconds=0.5) as proxy,
        Client(proxy.server) as client,
    ):
        results = await call_n(client, "poll_status", {"job": "1"}, 7)
        assert STOPPED in texts(results[6])[0]
        assert STOPPED in texts(await client.call_tool("counter", {}))[0]
        await anyio.sleep(0.7)
        again = await client.call_tool("poll_status", {"job": "1"})
        assert not again.is_error and texts(again) == ["job 1: pending"]


async def test_image_results_that_change_are_progress():
    server = MCPServer("images")
    frames = iter(range(1000))

    @server.tool()
    def screenshot() -> Image:
        """A new frame on every call."""
        return Image(data=bytes([next(frames) % 256]) * 16, format="png")

    @server.tool()
    def same_screenshot() -> Image:
        """The same frame on every call."""
        return Image(data=b"\x00" * 16, format="png")

    async with GuardedProxy([server], SMALL) as proxy, Client(proxy.server) as client:
        for result in await call_n(client, "screenshot", {}, 8):
            assert not result.is_error and result.content[0].type == "image"
        same = await call_n(client, "same_screenshot", {}, 5)
        assert same[4].is_error and texts(same[4])[0].startswith(BLOCKED)


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        (
            Upstream.stdio(sys.executable, ["-c", "print('hello, not MCP')"]),
            "did not complete the MCP handshake",
        ),
        (
            Upstream.stdio(sys.executable, ["-c", "import sys; sys.stdin.read()"]),
            "did not finish MCP initialisation within 1 seconds",
        ),
        (
            Upstream.http(f"http://127.0.0.1:{free_port()}/mcp"),
            "cannot reach upstream MCP server at http://127.0.0.1:",
        ),
    ],
    ids=["not-mcp", "silent", "unreachable"],
)
async def test_upstream_failures_are_reported_clearly(upstream: Upstream, message: str):
    with pytest.raises(UpstreamError) as raised:
        async with GuardedProxy([upstream], SMALL, connect_timeout=1):
            pass
    assert message in str(raised.value)


async def test_middleware_guards_an_mcp_server():
    server = MCPServer("own")

    @server.tool()
    def poll_status(job: str) -> str:
        return f"job {job}: pending"

    @server.tool()
    def rpc_fail() -> str:
        raise MCPError(code=-32001, message="refused")

    frames = iter(range(1000))

    @server.tool()
    def screenshot() -> Image:
        return Image(data=bytes([next(frames) % 256]) * 16, format="png")

    events: list[lw.LoopEvent] = []
    guard = lw.LoopGuard(SMALL, on_event=events.append)
    server.middleware.append(MCPLoopGuardMiddleware(guard, server=server))
    async with Client(server) as client:
        results = await call_n(client, "poll_status", {"job": "5"}, 8)
        assert texts(results[0]) == ["job 5: pending"]
        assert texts(results[2])[1].startswith(WARNED)
        assert texts(results[4])[0].startswith(BLOCKED)
        assert STOPPED in texts(results[6])[0]
        assert [e.action for e in events] == ["warn", "block", "block", "stop"]

    guard = lw.LoopGuard(SMALL)
    server.middleware[-1] = MCPLoopGuardMiddleware(guard, server=server)
    async with Client(server) as client:
        misses = await call_n(client, "nope", {}, 3)
        assert misses[0].is_error and "Unknown tool" in texts(misses[0])[0]
        assert "there is no tool named 'nope'" in texts(misses[2])[0]
        with pytest.raises(MCPError) as raised:
            await client.call_tool("rpc_fail", {})
        assert raised.value.message == "refused"
        # Image-only results that change are progress here too.
        shots = await call_n(client, "screenshot", {}, 8)
        assert not any(shot.is_error for shot in shots)


class Confirm(BaseModel):
    ok: bool


def ask_to_confirm() -> Elicit[Confirm]:
    return Elicit("Deploy now?", Confirm)


async def test_middleware_counts_a_call_that_asks_for_input_once():
    """A 2026-07-28 call that needs the client's input takes two rounds: one call."""
    server = MCPServer("deploy")

    @server.tool()
    def deploy(target: str, answer: Annotated[Confirm, Resolve(ask_to_confirm)]) -> str:
        return f"deployed {target}: {answer.ok}"

    server.middleware.append(MCPLoopGuardMiddleware(SMALL, server=server))
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async with Client(server, elicitation_callback=on_elicit) as client:
        results = await call_n(client, "deploy", {"target": "prod"}, 5)
    assert len(asked) == 4  # the blocked 5th call never reached the tool
    assert [texts(r)[0] for r in results[:4]] == ["deployed prod: True"] * 4
    assert texts(results[2])[1].startswith("WARNING: deploy has been called 2 times")
    assert results[4].is_error and texts(results[4])[0].startswith(BLOCKED)
