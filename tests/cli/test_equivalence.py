"""Replay must report exactly what the live runtime guard did with the same config.

A scripted agent runs through a real :class:`LoopGuard` that writes a JSONL run
record; the events the live guard emitted (with the index of the call that
caused them) are compared with what ``loopwarden replay`` reports for the
record (hashed replay) and for the same calls exported as a Chat Completions
message list (replay that hashes raw params and results).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import loopwarden as lw

from .conftest import replay_json

CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 3,
            "criticalThreshold": 6,
            "globalCircuitBreakerThreshold": 9,
        }
    }
}
SETS = ["--set", "warningThreshold=3", "--set", "criticalThreshold=6"]
SETS += ["--set", "globalCircuitBreakerThreshold=9"]


def scenario() -> Iterator[tuple[str, list[Any]]]:
    """Runs as (run id, steps); a step is (tool, params, result) or "compaction"."""
    yield "stuck-poll", [("read", {"path": "a"}, "A")] + [("status", {"job": 7}, "pending")] * 14
    yield (
        "ping-pong",
        [("open", {"id": 1}, "x"), ("close", {"id": 1}, "y")] * 8,
    )
    yield (
        "progressing",
        [("status", {"job": 7}, f"{i}% done") for i in range(12)],
    )
    yield (
        "compaction",
        [("grep", {"q": "err"}, "none"), "compaction"] + [("grep", {"q": "err"}, "none")] * 4,
    )
    yield (
        "mixed",
        [("search", {"q": "a"}, "r1"), ("search", {"q": "b"}, "r2")] * 2
        + [("search", {"q": "a"}, "r1")] * 9
        + [("edit", {"f": "x", "n": i}, "ok") for i in range(3)],
    )


def run_live(record: Path) -> list[tuple[str, int, str, str, int]]:
    """Play the scenario through the real guard; returns (run, call, action, detector, count)."""
    current: dict[str, Any] = {}
    seen: list[tuple[str, int, str, str, int]] = []

    def on_event(event: lw.LoopEvent) -> None:
        seen.append((current["run"], current["index"], event.action, event.detector, event.count))

    guard = lw.LoopGuard(CONFIG, run_record=record, on_event=on_event)
    for run_id, steps in scenario():
        run = guard.run(run_id)
        current["run"], current["index"] = run_id, 0
        try:
            for number, step in enumerate(steps):
                if step == "compaction":
                    run.on_compaction()
                    continue
                tool, params, result = step
                current["index"] += 1
                call_id = f"{run_id}-{number}"
                decision = run.before_call(tool, params, call_id=call_id)
                if not decision.blocked:
                    run.after_call(tool, params, call_id=call_id, result=result)
        except lw.LoopAbort:
            pass
        run.end()
    guard.close()
    return seen


def chat_export(path: Path) -> None:
    """The same runs as Chat Completions conversations, one per JSONL line."""
    with path.open("w") as handle:
        for run_id, steps in scenario():
            messages: list[dict[str, Any]] = [{"role": "user", "content": run_id}]
            for number, step in enumerate(steps):
                if step == "compaction":
                    messages.append({"type": "compaction", "id": f"cmp-{number}"})
                    continue
                tool, params, result = step
                call_id = f"{run_id}-{number}"
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": tool, "arguments": json.dumps(params)},
                            }
                        ],
                    }
                )
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            handle.write(json.dumps({"id": run_id, "messages": messages}) + "\n")


def replayed(report: dict[str, Any]) -> list[tuple[str, int, str, str, int]]:
    return [
        (run["run"], event["call"], event["action"], event["detector"], event["count"])
        for run in report["runs"]
        for event in run["events"]
    ]


def test_replay_of_run_record_matches_live_guard(tmp_path: Path) -> None:
    """Replaying a live run record gives exactly the live guard's decisions, at every step."""
    record = tmp_path / "runs.jsonl"
    live = run_live(record)
    # The scenario exercises every escalation step.
    actions = {action for _, _, action, _, _ in live}
    assert actions == {"warn", "block", "stop", "abort"}
    assert {detector for *_, detector, _ in live} >= {
        "generic_repeat",
        "ping_pong",
        "global_circuit_breaker",
        "compaction_loop_persisted",
    }

    report = replay_json(str(record), *SETS)
    assert {i["format"] for i in report["inputs"]} == {"loopwarden"}
    assert replayed(report) == live
    # The record's own event lines (the live decisions) are counted per run.
    assert sum(run["live_events"] for run in report["runs"]) == len(live)


