"""`loopwarden replay --format otlp-json`: the replayed decisions as OTLP traces.

The real CLI replays the example traces; each output line decodes strictly as
an ``ExportTraceServiceRequest``, agrees with the JSON report of the same
replay, and is accepted by an OTLP/HTTP endpoint as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto")

import loopwarden as lw
from tests.cli.conftest import EXAMPLES, replay_json, run_cli
from tests.telemetry._common import CANARY, SMALL
from tests.telemetry._receiver import decode_json, otlp_receiver


def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in items}


def otlp_lines(*args: str) -> list[str]:
    done = run_cli(["replay", *args, "--format", "otlp-json"])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout.splitlines()


def test_each_run_is_a_trace_that_agrees_with_the_json_report() -> None:
    """Per run: a root span, a span per decided call, the events on their calls, the stop."""
    report = replay_json(str(EXAMPLES))
    lines = otlp_lines(str(EXAMPLES))
    assert len(lines) == len(report["runs"]) > 5
    seen_events = 0
    for line, run in zip(lines, report["runs"], strict=True):
        decode_json("/v1/traces", line.encode())  # strict: unknown fields fail
        (resource_spans,) = json.loads(line)["resourceSpans"]
        root, *calls = resource_spans["scopeSpans"][0]["spans"]
        root_attrs = attrs(root["attributes"])
        assert root_attrs["loopwarden.run_id"] == run["run"]
        assert root_attrs["loopwarden.source"] == run["source"]["file"]
        assert root_attrs["loopwarden.calls"] == str(run["calls"])
        assert root_attrs["loopwarden.verdict"] == run["verdict"]
        if run["session"] is not None:
            assert root_attrs["gen_ai.conversation.id"] == run["session"]
        assert len(calls) == run["calls"] - run["calls_after_stop"]
        assert {c["parentSpanId"] for c in calls} <= {root["spanId"]}
        starts = [int(c["startTimeUnixNano"]) for c in calls]
        assert starts == sorted(starts)
        on_calls = [
            (index, event["name"])
            for index, call in enumerate(calls, start=1)
            for event in call["events"]
        ]
        assert on_calls == [(e["call"], f"loopwarden.{e['action']}") for e in run["events"]]
        seen_events += len(on_calls)
        for event in run["events"]:
            call = calls[event["call"] - 1]
            call_attrs = attrs(call["attributes"])
            assert call_attrs["gen_ai.tool.name"] == event["tool"]
            if event["action"] != "abort":
                assert call_attrs["loopwarden.action"] == event["action"]
            if event["action"] in ("abort", "stop"):  # the stop code names the rule
                assert call["status"] == {"code": 2, "message": event["detector"]}
    assert seen_events > 5


def test_the_output_is_reimported_over_otlp_http(tmp_path: Path) -> None:
    """Every line, posted as it is to an OTLP/HTTP endpoint, arrives with all its spans."""
    out = tmp_path / "spans.jsonl"
    done = run_cli(["replay", str(EXAMPLES), "--format", "otlp-json", "-o", str(out)])
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    with otlp_receiver() as receiver:
        for line in lines:
            assert receiver.post_json("/v1/traces", line) == 200
        received = receiver.messages("/v1/traces")
    assert len(received) == len(lines)
    for line, message in zip(lines, received, strict=True):
        spans = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        got = message.resource_spans[0].scope_spans[0].spans  # type: ignore[attr-defined]
        assert [s.name for s in got] == [s["name"] for s in spans]
        assert [len(s.events) for s in got] == [len(s["events"]) for s in spans]
        assert [s.trace_id.hex() for s in got] == [s["traceId"] for s in spans]


def test_a_run_record_with_logged_params_leaks_nothing(tmp_path: Path) -> None:
    """Replaying a run record that holds raw params and results writes no byte of them."""
    record = tmp_path / "run.jsonl"
    guard = lw.LoopGuard(SMALL, run_record=record, log_params=True, agent_id="poller")
    run = guard.run("r1", session_id="s1")
    try:
        for i in range(10):
            decision = run.before_call("fetch", {"token": CANARY}, f"c{i}")
            if not decision.blocked:
                run.after_call("fetch", {"token": CANARY}, f"c{i}", result=f"{CANARY} pending")
    except lw.LoopAbort:
        pass
    guard.close()
    assert CANARY in record.read_text()  # so the check below can fail
    lines = otlp_lines(str(record), "--config", str(_small_config(tmp_path)))
    assert len(lines) == 1 and CANARY not in lines[0]
    spans = json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [attrs(s["attributes"]).get("loopwarden.action") for s in spans[1:]] == [
        "allow", "allow", "allow", "warn", "allow", "block", "block", "stop",
    ]  # fmt: skip
    assert attrs(spans[0]["attributes"])["gen_ai.agent.name"] == "poller"


def _small_config(tmp_path: Path) -> Path:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    return path
