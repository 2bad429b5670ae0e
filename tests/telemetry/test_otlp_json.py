"""Guard decisions written as OTLP/JSON: strict protobuf decoding, re-import over OTLP/HTTP."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.telemetry import CallRecord, OtlpJsonWriter
from loopwarden.telemetry.otlp_json import to_otlp
from tests.telemetry._common import CANARY, SMALL


def guarded_run(
    run_id: str, agent: str, tool: str = "poll_status"
) -> tuple[list[CallRecord], list[lw.LoopEvent]]:
    """A real guard run, recorded the way replay will: one CallRecord per call plus the events."""
    events: list[lw.LoopEvent] = []
    run = lw.LoopGuard(SMALL, agent_id=agent, on_event=events.append).run(run_id, session_id="s1")
    calls: list[CallRecord] = []
    params = {"job": "42", "token": CANARY}
    for i in range(12):
        started = time.time()
        call_id = f"{run_id}-c{i}"
        try:
            decision = run.before_call(tool, params, call_id)
        except lw.LoopAbort:
            calls.append(CallRecord(run_id, tool, "stop", started, call_id, None, "s1", agent))
            break
        if not decision.blocked:
            run.after_call(tool, params, call_id, result=CANARY)
        calls.append(
            CallRecord(run_id, tool, decision.action, started, call_id, time.time(), "s1", agent)
        )
    return calls, events


def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in items}


def test_a_run_becomes_one_trace_with_the_events_on_their_call_spans() -> None:
    """One `invoke_agent` root, one `execute_tool` span per call, events and stop on the calls."""
    calls, events = guarded_run("run-a", "poller")
    (request,) = to_otlp(calls, events)
    (resource_spans,) = request["resourceSpans"]
    assert attrs(resource_spans["resource"]["attributes"]) == {"service.name": "loopwarden-replay"}
    root, *spans = resource_spans["scopeSpans"][0]["spans"]
    assert root["name"] == "invoke_agent poller"
    assert attrs(root["attributes"]) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "poller",
        "gen_ai.conversation.id": "s1",
        "loopwarden.run_id": "run-a",
    }
    assert len(spans) == len(calls) == 8
    assert {s["parentSpanId"] for s in spans} == {root["spanId"]}
    assert len({s["traceId"] for s in [root, *spans]}) == 1 and len(root["traceId"]) == 32
    assert [attrs(s["attributes"])["loopwarden.action"] for s in spans] == [
        "allow", "allow", "allow", "warn", "allow", "block", "block", "stop",
    ]  # fmt: skip
    assert attrs(spans[3]["attributes"]) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "run-a-c3",
        "gen_ai.conversation.id": "s1",
        "gen_ai.agent.name": "poller",
        "loopwarden.action": "warn",
    }
    placed = {i: [e["name"] for e in s["events"]] for i, s in enumerate(spans) if s["events"]}
    assert placed == {
        3: ["loopwarden.warn"],
        5: ["loopwarden.block"],
        6: ["loopwarden.block"],
        7: ["loopwarden.stop"],
    }
    stop = spans[7]["events"][0]
    assert attrs(stop["attributes"])["loopwarden.code"] == "global_circuit_breaker"
    assert attrs(stop["attributes"])["loopwarden.count"] == "7"  # int64 as a JSON string
    assert spans[7]["status"] == {"code": 2, "message": "global_circuit_breaker"}
    assert all(s["status"] == {} for s in spans[:7])
    for span in spans:  # events sit inside their call span
        for event in span["events"]:
            start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
            assert start <= int(event["timeUnixNano"]) <= end
    assert int(root["startTimeUnixNano"]) <= int(spans[0]["startTimeUnixNano"])
    assert int(root["endTimeUnixNano"]) >= int(spans[-1]["startTimeUnixNano"])
    assert CANARY not in json.dumps(request)


def test_the_output_decodes_strictly_and_is_reimported_over_otlp_http() -> None:
    """Each line parses as an ExportTraceServiceRequest and a receiver accepts it as OTLP/JSON."""
    pytest.importorskip("opentelemetry.proto")
    from tests.telemetry._receiver import decode_json, otlp_receiver

    out = io.StringIO()
    writer = OtlpJsonWriter(out)
    for run_id, agent in (("run-a", "poller"), ("run-b", "reader")):
        calls, events = guarded_run(run_id, agent)
        for call in calls:
            writer.add_call(call)
        for event in events:
            writer.add_event(event)
        writer.end_run(run_id)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2

    with otlp_receiver() as receiver:
        for line in lines:
            assert receiver.post_json("/v1/traces", line) == 200
        received = receiver.messages("/v1/traces")
    direct = [decode_json("/v1/traces", line.encode()) for line in lines]
    assert received == direct
    spans = [
        s for r in direct for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
    ]  # type: ignore[attr-defined]
    assert len(spans) == 2 * 9
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)
    stops = [s for s in spans if s.status.code == 2]
    assert [s.status.message for s in stops] == ["global_circuit_breaker"] * 2
    assert {e.name for s in spans for e in s.events} == {
        "loopwarden.warn", "loopwarden.block", "loopwarden.stop",
    }  # fmt: skip


def test_ids_are_stable_so_a_replay_written_twice_gives_the_same_spans() -> None:
    """The same decisions produce identical output (re-importing does not duplicate spans)."""
    calls, events = guarded_run("run-a", "poller")
    assert to_otlp(calls, events) == to_otlp(calls, events)
    other, other_events = guarded_run("run-z", "poller")
    first = to_otlp(calls, events)[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    second = to_otlp(other, other_events)[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert first["traceId"] != second["traceId"]


def test_calls_past_the_cap_are_counted_and_their_events_go_to_the_root() -> None:
    """A huge run keeps `max_calls_per_run` spans; the rest is counted on the root span."""
    calls, events = guarded_run("run-a", "poller")
    out = io.StringIO()
    writer = OtlpJsonWriter(out, max_calls_per_run=4)
    for call in calls:
        writer.add_call(call)
    for event in events:
        writer.add_event(event)
    writer.close()
    root, *spans = json.loads(out.getvalue())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans) == 4
    assert attrs(root["attributes"])["loopwarden.calls_dropped"] == "4"
    assert [e["name"] for e in spans[3]["events"]] == ["loopwarden.warn"]
    assert [e["name"] for e in root["events"]] == [
        "loopwarden.block", "loopwarden.block", "loopwarden.stop",
    ]  # fmt: skip
    assert root["status"] == {"code": 2, "message": "global_circuit_breaker"}


def test_events_without_call_ids_attach_to_the_latest_call_of_their_tool() -> None:
    """Traces without call ids still place each event on the call it was about."""
    calls, events = guarded_run("run-a", "poller")
    bare_calls = [CallRecord(c.run_id, c.tool, c.action, c.time, None, c.end_time) for c in calls]
    bare_events = [
        lw.LoopEvent(**{**e.__dict__, "call_id": None})  # type: ignore[arg-type]
        for e in events
    ]
    spans = to_otlp(bare_calls, bare_events)[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][1:]
    assert {i for i, s in enumerate(spans) if s["events"]} == {3, 5, 6, 7}