def test_replay_of_chat_export_matches_live_guard(tmp_path: Path) -> None:
    """Replaying the same runs exported as chat conversations gives the live guard's decisions."""
    live = run_live(tmp_path / "runs.jsonl")
    export = tmp_path / "conversations.jsonl"
    chat_export(export)
    report = replay_json(str(export), *SETS)
    assert {i["format"] for i in report["inputs"]} == {"chat"}
    assert [run["run"] for run in report["runs"]] == [run_id for run_id, _ in scenario()]
    assert replayed(report) == live


def test_poll_params_in_record_keep_poll_rules(tmp_path: Path) -> None:
    """With logParams the record holds params, so `process` polls use the poll rules."""
    record = tmp_path / "polls.jsonl"
    seen: list[tuple[str, int]] = []
    guard = lw.LoopGuard(
        CONFIG,
        run_record=record,
        log_params=True,
        on_event=lambda e: seen.append((e.detector, e.count)),
    )
    run = guard.run("poller")
    try:
        for index in range(12):
            params = {"action": "poll", "sessionId": "s1"}
            result = {
                "content": [{"type": "text", "text": "running"}],
                "details": {"status": "running"},
            }
            decision = run.before_call("process", params, call_id=f"p{index}")
            if not decision.blocked:
                run.after_call("process", params, call_id=f"p{index}", result=result)
    except lw.LoopAbort:
        pass
    guard.close()
    assert {detector for detector, _ in seen} >= {"known_poll_no_progress"}
    report = replay_json(str(record), *SETS)
    assert [(e["detector"], e["count"]) for e in report["runs"][0]["events"]] == seen


def test_poll_flag_keeps_poll_rules_without_params(tmp_path: Path) -> None:
    """Without logParams the record's `poll` flag tells replay that `process` calls poll."""
    record = tmp_path / "polls.jsonl"
    seen: list[tuple[str, int]] = []
    guard = lw.LoopGuard(
        CONFIG, run_record=record, on_event=lambda e: seen.append((e.detector, e.count))
    )
    run = guard.run("poller")
    result = {"content": [{"type": "text", "text": "running"}], "details": {"status": "running"}}
    try:
        for index in range(12):
            params = {"action": "poll", "sessionId": "s1"}
            if not run.before_call("process", params, call_id=f"p{index}").blocked:
                run.after_call("process", params, call_id=f"p{index}", result=result)
    except lw.LoopAbort:
        pass
    guard.close()
    assert "params" not in record.read_text().replace('"params":null', "")
    assert {detector for detector, _ in seen} == {
        "known_poll_no_progress",
        "global_circuit_breaker",
    }
    report = replay_json(str(record), *SETS)
    assert [(e["detector"], e["count"]) for e in report["runs"][0]["events"]] == seen


def test_run_end_lines_separate_runs_with_one_id(tmp_path: Path) -> None:
    """A run id used again after run.end() is a new run in replay, as it was live."""
    record = tmp_path / "reused.jsonl"
    guard = lw.LoopGuard(CONFIG, run_record=record)
    for _ in range(2):
        with guard.run("nightly") as run:
            for index in range(4):
                run.before_call("status", {"job": 1}, call_id=str(index))
                run.after_call("status", {"job": 1}, call_id=str(index), result="pending")
    guard.close()
    report = replay_json(str(record), *SETS)
    assert [(run["run"], run["calls"]) for run in report["runs"]] == [
        ("nightly", 4),
        ("nightly", 4),
    ]
