"""Scripted model APIs on loopback: Anthropic Messages, OpenAI Responses, Gemini.

Each coding-agent CLI talks to one of these instead of the real service. The
"model" follows a script (which tool call it makes on each turn) and every
request is appended to a JSONL log, so a test can check exactly what the model
was shown. Standard library only: the server runs inside the network namespace
next to the CLI (see ``sandbox.py``).

Script (JSON)::

    {"api": "anthropic" | "responses" | "gemini",
     "steps": [{"tool": "Bash", "input": {...}, "repeat": 31},
               {"error": "prompt is too long", "status": 400},
               {"text": "done"}],
     "after": "text once the steps are used up",
     "summary": "text answered to a summarization request",
     "main_tools": ["bash"]}   # optional: tool names that mark a main request (Anthropic)

The main conversation's requests take the steps in order; summarization and
other side requests (titles, quota probes) get fixed answers and do not take a
step. A step may also set ``usage`` (tokens reported for that answer; a high
value makes Codex compact) and ``pause`` (seconds to wait before ending the
stream, as a slow API would). Log entries: ``n, t, method, path, kind (main,
summary, side), step (index or None), call (the tool call id answered), body``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["APIS", "NOOP_HOOK_PATH", "Script", "serve"]

# Text of the last message of a summarization request (Claude Code, Codex, Gemini).
SUMMARY_MARKERS = (
    "provide your summary",
    "summary of the conversation",
    "summarize the conversation",
    "handoff summary",
    "<state_snapshot>",
    "anchored summary from the conversation",  # OpenCode
    "summarize this session for continuation",  # Cline CLI
)
Answer = Iterator[bytes] | bytes | tuple[int, bytes]
NOOP_HOOK_PATH = "/noop-hook"
"""POSTs here are answered ``{}`` at once and not logged: a Claude Code HTTP hook that
does nothing, to measure what the CLI itself spends on one."""


class Script:
    """The model's scripted turns, handed out one per main-conversation request."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.steps: list[dict[str, Any]] = []
        for step in spec.get("steps", []):
            self.steps.extend([step] * int(step.get("repeat", 1)))
        self.after: str = spec.get("after", "I am done.")
        self.summary: str = spec.get("summary", "<summary>The user asked to poll a job.</summary>")
        # Tool names that mark a main-conversation request, if not the API's own default.
        self.main_tools: set[str] = set(spec.get("main_tools", ()))
        self.lock = threading.Lock()
        self.served = 0

    def next(self) -> tuple[int, dict[str, Any]]:
        with self.lock:
            index = self.served
            self.served += 1
        if index < len(self.steps):
            return index, self.steps[index]
        return index, {"text": self.after}


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _last_item(body: Any) -> Any:
    if isinstance(body, dict):
        for key in ("messages", "input", "contents"):
            items = body.get(key)
            if isinstance(items, list) and items:
                return items[-1]
    return None


class API:
    """One provider's wire format: classify a request and produce its answer."""

    name = ""
    prefix = "call_"  # of the tool call ids this API hands out

    def __init__(self, script: Script) -> None:
        self.script = script
        self.ids = itertools.count(1)

    def kind(self, path: str, body: Any) -> str:
        """``main`` (takes a step), ``summary`` or ``side``."""
        tail = json.dumps(_last_item(body)).lower()[-6000:]
        if any(marker in tail for marker in SUMMARY_MARKERS):
            return "summary"
        return "main" if self.is_main(path, body) else "side"

    def is_main(self, path: str, body: Any) -> bool:
        raise NotImplementedError

    def answer(self, path: str, body: Any, kind: str) -> tuple[int | None, str | None, Answer]:
        """(step index, id of the tool call made, answer: SSE chunks, JSON or (status, JSON))."""
        index: int | None = None
        if kind == "main":
            index, step = self.script.next()
        elif kind == "summary":
            step = {"text": self.script.summary}
        else:
            step = {"text": "ok"}
        if "error" in step:
            error = json.dumps(self.error(step["error"])).encode()
            return index, None, (int(step.get("status", 400)), error)
        call = f"{self.prefix}{next(self.ids):04d}" if "tool" in step else None
        return index, call, self.render(path, body, step, call)

    def error(self, message: str) -> Any:
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}

    def render(self, path: str, body: Any, step: dict[str, Any], call: str | None) -> Answer:
        raise NotImplementedError


