"""A scripted Gemini API (``generateContent``) on loopback, for ADK's real ``Gemini`` model.

``Gemini(model=..., base_url=server.url, client_kwargs={"api_key": "test"})`` sends
its requests here through the google-genai client. Each
``POST /v1beta/models/M:generateContent`` (or ``:streamGenerateContent?alt=sse``)
is answered from a reply function, and every request body is kept, so a test sees
exactly what the model was sent. Standard library only; the server binds 127.0.0.1
on a free port and runs in a thread.

A reply function gets the request body and returns one of:

* ``str``: the model answers with that text;
* ``list`` of ``(name, args, call_id)``: the model calls those functions;
* ``(status, message)``: an API error with that HTTP status and message.

Every answer reports ``usageMetadata`` of :data:`TOKENS` tokens.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.integrations._chat_server import LoopbackServer

__all__ = ["TOKENS", "GeminiServer", "Reply", "function_responses", "has_tools"]

Reply = str | list[tuple[str, dict[str, Any], str]] | tuple[int, str]
TOKENS = 15
"""Tokens each answer reports (10 prompt, 5 candidates)."""


def function_responses(body: dict[str, Any]) -> dict[str, Any]:
    """Call id -> the ``response`` of its function response, in one request body."""
    out: dict[str, Any] = {}
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            response = part.get("functionResponse")
            if response is not None:
                out[str(response.get("id"))] = response.get("response")
    return out


def has_tools(body: dict[str, Any]) -> bool:
    """Whether the request offered the model any function."""
    return any(tool.get("functionDeclarations") for tool in body.get("tools") or [])


def _parts(reply: str | list[tuple[str, dict[str, Any], str]]) -> list[dict[str, Any]]:
    if isinstance(reply, str):
        return [{"text": reply}]
    return [
        {"functionCall": {"id": call_id, "name": name, "args": args}}
        for name, args, call_id in reply
    ]


class GeminiServer(LoopbackServer):
    """``generateContent`` answered by ``reply(body)``; ``requests`` keeps the bodies."""

    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the tests read ``requests``

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"code": 400, "message": "body is not JSON"}})
                    return
                if "Content" not in self.path:
                    self._send(404, {"error": {"code": 404, "message": f"no route {self.path}"}})
                    return
                with server._lock:
                    server.requests.append(body)
                try:
                    answer = server.reply(body)
                except Exception as exc:  # a broken script is a failed request, not a hang
                    self._send(500, {"error": {"code": 500, "message": f"script failed: {exc!r}"}})
                    return
                if isinstance(answer, tuple):
                    status, text = answer
                    self._send(
                        status, {"error": {"code": status, "message": text, "status": "INTERNAL"}}
                    )
                    return
                chunk = {
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": _parts(answer)},
                            "finishReason": "STOP",
                            "index": 0,
                        }
                    ],
                    "usageMetadata": {
                        "promptTokenCount": TOKENS - 5,
                        "candidatesTokenCount": 5,
                        "totalTokenCount": TOKENS,
                    },
                    "modelVersion": "gemini-2.5-flash",
                }
                if "streamGenerateContent" in self.path:
                    raw = f"data: {json.dumps(chunk)}\n\n".encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(raw)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(raw)
                    self.close_connection = True
                    return
                self._send(200, chunk)

            def _send(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                # One request per connection: no client keeps sockets open past a test.
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(raw)
                self.close_connection = True

        self._serve(Handler)

    @property
    def url(self) -> str:
        """The base URL a client takes."""
        return self.origin
