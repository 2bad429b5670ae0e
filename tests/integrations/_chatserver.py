"""A scripted model behind an OpenAI-compatible chat-completions endpoint on loopback.

Frameworks whose own model client is the thing to test (smolagents'
``OpenAIServerModel``) talk to this server instead of a provider. Each request's
body is kept, so a test checks what the model was really sent; the reply comes
from a Python function of that body. Standard library only.

::

    with ChatServer(reply) as server:
        model = OpenAIServerModel("scripted", api_base=server.url, api_key="none")

``reply(body)`` returns the assistant message: ``{"content": "text"}`` or
``{"tool_calls": [(name, arguments, call_id), ...]}`` (plus ``content`` if wanted).
A request with ``"stream": true`` is answered with server-sent events, one
chunk per part of the message, as the OpenAI API streams.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["ChatServer", "Reply"]

Reply = Callable[[dict[str, Any]], dict[str, Any]]


def _message(answer: dict[str, Any]) -> tuple[dict[str, Any], str]:
    calls = answer.get("tool_calls") or []
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments, call_id in calls
        ]
    return message, "tool_calls" if calls else "stop"


class ChatServer:
    """``POST /v1/chat/completions`` answered by ``reply``; ``requests`` holds every body."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _chunks(self, answer: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
        message, finish = _message(answer)
        head = {"id": answer["id"], "object": "chat.completion.chunk", "created": 0}
        head["model"] = answer["model"]

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return {**head, "choices": [choice]}

        chunks = [chunk({"role": "assistant", "content": message["content"] or ""})]
        for index, call in enumerate(message.get("tool_calls", [])):
            chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
        chunks.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**head, "choices": [], "usage": answer["usage"]})
        return chunks

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            number = next(self._ids)
        try:
            answer = self.reply(body)
            message, finish = _message(answer)
        except Exception as exc:  # a broken script: an error the client reports, not a hang
            return 500, {"error": {"message": f"scripted model failed: {exc!r}", "type": "x"}}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if body.get("stream"):
            answer = {**answer, "id": f"chatcmpl-{number}", "model": body.get("model", "x")}
            return 200, {"stream": self._chunks({**answer, "usage": usage}, body)}
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }

    def __enter__(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # requests are kept in owner.requests

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                if self.path.rstrip("/").endswith("/chat/completions"):
                    status, data = owner._answer(json.loads(raw))
                else:
                    status, data = 404, {"error": {"message": f"no route {self.path}"}}
                if "stream" in data:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in data["stream"]:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                    return
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
