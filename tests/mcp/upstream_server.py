"""A small upstream MCP server for the proxy tests (run as a script).

Tools: ``poll_status(job)`` always answers the same (a stuck poll),
``counter()`` makes progress on every call, ``fail(reason)`` returns an
``isError`` result, ``rpc_fail()`` answers with a JSON-RPC error, and
``add_tool()`` registers ``late_tool`` at run time and announces the change.
Also one resource and one prompt, to check that they pass through.

Usage: ``python upstream_server.py`` (stdio) or
``python upstream_server.py --http PORT`` (streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError


def build() -> MCPServer:
    server = MCPServer("test-upstream", instructions="A test server for loopwarden.")
    calls = {"counter": 0}

    @server.tool()
    def poll_status(job: str) -> str:
        """Report the status of a job (this one never finishes)."""
        return f"job {job}: pending"

    @server.tool()
    def counter() -> str:
        """Count up: every call makes progress."""
        calls["counter"] += 1
        return f"progress {calls['counter']}"

    @server.tool()
    def fail(reason: str = "disk full") -> str:
        """Always fail with a tool error."""
        raise ToolError(f"cannot do it: {reason}")

    @server.tool()
    def rpc_fail() -> str:
        """Always fail with a JSON-RPC error."""
        raise MCPError(code=-32001, message="upstream refused the request")

    @server.tool()
    async def add_tool(ctx: Context) -> str:
        """Register late_tool and announce that the tool list changed."""

        def late_tool() -> str:
            """A tool that exists only after add_tool ran."""
            return "late tool ran"

        server.add_tool(late_tool)
        await ctx.notify_tools_changed()
        return "added late_tool"

    @server.resource("memo://readme")
    def readme() -> str:
        return "upstream readme"

    @server.prompt()
    def greet(name: str) -> str:
        return f"Hello {name}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args()
    print("test upstream starting", file=sys.stderr, flush=True)
    server = build()
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
