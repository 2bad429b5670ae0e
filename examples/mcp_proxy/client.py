"""The README's MCP set-up, run: a client starts the server of ``mcp.json`` and polls a job.

``mcp.json`` is a client config in the README's shape: the server's command is
``loopwarden mcp-proxy --config .loopwarden.json5 -- python jobs_server.py``.
This script launches that entry the way Claude Code or Cursor would, with the
MCP SDK's own client, and calls ``poll_status`` until loopwarden stops the
loop. No network, no API key. Run it from here::

    pip install 'loopwarden[mcp]'
    cd examples/mcp_proxy && python client.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters


def launch(entry: dict) -> StdioServerParameters:
    """The entry's command line: ``loopwarden`` and ``python`` are this environment's."""
    here = Path(sys.executable).parent
    command = entry["command"]
    if command == "loopwarden" and shutil.which(command) is None:
        command = str(here / "loopwarden")
    args = [sys.executable if arg == "python" else arg for arg in entry["args"]]
    return StdioServerParameters(command=command, args=args, env={**os.environ, **entry["env"]})


async def main() -> None:
    entry = json.loads(Path("mcp.json").read_text(encoding="utf-8"))["mcpServers"]["jobs"]
    async with Client(launch(entry)) as client:
        seen = set()
        for n in range(1, 41):
            result = await client.call_tool("poll_status", {"job": "42"})
            text = result.content[-1].text  # a warning comes as a block of its own
            if not result.is_error:
                kind = "warned" if text.startswith("WARNING") else "ran"
            else:
                kind = "blocked" if "blocked this call" in text else "stopped"
            if kind not in seen:  # the first call of each kind
                seen.add(kind)
                print(f"call {n}: {kind}: {text[:72]}")
            if kind == "stopped":
                break


if __name__ == "__main__":
    anyio.run(main)
