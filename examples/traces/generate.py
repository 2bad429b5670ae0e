"""Regenerate the example traces in this folder: ``python examples/traces/generate.py``.

Each file imitates what the agent or exporter writes (field names and nesting
as in real transcripts, shortened), so ``loopwarden replay examples/traces``
shows every format, a stuck loop, a ping-pong, an unknown tool, a loop that
survives a context compaction, and healthy runs. The loopwarden run record is
written by the real runtime guard.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
START = _dt.datetime(2026, 11, 3, 9, 12, 4, tzinfo=_dt.UTC)


class Clock:
    def __init__(self, start: _dt.datetime = START) -> None:
        self.now = start

    def tick(self, seconds: float = 2.5) -> str:
        self.now += _dt.timedelta(seconds=seconds)
        return self.now.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def nanos(self, seconds: float = 1.0) -> str:
        self.now += _dt.timedelta(seconds=seconds)
        return str(int(self.now.timestamp() * 1e9))


def ident(seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


# -- Claude Code ---------------------------------------------------------------------
def claude_code() -> None:
    """Session 1: waits for a CI run by polling it again and again (stuck); then a healthy turn."""
    session = ident("cc-session-deploy")
    clock = Clock()
    records: list[dict[str, Any]] = [
        {"type": "summary", "summary": "Wait for CI and ship the release", "leafUuid": ident("x")}
    ]
    parent: str | None = None
    n = 0

    def base(kind: str) -> dict[str, Any]:
        nonlocal parent, n
        n += 1
        uid = ident(f"cc-{n}")
        record = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/home/dev/shop",
            "sessionId": session,
            "version": "2.1.332",
            "gitBranch": "release/4.2",
            "type": kind,
            "uuid": uid,
            "timestamp": clock.tick(),
        }
        parent = uid
        return record

    def prompt(text: str) -> None:
        record = base("user")
        record["message"] = {"role": "user", "content": text}
        record["promptId"] = ident(f"prompt-{n}")
        records.append(record)

    def tool(name: str, tool_input: dict[str, Any], output: Any, *, error: bool = False) -> None:
        call_id = f"toolu_01{n:04d}{'A' * 18}"[:30]
        assistant = base("assistant")
        assistant["message"] = {
            "id": f"msg_01{n:05d}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": call_id, "name": name, "input": tool_input}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 2400 + 180 * n, "output_tokens": 61},
        }
        assistant["requestId"] = f"req_{n:06d}"
        records.append(assistant)
        user = base("user")
        text = output if isinstance(output, str) else output.get("stdout", "")
        user["message"] = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
            ],
        }
        user["toolUseResult"] = f"Error: {text}" if error else output
        user["sourceToolAssistantUUID"] = assistant["uuid"]
        records.append(user)

    def say(text: str) -> None:
        record = base("assistant")
        record["message"] = {
            "id": f"msg_01{n:05d}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
        }
        records.append(record)

    prompt("CI for release/4.2 is running. Wait until it finishes, then tag v4.2.0.")
    tool(
        "Bash",
        {"command": "gh run list --branch release/4.2 --limit 1", "description": "Find CI run"},
        {
            "stdout": "in_progress  CI  release/4.2  push  7781  4m",
            "stderr": "",
            "interrupted": False,
            "isImage": False,
        },
    )
    for _ in range(34):
        tool(
            "Bash",
            {"command": "gh run view 7781 --json status -q .status", "description": "Check CI"},
            {"stdout": "in_progress", "stderr": "", "interrupted": False, "isImage": False},
        )
    say("CI is still in progress; I will keep checking.")
    prompt("Stop polling. Bump the version in pyproject.toml to 4.2.0 and run the tests.")
    tool(
        "Read",
        {"file_path": "/home/dev/shop/pyproject.toml"},
        {"type": "text", "file": {"filePath": "/home/dev/shop/pyproject.toml", "numLines": 48}},
    )
    tool(
        "Edit",
        {
            "file_path": "/home/dev/shop/pyproject.toml",
            "old_string": 'version = "4.1.3"',
            "new_string": 'version = "4.2.0"',
        },
        {"filePath": "/home/dev/shop/pyproject.toml", "structuredPatch": [{"lines": 2}]},
    )
    tool(
        "Bash",
        {"command": "pytest -q", "description": "Run tests"},
        {"stdout": "212 passed in 9.81s", "stderr": "", "interrupted": False, "isImage": False},
    )
    tool(
        "TodoWrite",
        {"todos": [{"content": "tag v4.2.0", "status": "pending"}]},
        "Todos have been modified successfully.",
        error=False,
    )
    say("Version bumped to 4.2.0 and all 212 tests pass.")
    write_jsonl(HERE / "claude-code" / f"{session}.jsonl", records)


# -- Codex CLI -----------------------------------------------------------------------
def codex() -> None:
    """A healthy turn, then a turn that retries an unsupported tool, auto-compacts and goes on."""
    session = ident("codex-session")
    clock = Clock(START + _dt.timedelta(hours=2))
    records: list[dict[str, Any]] = []
    ordinal = 0

    def line(kind: str, payload: dict[str, Any]) -> None:
        nonlocal ordinal
        ordinal += 1
        records.append(
            {"timestamp": clock.tick(1.7), "ordinal": ordinal, "type": kind, "payload": payload}
        )

    line(
        "session_meta",
        {
            "id": session,
            "timestamp": clock.tick(0),
            "cwd": "/home/dev/api",
            "originator": "codex_cli_rs",
            "cli_version": "0.169.0",
            "model_provider": "openai",
        },
    )
    calls = 0

    def exec_call(cmd: str, output: str, exit_code: int = 0) -> None:
        nonlocal calls
        calls += 1
        call_id = f"call_{calls:03d}xQ"
        line(
            "response_item",
            {
                "type": "function_call",
                "id": f"fc_{calls:03d}",
                "name": "exec_command",
                "call_id": call_id,
                "arguments": json.dumps({"cmd": cmd, "yield_time_ms": 10000}),
            },
        )
        line(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": f"Chunk ID: {uuid.uuid5(uuid.NAMESPACE_DNS, str(calls)).hex[:6]}\n"
                f"Wall time: {0.05 * calls:.4f} seconds\n"
                f"Process exited with code {exit_code}\nOriginal token count: "
                f"{len(output) // 4}\nOutput:\n{output}\n",
            },
        )

    def turn(turn_id: str, prompt: str) -> None:
        line(
            "event_msg",
            {"type": "task_started", "turn_id": turn_id, "model_context_window": 272000},
        )
        line(
            "turn_context",
            {
                "turn_id": turn_id,
                "cwd": "/home/dev/api",
                "model": "gpt-5-codex",
                "approval_policy": "on-request",
            },
        )
        line(
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": prompt}],
            },
        )
        line("event_msg", {"type": "user_message", "message": prompt, "kind": "plain"})

    turn("turn_01", "Add a /healthz endpoint and a test for it.")
    exec_call("rg -n 'APIRouter' src | head", "src/api/routes.py:3:router = APIRouter()")
    exec_call("sed -n 1,40p src/api/routes.py", "from fastapi import APIRouter\n...")
    calls += 1
    line(
        "response_item",
        {
            "type": "custom_tool_call",
            "call_id": f"call_{calls:03d}xQ",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: src/api/routes.py\n"
            "+@router.get('/healthz')\n*** End Patch",
        },
    )
    line(
        "response_item",
        {
            "type": "custom_tool_call_output",
            "call_id": f"call_{calls:03d}xQ",
            "output": "Success. Updated the following files:\nM src/api/routes.py",
        },
    )
    exec_call("pytest -q tests/test_health.py", "1 passed in 0.41s")
    line("event_msg", {"type": "task_complete", "last_agent_message": "Added /healthz."})

    turn("turn_02", "Deploy the branch to staging.")
    for attempt in range(12):
        calls += 1
        call_id = f"call_{calls:03d}xQ"
        line(
            "response_item",
            {
                "type": "function_call",
                "name": "deploy_staging",
                "call_id": call_id,
                "arguments": json.dumps({"branch": "feat/healthz"}),
            },
        )
        line(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": "unsupported call: deploy_staging",
            },
        )
        if attempt == 5:
            line(
                "compacted",
                {
                    "message": "Another language model started to solve this "
                    "problem and produced a summary of its thinking process..."
                },
            )
            line("event_msg", {"type": "context_compacted"})
    exec_call("make deploy-staging", "deploying feat/healthz to staging... done", 0)
    line("event_msg", {"type": "task_complete", "last_agent_message": "Deployed."})
    write_jsonl(HERE / "codex" / f"rollout-2026-11-03T11-12-04-{session}.jsonl", records)


# -- OpenClaw ------------------------------------------------------------------------
def openclaw() -> None:
    """A ping-pong between two reads, then a build log re-read after compaction (aborted)."""
    session = ident("openclaw-session")
    clock = Clock(START + _dt.timedelta(hours=5))
    records: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 3,
            "id": session,
            "timestamp": clock.tick(0),
            "cwd": "/srv/agents/ops",
        }
    ]
    parent = None
    count = 0

    def entry(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal parent, count
        count += 1
        eid = uuid.uuid5(uuid.NAMESPACE_OID, f"oc-{count}").hex[:8]
        record = {"type": kind, "id": eid, "parentId": parent, "timestamp": clock.tick(), **fields}
        parent = eid
        records.append(record)
        return record

    def user(text: str) -> None:
        entry(
            "message",
            message={
                "role": "user",
                "content": [{"type": "text", "text": text}],
                "timestamp": 1793000000000 + count,
            },
        )

    def call(
        name: str,
        arguments: dict[str, Any],
        text: str,
        details: dict[str, Any],
        error: bool = False,
    ) -> None:
        call_id = f"toolu_{count:04d}"
        entry(
            "message",
            message={
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}
                ],
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "stopReason": "toolUse",
            },
        )
        entry(
            "message",
            message={
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": name,
                "content": [{"type": "text", "text": text}],
                "details": details,
                "isError": error,
            },
        )

    user("The nightly backup job failed. Find out why.")
    call(
        "read",
        {"path": "/var/log/backup/nightly.log"},
        "ERROR: lock held by pid 4121",
        {"status": "ok", "bytes": 2214},
    )
    for _ in range(11):
        call("read", {"path": "/var/run/backup.lock"}, "4121", {"status": "ok", "bytes": 5})
        call(
            "exec",
            {"command": "ps -p 4121 -o comm="},
            "backup-agent",
            {
                "status": "completed",
                "exitCode": 0,
                "aggregated": "backup-agent",
                "durationMs": 31,
                "pid": 8000 + count,
            },
        )
    user("Rebuild the backup-agent image and check the build log.")
    call(
        "exec",
        {"command": "make -C images backup-agent"},
        "build started",
        {"status": "completed", "exitCode": 0, "aggregated": "build started", "durationMs": 912},
    )
    call(
        "read",
        {"path": "/srv/build/backup-agent.log"},
        "step 7/9: RUN pip install ... (waiting)",
        {"status": "ok", "bytes": 40211},
    )
    entry(
        "compaction",
        summary="Investigated nightly backup failure: stale lock held by pid "
        "4121; rebuilding backup-agent.",
        firstKeptEntryId=parent,
        tokensBefore=181233,
    )
    for _ in range(4):
        call(
            "read",
            {"path": "/srv/build/backup-agent.log"},
            "step 7/9: RUN pip install ... (waiting)",
            {"status": "ok", "bytes": 40211},
        )
    write_jsonl(HERE / "openclaw" / "agents" / "ops" / "sessions" / f"{session}.jsonl", records)


# -- Chat Completions / Responses ------------------------------------------------------
def chat() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "send_reply",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        },
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are the support agent of Acme Shop."},
        {"role": "user", "content": "Order A-1042 arrived broken, I want my money back."},
    ]
    n = 0

    def call(name: str, args: dict[str, Any], result: str) -> None:
        nonlocal n
        n += 1
        call_id = f"call_{n:02d}Zr8"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})

    call(
        "lookup_order",
        {"order_id": "A-1042"},
        json.dumps({"order_id": "A-1042", "status": "delivered", "total": 89.9}),
    )
    for _ in range(13):
        call(
            "refund_order",
            {"order_id": "A-1042", "reason": "damaged"},
            "Error: refund_order is not a valid tool, try one of [lookup_order, send_reply].",
        )
    call("send_reply", {"text": "I have asked a colleague to process your refund."}, "sent")
    messages.append({"role": "assistant", "content": "A colleague will process your refund."})
    path = HERE / "chat" / "support-refund.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"id": "conv_support_1042", "tools": tools, "messages": messages}, indent=2)
        + "\n",
        encoding="utf-8",
    )

    # Responses items as openai-agents' result.to_input_list() returns them: one healthy run.
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "What's the weather in Lisbon and Porto tomorrow?"}
    ]
    for index, city in enumerate(("Lisbon", "Porto"), 1):
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_w{index}",
                "name": "get_forecast",
                "arguments": json.dumps({"city": city, "day": "tomorrow"}),
                "id": f"fc_w{index}",
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": f"call_w{index}",
                "output": json.dumps({"city": city, "high": 21 - index, "sky": "sunny"}),
            }
        )
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_w3",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Sunny in both cities."}],
        }
    )
    write_jsonl(HERE / "chat" / "weather-responses.jsonl", items)


# -- OpenTelemetry -----------------------------------------------------------------------
def otel() -> None:
    clock = Clock(START + _dt.timedelta(hours=8))

    def attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for key, value in values.items():
            if isinstance(value, bool):
                out.append({"key": key, "value": {"boolValue": value}})
            elif isinstance(value, int):
                out.append({"key": key, "value": {"intValue": str(value)}})
            else:
                out.append({"key": key, "value": {"stringValue": value}})
        return out

    def trace(
        trace_no: int, conversation: str, calls: list[tuple[str, dict[str, Any], str]]
    ) -> list[dict[str, Any]]:
        trace_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"trace-{trace_no}").hex
        root = uuid.uuid5(uuid.NAMESPACE_DNS, f"root-{trace_no}").hex[:16]
        spans = []
        start = clock.nanos(0)
        for index, (tool, args, result) in enumerate(calls, 1):
            span_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"span-{trace_no}-{index}").hex[:16]
            spans.append(
                {
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": root,
                    "name": f"execute_tool {tool}",
                    "kind": 1,
                    "startTimeUnixNano": clock.nanos(0.8),
                    "endTimeUnixNano": clock.nanos(0.6),
                    "attributes": attrs(
                        {
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": tool,
                            "gen_ai.tool.call.id": f"call_{trace_no}_{index}",
                            "gen_ai.tool.type": "function",
                            "gen_ai.tool.call.arguments": json.dumps(args),
                            "gen_ai.tool.call.result": result,
                            "gen_ai.conversation.id": conversation,
                        }
                    ),
                    "status": {"code": 0},
                }
            )
        spans.append(
            {
                "traceId": trace_id,
                "spanId": root,
                "parentSpanId": "",
                "name": "invoke_agent researcher",
                "kind": 1,
                "startTimeUnixNano": start,
                "endTimeUnixNano": clock.nanos(1.0),
                "attributes": attrs(
                    {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "researcher",
                        "gen_ai.conversation.id": conversation,
                    }
                ),
                "status": {"code": 0},
            }
        )
        return spans

    search = (
        "web_search",
        {"query": "loopwarden release notes 0.1"},
        json.dumps({"results": [], "note": "no results"}),
    )
    stuck = trace(
        1,
        "conv_research_7",
        [search] * 12 + [("write_note", {"text": "No release notes found."}, "saved")],
    )
    healthy = trace(
        2,
        "conv_research_8",
        [
            (
                "web_search",
                {"query": "OpenClaw tool loop detection"},
                json.dumps({"results": [1, 2]}),
            ),
            ("fetch_page", {"url": "https://docs.openclaw.ai/tools/loop-detection"}, "<html>..."),
            ("write_note", {"text": "Summary of loop detection."}, "saved"),
        ],
    )
    export = {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs({"service.name": "research-agent"})},
                "scopeSpans": [
                    {
                        "scope": {"name": "opentelemetry.instrumentation.genai"},
                        "spans": stuck + healthy,
                    }
                ],
            }
        ]
    }
    path = HERE / "otel" / "research-agent-spans.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(export, indent=1) + "\n", encoding="utf-8")


# -- loopwarden run record ------------------------------------------------------------------
def loopwarden_record() -> None:
    """Two runs recorded by the real guard: a send loop stopped by the breaker, and a quick one."""
    import loopwarden as lw

    path = HERE / "loopwarden" / "run-record.jsonl"
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    guard = lw.LoopGuard(
        {"tools": {"loopDetection": {"enabled": True}}}, run_record=path, agent_id="notifier"
    )
    run = guard.run("run-notify-0931", session_id="sess-ops-17")
    for index in range(34):
        call_id = f"call_{index:03d}"
        params = {"action": "send", "to": "#ops-alerts", "text": "Backup failed on db-2"}
        try:
            decision = run.before_call("message", params, call_id=call_id)
        except lw.CircuitBreakerTripped:
            break
        if not decision.blocked:
            run.after_call(
                "message",
                params,
                call_id=call_id,
                result={
                    "content": [{"type": "text", "text": "sent"}],
                    "details": {
                        "ok": True,
                        "channel": "#ops-alerts",
                        "messageId": f"m{index}",
                        "ts": 1793000000 + index,
                    },
                },
            )
    run.end()
    quick = guard.run("run-notify-0932", session_id="sess-ops-17")
    for index, params in enumerate([{"path": "/etc/backup.conf"}, {"path": "/var/log/db-2.log"}]):
        quick.before_call("read", params, call_id=f"r{index}")
        quick.after_call("read", params, call_id=f"r{index}", result=f"contents {index}")
    quick.end()
    guard.close()


if __name__ == "__main__":
    claude_code()
    codex()
    openclaw()
    chat()
    otel()
    loopwarden_record()
    print(f"wrote example traces under {HERE}")
