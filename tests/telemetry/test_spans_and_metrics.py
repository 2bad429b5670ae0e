"""Span events and metrics through the real OpenTelemetry SDK (in-memory exporter and reader)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import loopwarden as lw
from loopwarden.telemetry import Telemetry
from tests.telemetry._otel import (
    CANARY,
    SMALL,
    loop_until_stopped,
    meter_provider,
    metric_points,
    total,
    tracer,
)


def run_loop(telemetry: Telemetry, agent: str = "poller") -> tuple[list[str], list[lw.LoopEvent]]:
    events: list[lw.LoopEvent] = []
    guard = lw.LoopGuard(SMALL, agent_id=agent, on_event=events.append, telemetry=telemetry)
    run = guard.run("run-1", session_id="conv-1")
    decisions = loop_until_stopped(run, "poll_status", {"job": "42"}, "pending")
    return decisions, events


def test_each_event_lands_on_the_current_span_with_exact_attributes(
    spans: InMemorySpanExporter,
) -> None:
    """Every warn/block/stop becomes a `loopwarden.<action>` event on the open tool span."""
    provider, _reader = meter_provider()
    decisions, events = run_loop(Telemetry(meter_provider=provider))

    assert decisions == [
        "allow", "allow", "allow", "warn", "allow", "block", "block",
        "stop:global_circuit_breaker",
    ]  # fmt: skip
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["execute_tool poll_status"] * 8
    by_call = dict(enumerate(finished))
    annotated = {i: [e.name for e in s.events] for i, s in by_call.items() if s.events}
    assert annotated == {
        3: ["loopwarden.warn"],
        5: ["loopwarden.block"],
        6: ["loopwarden.block"],
        7: ["loopwarden.stop"],
    }
    warn = by_call[3].events[0]
    assert dict(warn.attributes or {}) == {
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "poll_status-3",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.agent.name": "poller",
        "loopwarden.detector": "generic_repeat",
        "loopwarden.level": "warning",
        "loopwarden.count": 3,
        "loopwarden.warning_key": events[0].warning_key,
        "loopwarden.run_id": "run-1",
    }
    stop = by_call[7].events[0]
    assert dict(stop.attributes or {}) == {
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "poll_status-7",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.agent.name": "poller",
        "loopwarden.detector": "global_circuit_breaker",
        "loopwarden.level": "critical",
        "loopwarden.count": 7,
        "loopwarden.warning_key": events[-1].warning_key,
        "loopwarden.run_id": "run-1",
        "loopwarden.code": "global_circuit_breaker",
    }
    assert by_call[7].status.status_code is StatusCode.ERROR
    assert by_call[7].status.description == "global_circuit_breaker"
    assert by_call[7].attributes is not None
    assert by_call[7].attributes["loopwarden.code"] == "global_circuit_breaker"
    # Warnings and blocks do not fail the tool span.
    assert {by_call[i].status.status_code for i in (3, 5, 6)} == {StatusCode.UNSET}


def test_ping_pong_event_names_the_paired_tool(spans: InMemorySpanExporter) -> None:
    """A ping-pong detection carries `loopwarden.paired_tool`."""
    provider, _reader = meter_provider()
    telemetry = Telemetry(meter_provider=provider)
    run = lw.LoopGuard(SMALL, telemetry=telemetry).run("pp")
    for i in range(8):
        tool = "read" if i % 2 == 0 else "write"
        with tracer().start_as_current_span(f"execute_tool {tool}"):
            try:
                decision = run.before_call(tool, {"p": 1}, f"c{i}")
            except lw.LoopAbort:
                break  # blocked calls in a row end the run
            if not decision.blocked:
                run.after_call(tool, {"p": 1}, f"c{i}", result="same")
    events = [e for s in spans.get_finished_spans() for e in s.events]
    pairs = {(e.attributes or {}).get("loopwarden.paired_tool") for e in events}
    assert events and pairs <= {"read", "write"} and None not in pairs
    # Ping-pong warns and blocks; the stop names the rule that ends the run.
    detectors = [(e.attributes or {})["loopwarden.detector"] for e in events]
    assert set(detectors[:-1]) == {"ping_pong"} and detectors[-1] == "blocks_in_a_row"


def test_without_a_span_events_are_dropped_and_metrics_still_count(
    spans: InMemorySpanExporter,
) -> None:
    """Outside any span nothing is traced, but the counters still see every event."""
    provider, reader = meter_provider()
    telemetry = Telemetry(meter_provider=provider)
    run = lw.LoopGuard(SMALL, telemetry=telemetry).run("bare")
    for i in range(5):
        run.before_call("poll_status", {"job": "1"}, f"c{i}")
        run.after_call("poll_status", {"job": "1"}, f"c{i}", result="pending")
    assert spans.get_finished_spans() == ()
    points = metric_points(reader)
    assert total(points["loopwarden.detections"], loopwarden__action="warn") == 1


def test_metric_counts_equal_the_events_over_a_scripted_loop(spans: InMemorySpanExporter) -> None:
    """Counters and the duration histogram agree with the events and decisions of two runs."""
    provider, reader = meter_provider()
    telemetry = Telemetry(meter_provider=provider)
    decisions, events = run_loop(telemetry)

    # A second run ends through the post-compaction guard (an abort in after_call).
    guard = lw.LoopGuard(SMALL, agent_id="reader", on_event=events.append, telemetry=telemetry)
    run = guard.run("run-2")
    run.on_compaction()
    after_calls = sum(d != "block" and not d.startswith("stop") for d in decisions)
    with pytest.raises(lw.CompactionLoopPersisted):
        for i in range(10):
            decisions.append(run.before_call("read", {"path": "a"}, f"r{i}").action)
            after_calls += 1
            run.after_call("read", {"path": "a"}, f"r{i}", result="same")

    points = metric_points(reader)
    calls = points["loopwarden.tool_calls"]
    assert total(calls) == len(decisions)
    for action in ("allow", "warn"):
        assert total(calls, loopwarden__action=action) == decisions.count(action)
    blocked = decisions.count("block") + sum(d.startswith("stop") for d in decisions)
    assert total(calls, loopwarden__action="block") == blocked

    detections = points["loopwarden.detections"]
    assert total(detections) == len(events)
    for event in events:
        same = [
            e
            for e in events
            if (e.detector, e.level, e.action, e.tool, e.agent_id)
            == (event.detector, event.level, event.action, event.tool, event.agent_id)
        ]
        assert total(
            detections,
            loopwarden__detector=event.detector,
            loopwarden__level=event.level,
            loopwarden__action=event.action,
            gen_ai__tool__name=event.tool,
            gen_ai__agent__name=event.agent_id,
        ) == len(same)
    stopped = points["loopwarden.runs.stopped"]
    assert total(stopped) == 2
    assert total(stopped, loopwarden__code="global_circuit_breaker", gen_ai__agent__name="poller")
    assert total(stopped, loopwarden__code="compaction_loop_persisted") == 1

    durations = points["loopwarden.guard.duration"]
    # One sample per call: at after_call for calls that ran, at before_call for blocked ones.
    assert sum(p.count for _a, p in durations) == after_calls + blocked
    assert all(p.sum > 0 and p.min >= 0 for _a, p in durations)
    assert {tuple(sorted(a)) for a, _p in durations} == {("gen_ai.agent.name", "gen_ai.tool.name")}


def test_tool_name_cardinality_is_capped(spans: InMemorySpanExporter) -> None:
    """Past `max_tool_names` distinct names, metrics count under `_other`; events keep the name."""
    provider, reader = meter_provider()
    telemetry = Telemetry(meter_provider=provider, max_tool_names=3, max_agents=1)
    guard = lw.LoopGuard(SMALL, telemetry=telemetry)
    names = [f"tool_{i}" for i in range(6)]
    for agent in ("a1", "a2"):
        run = guard.run(f"cap-{agent}", agent_id=agent)
        for name in names:
            with tracer().start_as_current_span("execute_tool"):
                run.before_call(name, {}, f"{agent}-{name}")
    labels = {a["gen_ai.tool.name"] for a, _ in metric_points(reader)["loopwarden.tool_calls"]}
    assert labels == {"tool_0", "tool_1", "tool_2", "_other"}
    agents = {a["gen_ai.agent.name"] for a, _ in metric_points(reader)["loopwarden.tool_calls"]}
    assert agents == {"a1", "_other"}
    assert total(metric_points(reader)["loopwarden.tool_calls"]) == 12


def test_a_secret_in_params_and_results_reaches_no_span_event_or_metric(
    spans: InMemorySpanExporter,
) -> None:
    """The canary placed in every param and result appears nowhere in spans, events or metrics."""
    provider, reader = meter_provider()
    telemetry = Telemetry(meter_provider=provider)
    run = lw.LoopGuard(SMALL, agent_id="poller", telemetry=telemetry).run("canary")
    params = {"token": CANARY, "nested": [CANARY, {"k": CANARY}]}
    loop_until_stopped(run, "fetch", params, f"result with {CANARY}")

    finished = spans.get_finished_spans()
    assert any(s.events for s in finished)
    dumped = "".join(s.to_json() for s in finished)
    assert CANARY not in dumped
    data = reader.get_metrics_data()
    assert data is not None
    assert CANARY not in data.to_json()


class Broken:
    """A recorder whose every method fails."""

    def call(self, *args: Any) -> None:
        raise RuntimeError("backend down")

    outcome = event = call


def test_a_failing_backend_is_logged_and_the_agent_goes_on(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """Recorder errors never reach the agent: calls, outcomes and events keep working."""
    telemetry = Telemetry(otel=False, prometheus=Broken())
    run = lw.LoopGuard(SMALL, telemetry=telemetry).run("broken")
    decisions = loop_until_stopped(run, "poll_status", {"job": "1"}, "pending")
    assert decisions[-1] == "stop:global_circuit_breaker"
    assert "loopwarden telemetry failed to record" in caplog.text
