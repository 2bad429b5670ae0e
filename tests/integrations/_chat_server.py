"""A scripted OpenAI-compatible chat-completions model on loopback.

Frameworks without an offline test model (CrewAI) are driven through their
real model client: ``base_url`` points at this server, which answers each
``POST .../chat/completions`` from a reply function and keeps every request
body, so a test sees exactly what the model was sent. Standard library only;
the server binds 127.0.0.1 on a free port and runs in a thread.

A reply function gets the request body and returns one of:

* ``str``: the model answers with that text;
* ``list`` of ``(name, args, call_id)``: the model calls those tools;
* ``(status, message)``: an API error with that HTTP status and message (a
  ``context_length_exceeded`` error, say).

Streaming requests (``"stream": true``) get the same answer as SSE chunks.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["ChatServer", "Reply", "tool_messages"]

Reply = str | list[tuple[str, dict[str, Any], str]] | tuple[int, str]


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    """Call id -> the content of its ``role: tool`` message, in one request body."""
    out: dict[str, str] = {}
    for message in body.get("messages", []):
        if message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n\n".join(str(part.get("text", part)) for part in content)
            out[str(message.get("tool_call_id"))] = str(content)
    return out


def _message(reply: str | list[tuple[str, dict[str, Any], str]]) -> tuple[dict[str, Any], str]:
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}, "stop"
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for name, args, call_id in reply
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"


class LoopbackServer:
    """A threaded HTTP server on a free loopback port, served from a daemon thread; a
    context manager. Subclasses call :meth:`_serve` with their handler."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChatServer(LoopbackServer):
    """``POST /v1/chat/completions`` answered by ``reply(body)``; ``requests`` keeps the bodies."""

    def __init__(self, reply: Callable[[dict[str, Any]], Reply], model: str = "scripted") -> None:
        self.reply = reply
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
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
                    self._send(400, {"error": {"message": "body is not JSON", "type": "bad"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._lock:
                    server.requests.append(body)
                try:
                    answer = server.reply(body)
                except Exception as exc:  # a broken script is a failed request, not a hang
                    self._send(500, {"error": {"message": f"script failed: {exc!r}"}})
                    return
                if isinstance(answer, tuple):
                    status, text = answer
                    error = {"message": text, "type": "invalid_request_error", "code": None}
                    if "context_length" in text or "maximum context length" in text:
                        error["code"] = "context_length_exceeded"
                    self._send(status, {"error": error})
                    return
                message, finish = _message(answer)
                number = next(server._ids)
                if body.get("stream"):
                    self._stream(number, message, finish)
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{number}",
                        "object": "chat.completion",
                        "created": 1_700_000_000,
                        "model": server.model,
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    },
                )

            def _send(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                # One request per connection: the client closes its socket after each
                # answer, so no client leaves open sockets behind when a test ends.
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(raw)
                self.close_connection = True

            def _stream(self, number: int, message: dict[str, Any], finish: str) -> None:
                head = {
                    "id": f"chatcmpl-{number}",
                    "object": "chat.completion.chunk",
                    "created": 1_700_000_000,
                    "model": server.model,
                }
                delta: dict[str, Any] = {"role": "assistant"}
                if message.get("content") is not None:
                    delta["content"] = message["content"]
                if message.get("tool_calls"):
                    delta["tool_calls"] = [
                        {**call, "index": index} for index, call in enumerate(message["tool_calls"])
                    ]
                chunks = [
                    {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                ]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self._serve(Handler)

    @property
    def url(self) -> str:
        """The base URL a client takes (``.../v1``)."""
        return f"{self.origin}/v1"
