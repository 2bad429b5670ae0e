"""Telemetry over every store: span events and metrics happen once per call, after the commit.

The ``twice`` store runs every transaction twice (as Redis does when a watched
key changed); nothing the guard reports may be doubled by that.
"""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwarden as lw
from loopwarden.stores import Store
from loopwarden.telemetry import Telemetry
from loopwarden.testing import SMALL_THRESHOLDS, capture_events
from tests.stores.conftest import all_stores
from tests.stores.twice import TwiceStore


@all_stores
def test_each_call_and_event_is_reported_once(store: Store) -> None:
    """A stuck run's span events, counters and duration samples match its decisions exactly."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("store-matrix")
    reader = InMemoryMetricReader()
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    guard = lw.LoopGuard(SMALL_THRESHOLDS, store=store, agent_id="a", telemetry=telemetry)
    run = guard.run("r")
    decisions: list[str] = []
    with capture_events() as events:
        for i in range(10):
            with tracer.start_as_current_span("execute_tool poll"):
                try:
                    decision = run.before_call("poll", {"job": 1}, f"c{i}")
                except lw.CircuitBreakerTripped:
                    decisions.append("stop")
                    break
                decisions.append(decision.action)
                if not decision.blocked:
                    run.after_call("poll", {"job": 1}, f"c{i}", result="pending")
    run.end()
    tracer_provider.shutdown()

    assert decisions == ["allow", "allow", "allow", "warn", "allow", "block", "block", "stop"]
    assert [e.action for e in events] == ["warn", "block", "block", "stop"]
    span_events = [e.name for s in exporter.get_finished_spans() for e in s.events]
    assert span_events == [f"loopwarden.{e.action}" for e in events]
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    calls = {p.attributes["loopwarden.action"]: p.value for p in points["loopwarden.tool_calls"]}
    assert calls == {"allow": 4, "warn": 1, "block": 3}
    assert sum(p.value for p in points["loopwarden.detections"]) == 4
    assert sum(p.value for p in points["loopwarden.runs.stopped"]) == 1
    assert sum(p.count for p in points["loopwarden.guard.duration"]) == 8
    if isinstance(store, TwiceStore):
        assert store.runs > 0 and store.runs % 2 == 0  # every transaction did run twice