class Anthropic(API):
    """``POST /v1/messages`` as Claude Code calls it (streaming SSE, or plain JSON)."""

    name = "anthropic"
    prefix = "toolu_"

    def is_main(self, path: str, body: Any) -> bool:
        tools = body.get("tools") if isinstance(body, dict) else None
        wanted = self.script.main_tools or {"Bash"}
        return bool(tools) and any(t.get("name") in wanted for t in tools if isinstance(t, dict))

    def error(self, message: str) -> Any:
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}

    def render(self, path: str, body: Any, step: dict[str, Any], call: str | None) -> Answer:
        model = body.get("model", "claude-sonnet-4-5") if isinstance(body, dict) else "claude"
        usage = {"input_tokens": step.get("usage", 100), "output_tokens": 5}
        if call is not None:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call,
                "name": step["tool"],
                "input": step.get("input", {}),
            }
            stop = "tool_use"
        else:
            block = {"type": "text", "text": step["text"]}
            stop = "end_turn"
        message = {
            "id": f"msg_{next(self.ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not (isinstance(body, dict) and body.get("stream")):
            return json.dumps(message).encode()
        return self._stream(message, block, stop, float(step.get("pause", 0)))

    def _stream(
        self, message: dict[str, Any], block: dict[str, Any], stop: str, pause: float
    ) -> Iterator[bytes]:
        yield _sse(
            "message_start", {"type": "message_start", "message": {**message, "content": []}}
        )
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start},
        )
        yield _sse(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        if pause:
            time.sleep(pause)
        # message_delta carries the usage too: Claude Code keeps the last one it sees.
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": message["usage"],
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})


class Responses(API):
    """``POST /v1/responses`` as Codex calls it (SSE)."""

    name = "responses"

    def is_main(self, path: str, body: Any) -> bool:
        return isinstance(body, dict) and bool(body.get("tools"))

    def render(self, path: str, body: Any, step: dict[str, Any], call: str | None) -> Answer:
        n = next(self.ids)
        if call is not None:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": call,
                "name": step["tool"],
                "arguments": json.dumps(step.get("input", {})),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step["text"], "annotations": []}],
            }
        total = int(step.get("usage", 100))
        response = {"id": f"resp_{n}", "object": "response", "status": "in_progress", "output": []}
        done = {
            **response,
            "status": "completed",
            "output": [item],
            "usage": {
                "input_tokens": total - 5,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": total,
            },
        }
        added = {"type": "response.output_item.added", "output_index": 0, "item": item}
        finished = {"type": "response.output_item.done", "output_index": 0, "item": item}
        return iter(
            [
                _sse("response.created", {"type": "response.created", "response": response}),
                _sse("response.output_item.added", added),
                _sse("response.output_item.done", finished),
                _sse("response.completed", {"type": "response.completed", "response": done}),
            ]
        )


class Gemini(API):
    """``POST /v1beta/models/M:streamGenerateContent?alt=sse``, ``:generateContent``,
    ``:countTokens``."""

    name = "gemini"

    def is_main(self, path: str, body: Any) -> bool:
        if not isinstance(body, dict) or ":countTokens" in path:
            return False
        names = [
            d.get("name")
            for t in body.get("tools") or []
            if isinstance(t, dict)
            for d in t.get("functionDeclarations", [])
            if isinstance(d, dict)
        ]
        return "run_shell_command" in names

    def render(self, path: str, body: Any, step: dict[str, Any], call: str | None) -> Answer:
        usage = int(step.get("usage", 100))
        if ":countTokens" in path:
            return json.dumps({"totalTokens": usage}).encode()
        if call is not None:
            part: dict[str, Any] = {
                "functionCall": {"id": call, "name": step["tool"], "args": step.get("input", {})}
            }
        else:
            part = {"text": step["text"]}
        chunk = {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": usage - 5,
                "candidatesTokenCount": 5,
                "totalTokenCount": usage,
            },
            "modelVersion": "gemini-2.5-pro",
        }
        if "streamGenerateContent" in path:
            return iter([_sse(None, chunk)])
        return json.dumps(chunk).encode()


APIS: dict[str, type[API]] = {"anthropic": Anthropic, "responses": Responses, "gemini": Gemini}


def serve(spec: dict[str, Any], log: Path, port: int = 0) -> ThreadingHTTPServer:
    """Start the scripted API on 127.0.0.1 (``port``, 0: a free one) in a thread; requests
    go to ``log``."""
    api = APIS[spec["api"]](Script(spec))
    lock = threading.Lock()
    seq = itertools.count(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The head and the body are two writes: without this, on a kept-alive connection
        # the body waits for the client's delayed ACK of the head (40 ms on Linux).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return  # the JSONL log is the record

        def _record(self, body: Any, kind: str, step: int | None, call: str | None) -> None:
            entry = {
                "n": next(seq),
                "t": time.time(),
                "method": self.command,
                "path": self.path,
                "kind": kind,
                "step": step,
                "call": call,
                "body": body,
            }
            with lock, log.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._record(None, "get", None, None)
            self._send(200, b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.startswith(NOOP_HOOK_PATH):
                self._send(200, b"{}")  # an HTTP hook that does nothing (benchmarks)
                return
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            kind = api.kind(self.path, body)
            step, call, answer = api.answer(self.path, body, kind)
            self._record(body, kind, step, call)
            if isinstance(answer, tuple):
                self._send(*answer)
                return
            if isinstance(answer, bytes):
                self._send(200, answer)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in answer:
                self.wfile.write(chunk)
                self.wfile.flush()
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
