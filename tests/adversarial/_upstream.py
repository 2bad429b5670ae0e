"""A stdlib-only MCP server (2025 handshake era) whose results can carry secrets or be invalid.

Tools:

* ``echo(text)``: answers with the text (a result that repeats the arguments);
* ``poll(job)``: always the same answer (a loop);
* ``invalid(token)``: a result that fails MCP validation (``structuredContent``
  must be an object), with the token in it and in its text;
* ``fail(token)``: a JSON-RPC error whose message and data hold the token;
* ``malformed(shape)``: a reply that is not valid JSON-RPC, of the named shape
  (see ``MALFORMED``).

Run as a script: ``python _upstream.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS = [
    {"name": name, "inputSchema": {"type": "object", "properties": {arg: {"type": "string"}}}}
    for name, arg in (
        ("echo", "text"),
        ("poll", "job"),
        ("invalid", "token"),
        ("fail", "token"),
        ("malformed", "shape"),
    )
]
# What a malformed reply holds besides jsonrpc and id.
MALFORMED: dict[str, dict[str, Any]] = {
    "string-code": {"error": {"code": "E_BAD", "message": "bad"}},
    "float-code": {"error": {"code": -32000.5, "message": "bad"}},
    "no-message": {"error": {"code": -32000}},
    "error-null": {"error": None},
    "result-null": {"result": None},
    "list-result": {"result": [1, 2, 3]},
    "error-and-result": {"error": {"code": -32000, "message": "bad"}, "result": {}},
    "error-string": {"error": "bad"},
    "nothing": {},
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "echo":
        return {"content": [{"type": "text", "text": f"echo: {args.get('text')}"}]}
    if name == "poll":
        return {"content": [{"type": "text", "text": f"job {args.get('job')}: pending"}]}
    if name == "invalid":
        token = args.get("token")
        return {
            "content": [{"type": "text", "text": f"result {token}"}],
            "structuredContent": f"RESULT {token}",
        }
    raise LookupError(name)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        method, params = message["method"], message.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "adversarial-upstream", "version": "1.0"},
            }
        elif method == "tools/list":
            reply["result"] = {"tools": TOOLS}
        elif method == "tools/call" and params.get("name") == "fail":
            token = (params.get("arguments") or {}).get("token")
            reply["error"] = {"code": -32001, "message": f"refused {token}", "data": {"t": token}}
        elif method == "tools/call" and params.get("name") == "malformed":
            reply.update(MALFORMED[(params.get("arguments") or {}).get("shape", "nothing")])
        elif method == "tools/call":
            try:
                reply["result"] = call(params.get("name"), params.get("arguments") or {})
            except LookupError as exc:
                reply["error"] = {"code": -32602, "message": f"Unknown tool: {exc}"}
        elif method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": "Method not found"}
        send(reply)


if __name__ == "__main__":
    main()
