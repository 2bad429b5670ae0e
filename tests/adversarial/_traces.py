"""Trace files in every format ``loopwarden replay`` reads, built from a list of calls.

Each builder writes the records a real agent (or loopwarden itself) writes, so
hostile values (a canary secret, terminal escapes) reach replay through the same
fields real traces use. ``calls`` is a sequence of ``(tool, params, result)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

Call = tuple[str, Any, Any]
FORMATS = ("loopwarden", "claude-code", "codex", "openclaw", "chat", "otel")


def jsonl(records: Iterable[Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def loopwarden_record(
    calls: Sequence[Call], *, run: str = "run-1", session: str = "s-1", raw: bool = True
) -> bytes:
    """A run record as ``LoopGuard(run_record=..., log_params=raw)`` writes it."""
    records: list[dict[str, Any]] = [
        {"type": "run_start", "ts": 1.0, "run_id": run, "session_id": session, "agent_id": None}
    ]
    for n, (tool, params, result) in enumerate(calls):
        sig = f"{tool}:{hashlib.sha256(orjson.dumps(params)).hexdigest()}"
        out = hashlib.sha256(orjson.dumps(result)).hexdigest()
        base = {"ts": 2.0 + n, "run_id": run, "call_id": f"c{n}", "tool": tool, "args_hash": sig}
        records.append({"type": "call", **base, "params": params if raw else None})
        records.append(
            {
                "type": "outcome",
                **base,
                "outcome_hash": out,
                "is_error": False,
                "result": result if raw else None,
            }
        )
    return jsonl(records)


def claude_code(calls: Sequence[Call], *, prompt: str = "fix the build") -> bytes:
    session = "0b6c6a8e-claude"
    records: list[dict[str, Any]] = [
        {
            "type": "user",
            "sessionId": session,
            "uuid": "u-0",
            "promptId": "p-1",
            "timestamp": "2026-11-03T09:12:06.500Z",
            "message": {"role": "user", "content": prompt},
        }
    ]
    for n, (tool, params, result) in enumerate(calls):
        records.append(
            {
                "type": "assistant",
                "sessionId": session,
                "uuid": f"a-{n}",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": params}
                    ],
                },
            }
        )
        records.append(
            {
                "type": "user",
                "sessionId": session,
                "uuid": f"r-{n}",
                "promptId": "p-1",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{n}",
                            "content": _text(result),
                        }
                    ],
                },
                "toolUseResult": result,
            }
        )
    return jsonl(records)


def codex(calls: Sequence[Call], *, prompt: str = "fix the build") -> bytes:
    records: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "codex-session", "cwd": "/w"}},
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "turn-1"}},
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": prompt}],
            },
        },
    ]
    for n, (tool, params, result) in enumerate(calls):
        records.append(
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": tool,
                    "call_id": f"call_{n}",
                    "arguments": _text(params),
                },
            }
        )
        records.append(
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": f"call_{n}",
                    "output": _text(result),
                },
            }
        )
    records.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    return jsonl(records)


def openclaw(calls: Sequence[Call], *, prompt: str = "fix the build") -> bytes:
    records: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "oc-session", "cwd": "/w"},
        {
            "type": "message",
            "id": "m-0",
            "parentId": None,
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        },
    ]
    parent = "m-0"
    for n, (tool, params, result) in enumerate(calls):
        call, answer = f"c-{n}", f"r-{n}"
        records.append(
            {
                "type": "message",
                "id": call,
                "parentId": parent,
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "toolCall", "id": f"t{n}", "name": tool, "arguments": params}
                    ],
                },
            }
        )
        records.append(
            {
                "type": "message",
                "id": answer,
                "parentId": call,
                "message": {
                    "role": "toolResult",
                    "toolCallId": f"t{n}",
                    "toolName": tool,
                    "content": [{"type": "text", "text": _text(result)}],
                    "details": {"status": "ok", "echo": result},
                    "isError": False,
                },
            }
        )
        parent = answer
    return jsonl(records)


def chat(calls: Sequence[Call], *, prompt: str = "fix the build") -> bytes:
    """An OpenAI Responses item list, one item per line."""
    records: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for n, (tool, params, result) in enumerate(calls):
        records.append(
            {
                "type": "function_call",
                "call_id": f"call_{n}",
                "name": tool,
                "arguments": _text(params),
                "id": f"fc_{n}",
                "status": "completed",
            }
        )
        records.append(
            {"type": "function_call_output", "call_id": f"call_{n}", "output": _text(result)}
        )
    return jsonl(records)


def otel_span(trace: str, n: int, tool: str, params: Any, result: Any) -> dict[str, Any]:
    """One flat GenAI ``execute_tool`` span."""
    return {
        "trace_id": trace,
        "span_id": f"{n:016x}",
        "name": f"execute_tool {tool}",
        "start_time": 1_793_725_924_800_000_000 + n * 1_000_000,
        "attributes": {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": f"call_{n}",
            "gen_ai.tool.call.arguments": _text(params),
            "gen_ai.tool.call.result": _text(result),
        },
    }


def otel(calls: Sequence[Call]) -> bytes:
    return jsonl(otel_span("f1dff3754a135df4", n, *call) for n, call in enumerate(calls))


BUILDERS = {
    "loopwarden": loopwarden_record,
    "claude-code": claude_code,
    "codex": codex,
    "openclaw": openclaw,
    "chat": chat,
    "otel": otel,
}


def write(path: Path, fmt: str, calls: Sequence[Call]) -> Path:
    path.write_bytes(BUILDERS[fmt](calls))
    return path
