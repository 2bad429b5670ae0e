"""A hand-written MCP server of the 2025 handshake era (stdlib only, starts in milliseconds).

Many MCP servers in the wild are like this one: they speak protocol
2025-06-18, answer a lookup failure with a JSON-RPC error, and announce tool
changes with a spontaneous ``notifications/tools/list_changed``.

Tools: ``poll_status(job)`` (always pending) and ``add_tool()`` (adds
``late_tool`` and sends the list-changed notification).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "name": "poll_status",
        "description": "Report the status of a job.",
        "inputSchema": {
            "type": "object",
            "properties": {"job": {"type": "string"}},
            "required": ["job"],
        },
    },
    {
        "name": "add_tool",
        "description": "Add late_tool.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "legacy-upstream", "version": "1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        if name == "poll_status":
            return text(f"job {params.get('arguments', {}).get('job')}: pending")
        if name == "add_tool":
            if not any(tool["name"] == "late_tool" for tool in TOOLS):
                TOOLS.append({"name": "late_tool", "inputSchema": {"type": "object"}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            return text("added late_tool")
        if name == "late_tool" and len(TOOLS) > 2:
            return text("late tool ran")
        raise LookupError(f"Unknown tool: {name}")
    raise NotImplementedError(method)


def main() -> None:
    print("legacy upstream starting", file=sys.stderr, flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # notifications and responses need no answer
        try:
            result = handle(message["method"], message.get("params") or {})
        except LookupError as exc:
            error = {"code": -32602, "message": str(exc)}
            send({"jsonrpc": "2.0", "id": message["id"], "error": error})
        except NotImplementedError:
            error = {"code": -32601, "message": "Method not found"}
            send({"jsonrpc": "2.0", "id": message["id"], "error": error})
        else:
            send({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    main()
