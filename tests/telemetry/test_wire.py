"""The wire test: the SDK's OTLP/HTTP exporters send to a receiver on loopback.

What arrives, decoded with ``opentelemetry-proto``, is what the docs promise:
the span events with their attributes, the stop status, and the four metrics.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import loopwarden as lw
from loopwarden.telemetry import Telemetry
from tests.telemetry._otel import CANARY, SMALL
from tests.telemetry._receiver import otlp_receiver


def value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


def test_spans_events_and_metrics_arrive_over_otlp_http() -> None:
    """A stuck loop's events, stop status and metrics arrive intact, and no secret does."""
    with otlp_receiver() as receiver:
        resource = Resource.create({"service.name": "wire-test"})
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces"))
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics"),
            export_interval_millis=3_600_000,  # exported by force_flush below only
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        tracer = tracer_provider.get_tracer("wire")
        telemetry = Telemetry(meter_provider=meter_provider)
        guard = lw.LoopGuard(SMALL, agent_id="poller", telemetry=telemetry)
        run = guard.run("wire-run", session_id="conv-9")
        params = {"job": "42", "token": CANARY}
        for i in range(10):
            with tracer.start_as_current_span(
                "execute_tool poll_status", record_exception=False, set_status_on_exception=False
            ):
                try:
                    decision = run.before_call("poll_status", params, f"c{i}")
                except lw.LoopAbort:
                    break
                if not decision.blocked:
                    run.after_call("poll_status", params, f"c{i}", result=CANARY)
        assert meter_provider.force_flush()
        tracer_provider.shutdown()
        meter_provider.shutdown()

        traces = receiver.messages("/v1/traces")
        metrics = receiver.messages("/v1/metrics")
    assert CANARY.encode() not in b"".join(m.SerializeToString() for m in traces + metrics)

    spans = [
        span
        for request in traces
        for rs in request.resource_spans  # type: ignore[attr-defined]
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert len(spans) == 8
    events = [(e.name, attrs(e.attributes)) for s in spans for e in s.events]
    assert [name for name, _ in events] == [
        "loopwarden.warn", "loopwarden.block", "loopwarden.block", "loopwarden.stop",
    ]  # fmt: skip
    _name, stop = events[-1]
    assert stop == {
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "c7",
        "gen_ai.conversation.id": "conv-9",
        "gen_ai.agent.name": "poller",
        "loopwarden.detector": "global_circuit_breaker",
        "loopwarden.level": "critical",
        "loopwarden.count": 7,
        "loopwarden.warning_key": stop["loopwarden.warning_key"],
        "loopwarden.run_id": "wire-run",
        "loopwarden.code": "global_circuit_breaker",
    }
    last = spans[-1]
    assert (last.status.code, last.status.message) == (2, "global_circuit_breaker")  # ERROR
    assert attrs(last.attributes)["loopwarden.code"] == "global_circuit_breaker"

    found: dict[str, list[Any]] = {}
    for request in metrics:
        for rm in request.resource_metrics:  # type: ignore[attr-defined]
            assert attrs(rm.resource.attributes)["service.name"] == "wire-test"
            for sm in rm.scope_metrics:
                assert sm.scope.name == "loopwarden"
                for metric in sm.metrics:
                    found[metric.name] = [metric]
    assert set(found) == {
        "loopwarden.tool_calls",
        "loopwarden.detections",
        "loopwarden.runs.stopped",
        "loopwarden.guard.duration",
    }
    calls = {
        attrs(p.attributes)["loopwarden.action"]: p.as_int
        for p in found["loopwarden.tool_calls"][0].sum.data_points
    }
    assert calls == {"allow": 4, "warn": 1, "block": 3}
    assert found["loopwarden.tool_calls"][0].unit == "{call}"
    assert found["loopwarden.tool_calls"][0].sum.is_monotonic
    stopped = found["loopwarden.runs.stopped"][0].sum.data_points
    assert [(attrs(p.attributes), p.as_int) for p in stopped] == [
        (
            {
                "gen_ai.tool.name": "poll_status",
                "gen_ai.agent.name": "poller",
                "loopwarden.code": "global_circuit_breaker",
            },
            1,
        )
    ]
    histogram = found["loopwarden.guard.duration"][0]
    assert histogram.unit == "s"
    points = histogram.histogram.data_points
    assert sum(p.count for p in points) == 8  # one per call
    assert list(points[0].explicit_bounds)[:3] == [2e-06, 5e-06, 1e-05]
