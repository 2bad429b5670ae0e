"""Token usage as each trace format records it, read by the readers and summed by ``tune``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loopwarden.config import load_config
from loopwarden.fleet import plan_shards
from loopwarden.tune import TuneOutcome, build_candidates, grid_changes, parse_grid, tune

from .corpus import write_jsonl

# OpenClaw's rules alone, so that the grid's thresholds decide (the runtime guard's
# own rules would block both candidates at the 6th identical call in a row).
BASE = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {"consecutiveRepeat": False, "cycle": False, "failureStreak": False},
}
# Warn at 3 and block at 6 identical calls, or never block (20) on 14-call runs.
GRID = ["warningThreshold=3", "criticalThreshold=6,20"]


def _tune(folder: Path) -> TuneOutcome:
    # The figures of the grid's configs only: no baseline (C0) in front of them.
    candidates = build_candidates(load_config(BASE), grid_changes(parse_grid(GRID)), baseline=False)
    return tune(plan_shards([str(folder)]), candidates, workers=1)


def _claude(stuck: int, usage: dict[str, int] | None) -> list[dict[str, Any]]:
    session = "0a3c6c1e-5b38-4c4e-9b1e-3f2d2f1d9a10"
    base = {"sessionId": session, "isSidechain": False}
    records: list[dict[str, Any]] = [
        {**base, "type": "user", "uuid": "u0", "message": {"role": "user", "content": "wait"}}
    ]
    for n in range(stuck):
        message: dict[str, Any] = {"id": f"msg_{n}", "role": "assistant"}
        if usage is not None:
            message["usage"] = usage
        # One response in two records (thinking, then the call): its usage counts once.
        thinking = {**message, "content": [{"type": "thinking", "thinking": "again"}]}
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": "ci"}}
        records.append({**base, "type": "assistant", "uuid": f"a{n}", "message": thinking})
        records.append(
            {
                **base,
                "type": "assistant",
                "uuid": f"b{n}",
                "message": {**message, "content": [call]},
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "running"}
        records.append(
            {
                **base,
                "type": "user",
                "uuid": f"r{n}",
                "message": {"role": "user", "content": [result]},
            }
        )
    return records


def test_claude_code_usage_counts_each_response_once(tmp_path: Path) -> None:
    """input + output + cache tokens of each message.id, once however many records carry it."""
    usage = {"input_tokens": 90, "output_tokens": 4, "cache_read_input_tokens": 6}
    write_jsonl(tmp_path / "session.jsonl", _claude(14, usage))
    outcome = _tune(tmp_path)
    assert outcome.corpus.runs_with_usage == 1 and outcome.corpus.tokens == 14 * 100
    # Blocking at 6 prevents calls 7..14: eight whole responses.
    assert [s.calls_prevented for s in outcome.stats] == [8, 0]
    assert [s.prevented_tokens for s in outcome.stats] == [800, 0]


def test_codex_token_count_is_the_cost_of_the_calls_before_it(tmp_path: Path) -> None:
    """A token_count event after each response prices the calls that came before it."""
    records: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "codex-session"}},
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "turn_1"}},
    ]
    for n in range(14):
        call = {
            "type": "function_call",
            "name": "exec_command",
            "call_id": f"c{n}",
            "arguments": json.dumps({"cmd": "make deploy"}),
        }
        output = {"type": "function_call_output", "call_id": f"c{n}", "output": "busy"}
        usage = {"input_tokens": 95, "output_tokens": 5, "total_tokens": 100}
        count = {"type": "token_count", "info": {"last_token_usage": usage}}
        records += [
            {"type": "response_item", "payload": call},
            {"type": "response_item", "payload": output},
            {"type": "event_msg", "payload": count},
        ]
    records.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    write_jsonl(tmp_path / "rollout.jsonl", records)
    outcome = _tune(tmp_path)
    assert outcome.corpus.runs_with_usage == 1 and outcome.corpus.tokens == 1400
    assert [s.prevented_tokens for s in outcome.stats] == [800, 0]


def test_openclaw_usage_of_assistant_messages(tmp_path: Path) -> None:
    """OpenClaw's usage (totalTokens, or input + output + cache) prices each assistant turn."""
    records: list[dict[str, Any]] = [
        {"type": "session", "id": "claw-session"},
        {
            "type": "message",
            "id": "m0",
            "parentId": None,
            "message": {"role": "user", "content": [{"type": "text", "text": "check"}]},
        },
    ]
    usages = [{"totalTokens": 70}, {"input": 40, "output": 5, "cacheRead": 5}]
    for n in range(2):
        call = {"type": "toolCall", "id": f"k{n}", "name": "read", "arguments": {"path": f"{n}"}}
        assistant = {"role": "assistant", "content": [call], "usage": usages[n]}
        result = {"role": "toolResult", "toolCallId": f"k{n}", "content": [], "isError": False}
        records += [
            {"type": "message", "id": f"a{n}", "parentId": "m0", "message": assistant},
            {"type": "message", "id": f"r{n}", "parentId": f"a{n}", "message": result},
        ]
    write_jsonl(tmp_path / "claw.jsonl", records)
    outcome = _tune(tmp_path)
    assert outcome.corpus.runs_with_usage == 1 and outcome.corpus.tokens == 120


def test_a_trace_without_usage_is_not_recorded(tmp_path: Path) -> None:
    """No usage anywhere: no token figure at all, never an estimate."""
    write_jsonl(tmp_path / "session.jsonl", _claude(14, None))
    outcome = _tune(tmp_path)
    assert outcome.corpus.runs_with_usage == 0 and outcome.corpus.tokens == 0
    assert [s.prevented_without_usage for s in outcome.stats] == [8, 0]
