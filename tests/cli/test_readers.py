"""Trace readers on real files, replayed in-process through the real guard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwarden.config import load_config
from loopwarden.traces import Source, classify, read_source
from loopwarden.traces.loopwarden import MAX_OPEN_RUNS
from loopwarden.traces.replay import Replayer, RunReport

from .conftest import EXAMPLES

# The readers are checked against OpenClaw's rules alone, whose counts are easy to
# read off a trace; the extra detectors of issue 9 have tests of their own.
ENABLED: dict[str, Any] = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {
        "volatileCounters": False,
        "consecutiveRepeat": False,
        "cycle": False,
        "failureStreak": False,
    },
}


def replay(
    path: Path, config: dict[str, Any] | None = None, *, fmt: str | None = None
) -> tuple[list[RunReport], list[tuple[str, str]], str | None]:
    reports: list[RunReport] = []
    problems: list[tuple[str, str]] = []
    replayer = Replayer(
        load_config(config or ENABLED),
        on_run=reports.append,
        on_problem=lambda *p: problems.append(p),
    )
    found = read_source(
        Source(str(path), path),
        replayer,
        index=0,
        input_format=fmt,
        on_format=lambda f: replayer.set_source(str(path), f),
    )
    replayer.finish()
    return reports, problems, found


def events(report: RunReport) -> list[tuple[int, str, str, int]]:
    return [(e.call, e.action, e.detector, e.count) for e in report.events]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("claude-code", "claude-code"),
        ("codex", "codex"),
        ("openclaw", "openclaw"),
        ("chat", "chat"),
        ("otel", "otel"),
        ("loopwarden", "loopwarden"),
    ],
)
def test_examples_are_detected(folder: str, expected: str) -> None:
    """Each bundled example is detected as its format and replays without problems."""
    for path in sorted((EXAMPLES / folder).rglob("*.json*")):
        reports, problems, found = replay(path)
        assert found == expected, path
        assert problems == []
        assert reports, path


# -- Claude Code ------------------------------------------------------------------
def _cc(kind: str, n: int, message: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": f"u{n}", "sessionId": "sess", "message": message, **extra}


def _cc_call(
    n: int, tool: str, tool_input: Any, result: Any, *, error: bool = False, side: bool = False
) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"t{n}", "name": tool, "input": tool_input}
    block = {"type": "tool_result", "tool_use_id": f"t{n}", "content": result, "is_error": error}
    return [
        _cc("assistant", n, {"role": "assistant", "content": [use]}, isSidechain=side),
        _cc(
            "user",
            n + 1,
            {"role": "user", "content": [block]},
            isSidechain=side,
            toolUseResult=result if not error else f"Error: {result}",
        ),
    ]


def test_claude_code_prompts_sidechains_compaction_and_unknown_tools(tmp_path: Path) -> None:
    """Claude Code: prompts and sidechains are runs; compaction arms; unknown tools count."""
    records: list[dict[str, Any]] = [
        _cc("user", 0, {"role": "user", "content": "fix the build"}),
        _cc("user", 1, {"role": "user", "content": "<command-name>/model</command-name>"}),
    ]
    for i in range(11):  # a hallucinated tool, answered the way Claude Code answers it
        records += _cc_call(
            10 + 2 * i,
            "Deploy",
            {"env": "prod"},
            "<tool_use_error>Error: No such tool available: Deploy</tool_use_error>",
            error=True,
        )
    for i in range(12):  # a subagent stuck on its own: it must not mix with the main run
        records += _cc_call(100 + 2 * i, "Grep", {"pattern": "TODO"}, "no matches", side=True)
    records.append(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "c1",
            "sessionId": "sess",
            "content": "Conversation compacted",
        }
    )
    records.append(
        _cc(
            "user",
            300,
            {"role": "user", "content": "This session is being continued"},
            isCompactSummary=True,
        )
    )
    for i in range(3):
        records += _cc_call(400 + 2 * i, "Read", {"file_path": "/a"}, {"type": "text", "n": 1})
    records.append(
        _cc("user", 500, {"role": "user", "content": [{"type": "text", "text": "thanks"}]})
    )
    reports, problems, found = replay(write_jsonl(tmp_path / "s.jsonl", records))
    assert found == "claude-code" and problems == []
    main, second = [r for r in reports if "/sub" not in r.label]
    side = next(r for r in reports if "/sub" in r.label)
    assert main.title == "fix the build"  # the slash-command echo is not a new prompt
    # 10 identical "no such tool" errors in a row: the 11th call is blocked (rule 1).
    assert events(main)[0] == (11, "block", "unknown_tool_repeat", 10)
    # After the compaction boundary the same read with the same result 3 times aborts.
    assert main.stop is not None and main.stop.detector == "compaction_loop_persisted"
    assert main.stop.call == 14 and main.compactions == 1
    assert side.calls == 12 and events(side)[0] == (11, "warn", "generic_repeat", 10)
    assert second.title == "thanks" and second.calls == 0


def test_claude_code_structured_bash_output_ignores_background_ids(tmp_path: Path) -> None:
    """Volatile background ids in Bash output do not count as progress, so the loop is blocked."""
    records: list[dict[str, Any]] = [_cc("user", 0, {"role": "user", "content": "wait"})]
    for i in range(21):
        output = {
            "stdout": "pending",
            "stderr": "",
            "interrupted": False,
            "backgroundTaskId": f"bg{i}",
        }
        records += _cc_call(10 + 2 * i, "Bash", {"command": "check"}, output)
    reports, _, _ = replay(write_jsonl(tmp_path / "bash.jsonl", records))
    # The volatile background id is scrubbed by the Bash profile: no progress, so it blocks.
    assert (21, "block", "generic_repeat", 20) in events(reports[0])


# -- Codex --------------------------------------------------------------------------
def test_codex_scrubs_shell_wrappers_and_counts_compaction_once(tmp_path: Path) -> None:
    """Codex: shell wrappers are scrubbed from outcomes and one compaction counts once."""
    records: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "sess-9"}},
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "t1"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "run the tests"}},
    ]
    for i in range(21):
        records.append(
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "exec_command",
                    "call_id": f"c{i}",
                    "arguments": json.dumps({"cmd": "pytest"}),
                },
            }
        )
        records.append(
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": f"c{i}",
                    "output": f"Chunk ID: {i:06x}\nWall time: {i * 0.37:.4f} seconds\n"
                    "Process exited with code 1\nOutput:\n1 failed\n",
                },
            }
        )
    records.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    records.append({"type": "event_msg", "payload": {"type": "task_started", "turn_id": "t2"}})
    records.append({"type": "compacted", "payload": {"message": "summary"}})
    records.append({"type": "event_msg", "payload": {"type": "context_compacted"}})
    records.append(
        {
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "lookup",
                "call_id": "u1",
                "arguments": "{}",
            },
        }
    )
    records.append(
        {
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "u1",
                "output": {"content": "boom", "success": False},
            },
        }
    )
    records.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    reports, problems, found = replay(write_jsonl(tmp_path / "rollout.jsonl", records))
    assert found == "codex" and problems == []
    first, second = reports
    assert first.label == "t1" and first.session == "sess-9" and first.title == "run the tests"
    # Chunk ids and wall times differ on every call, yet the outcome is the same.
    assert (21, "block", "generic_repeat", 20) in events(first)
    assert second.compactions == 1  # compacted line + context_compacted event: one compaction


# -- OpenClaw -------------------------------------------------------------------------
def test_openclaw_agent_from_path_and_exec_profile(tmp_path: Path) -> None:
    """OpenClaw transcripts take the agent id from their path and hash exec results by profile."""
    folder = tmp_path / "agents" / "Night Ops" / "sessions"
    folder.mkdir(parents=True)
    records: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "s-1"},
        {
            "type": "message",
            "id": "m0",
            "parentId": None,
            "message": {"role": "user", "content": [{"type": "text", "text": "check disk"}]},
        },
    ]
    for i in range(5):
        records.append(
            {
                "type": "message",
                "id": f"a{i}",
                "parentId": "m0",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "toolCall",
                            "id": f"c{i}",
                            "name": "exec",
                            "arguments": {"command": "df -h /"},
                        }
                    ],
                },
            }
        )
        records.append(
            {
                "type": "message",
                "id": f"r{i}",
                "parentId": f"a{i}",
                "message": {
                    "role": "toolResult",
                    "toolCallId": f"c{i}",
                    "toolName": "exec",
                    "content": [{"type": "text", "text": "91%"}],
                    "details": {
                        "status": "completed",
                        "exitCode": 0,
                        "aggregated": "91%",
                        "durationMs": 10 + i,
                        "pid": 100 + i,
                    },
                },
            }
        )
    config = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {
            "list": [
                {
                    "id": "night ops",
                    "tools": {
                        "loopDetection": {
                            "warningThreshold": 2,
                            "criticalThreshold": 3,
                            "globalCircuitBreakerThreshold": 4,
                        }
                    },
                }
            ]
        },
    }
    reports, problems, found = replay(write_jsonl(folder / "s-1.jsonl", records), config)
    assert found == "openclaw" and problems == []
    run = reports[0]
    assert run.agent == "Night Ops" and run.session == "s-1" and run.title == "check disk"
    # pid and duration differ but the exec profile ignores them: the agent's
    # breaker (4) stops the 5th identical call.
    assert run.stop is not None and (run.stop.call, run.stop.detector) == (
        5,
        "global_circuit_breaker",
    )


# -- Chat / Responses / Anthropic -------------------------------------------------------
def test_chat_formats_tools_list_and_errors(tmp_path: Path) -> None:
    """Chat exports (Anthropic, Responses, Completions) replay with tools list and errors."""
    anthropic = [{"role": "user", "content": "hi"}]
    for i in range(11):
        anthropic.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"tu{i}", "name": "fetch", "input": {"url": "u"}}
                ],
            }
        )
        anthropic.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"tu{i}",
                        "content": "timeout",
                        "is_error": True,
                    }
                ],
            }
        )
    legacy = [{"role": "user", "content": "old style"}]
    for _ in range(3):
        legacy.append(
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "calc", "arguments": '{"x": 1}'},
            }
        )
        legacy.append({"role": "function", "name": "calc", "content": "2"})
    responses = {
        "input": [{"role": "user", "content": "weather?"}],
        "output": [
            {"type": "function_call", "call_id": "f1", "name": "forecast", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f1", "output": "sunny"},
            {"type": "mcp_call", "id": "m1", "name": "search", "arguments": "{}", "output": "r"},
        ],
        "tools": [{"type": "function", "name": "forecast"}],
    }
    path = write_jsonl(
        tmp_path / "dataset.jsonl", [{"messages": anthropic}, {"messages": legacy}, responses]
    )
    reports, problems, found = replay(path)
    assert found == "chat" and problems == []
    first, second, third = reports
    assert [r.label for r in reports] == ["dataset#1", "dataset#2", "dataset#3"]
    # is_error results are errors: identical errors count as no progress.
    assert (11, "warn", "generic_repeat", 10) in events(first)
    assert second.calls == 3
    # "search" is not in the tools list: the unknown-tool guard counts it (1 miss, no block).
    assert third.calls == 2 and third.title == "weather?" and third.level == "ok"


def test_chat_document_positions_in_problems(tmp_path: Path) -> None:
    """Problems inside a JSON document are reported at their JSON path."""
    doc = tmp_path / "conv.json"
    doc.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}],
                    },
                    {"role": "tool", "content": "orphan"},
                ]
            },
            indent=2,
        )
    )
    _, problems, found = replay(doc)
    assert found == "chat"
    assert problems == [
        (f"{doc}: messages[1]", "tool call without a tool name"),
        (f"{doc}: messages[2]", "tool result without a call id"),
    ]


# -- OpenTelemetry -----------------------------------------------------------------------
def test_otel_console_exporter_flat_spans_ordering_and_errors(tmp_path: Path) -> None:
    """OTel spans are replayed in start-time order per trace, with span errors as error outcomes."""
    spans = []
    for i in reversed(range(12)):  # exported out of order: replay sorts by start time
        spans.append(
            {
                "name": "execute_tool lookup",
                "context": {"trace_id": "0xabc", "span_id": f"0x{i:04x}"},
                "parent_id": "0xroot",
                "start_time": f"2026-11-03T10:00:{i:02d}.000000Z",
                "status": {"status_code": "ERROR", "description": "rate limited"},
                "attributes": {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.arguments": json.dumps({"k": i % 1}),
                },
            }
        )
    spans.append(
        {
            "name": "invoke_agent",
            "context": {"trace_id": "0xabc", "span_id": "0xroot"},
            "parent_id": None,
            "attributes": {"gen_ai.agent.name": "bot", "gen_ai.conversation.id": "conv"},
        }
    )
    # The Python SDK console exporter writes pretty JSON objects back to back.
    console = tmp_path / "console.json"
    console.write_text("\n".join(json.dumps(s, indent=4) for s in spans))
    reports, problems, found = replay(console)
    assert found == "otel" and problems == []
    run = reports[0]
    assert (run.label, run.session, run.agent, run.calls) == ("0xabc", "conv", "bot", 12)
    assert run.tools == {"lookup": 12}
    assert (11, "warn", "generic_repeat", 10) in events(run)

    flat = tmp_path / "flat.jsonl"
    write_jsonl(
        flat,
        [
            {
                "trace_id": "t1",
                "span_id": f"s{i}",
                "name": "tool",
                "attributes": {
                    "openinference.span.kind": "TOOL",
                    "tool.name": "calc",
                    "input.value": '{"a": 1}',
                    "output.value": str(i),
                },
            }
            for i in range(3)
        ],
    )
    reports, problems, found = replay(flat)
    assert found == "otel" and reports[0].calls == 3 and reports[0].level == "ok"


# -- loopwarden run records ------------------------------------------------------------
def test_interleaved_run_record_keeps_open_runs_bounded(tmp_path: Path) -> None:
    """Runs are closed when too many are open, so memory does not grow with the file."""
    path = tmp_path / "many.jsonl"
    total = MAX_OPEN_RUNS * 3
    with path.open("w") as handle:
        for step in range(3):
            for run in range(total):  # every run active in each of three rounds
                rid = f"r{run}"
                handle.write(
                    json.dumps(
                        {
                            "type": "call",
                            "run_id": rid,
                            "call_id": f"{step}",
                            "tool": "t",
                            "args_hash": "t:1",
                        }
                    )
                    + "\n"
                )
                handle.write(
                    json.dumps(
                        {
                            "type": "outcome",
                            "run_id": rid,
                            "call_id": f"{step}",
                            "tool": "t",
                            "args_hash": "t:1",
                            "outcome_hash": "o",
                        }
                    )
                    + "\n"
                )
    peak = 0
    reports: list[RunReport] = []

    def on_run(report: RunReport) -> None:
        nonlocal peak
        peak = max(peak, replayer.open_runs() + 1)
        reports.append(report)

    replayer = Replayer(load_config(ENABLED), on_run=on_run, on_problem=lambda *p: None)
    read_source(Source(str(path), path), replayer, index=0)
    replayer.finish()
    assert peak <= MAX_OPEN_RUNS
    assert sum(r.calls for r in reports) == total * 3


def test_classify_records() -> None:
    """One record is enough to tell each format apart, and unrelated JSON is no format."""
    assert classify({"type": "call", "run_id": "r"}) == "loopwarden"
    assert classify({"type": "response_item", "payload": {}}) == "codex"
    assert classify({"type": "session", "id": "x", "version": 3}) == "openclaw"
    assert classify({"type": "user", "sessionId": "s", "message": {}}) == "claude-code"
    assert classify({"resourceSpans": []}) == "otel"
    assert classify([{"role": "user", "content": "x"}]) == "chat"
    assert classify({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}) == (
        "claude-code"
    )
    assert classify({"cpu": 1}) is None


def test_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    """A byte-order mark and CRLF line ends do not stop a JSONL trace from replaying."""
    source = (EXAMPLES / "chat" / "weather-responses.jsonl").read_bytes()
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + source.replace(b"\n", b"\r\n"))
    reports, problems, found = replay(path)
    assert (found, problems, reports[0].calls) == ("chat", [], 2)
