"""A tiny MCP server for the example: ``poll_status`` reports a job that never finishes.

``client.py`` starts it behind ``loopwarden mcp-proxy``, as ``mcp.json`` says.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("jobs")


@server.tool()
def poll_status(job: str) -> str:
    """Report the status of a job."""
    return f"job {job} ({os.environ.get('JOBS_REGION', '?')}): pending"


if __name__ == "__main__":
    server.run()
