"""Test helpers around the real OpenTelemetry SDK: one global tracer provider, metric readers.

OpenTelemetry allows one global tracer provider per process, and frameworks
such as Google ADK trace through it, so the tests install one (with an
in-memory exporter that records only while a test asks for spans).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwarden as lw
from tests.telemetry._common import CANARY, SMALL

__all__ = [
    "CANARY",
    "SMALL",
    "global_metrics",
    "global_spans",
    "loop_until_stopped",
    "meter_provider",
    "sums",
]


class _Gate(SpanProcessor):
    """Forwards ended spans to the exporter only while a test records."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.open = False

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


_lock = threading.Lock()
_exporter = InMemorySpanExporter()
_gate = _Gate(SimpleSpanProcessor(_exporter))
_installed = False


def global_spans() -> Iterator[InMemorySpanExporter]:
    """Install the global SDK tracer provider once; record spans for one test."""
    global _installed
    with _lock:
        if not _installed:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                provider = TracerProvider()
                trace.set_tracer_provider(provider)
            provider.add_span_processor(_gate)
            _installed = True
    _exporter.clear()
    _gate.open = True
    try:
        yield _exporter
    finally:
        _gate.open = False
        _exporter.clear()


_global_reader: InMemoryMetricReader | None = None


def global_metrics() -> InMemoryMetricReader:
    """Install the global SDK meter provider once (what ``telemetry: true`` reports to)."""
    global _global_reader
    with _lock:
        if _global_reader is None:
            reader = InMemoryMetricReader()
            provider = MeterProvider(metric_readers=[reader])
            metrics.set_meter_provider(provider)
            assert metrics.get_meter_provider() is provider, "another global meter provider"
            _global_reader = reader
    return _global_reader


def sums(reader: InMemoryMetricReader) -> Counter[tuple[str, frozenset[tuple[str, Any]]]]:
    """Cumulative value per (metric, attributes); a histogram's is its sample count.

    The global provider's totals span every test: subtract a snapshot taken before.
    """
    found: Counter[tuple[str, frozenset[tuple[str, Any]]]] = Counter()
    for name, points in metric_points(reader).items():
        for attrs, value in points:
            found[name, frozenset(attrs.items())] += getattr(value, "count", value)
    return found


def tracer() -> trace.Tracer:
    return trace.get_tracer("tests.telemetry")


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """metric name -> [(attributes, value)]; a histogram's value is its data point."""
    data = reader.get_metrics_data()
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    if data is None:
        return found
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", point)
                    found.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return found


def total(points: list[tuple[dict[str, Any], Any]], **where: Any) -> int:
    """Sum of counter values whose attributes include ``where`` (dots written as ``__``)."""
    want = {k.replace("__", "."): v for k, v in where.items()}
    return sum(v for attrs, v in points if all(attrs.get(k) == w for k, w in want.items()))


def meter_provider() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def loop_until_stopped(
    run: lw.RunGuard, tool: str, params: Mapping[str, Any], result: Any, limit: int = 20
) -> list[str]:
    """Call ``tool`` like a stuck model until the guard stops the run; the decisions seen."""
    seen: list[str] = []
    for i in range(limit):
        call_id = f"{tool}-{i}"
        # Without the SDK's own status-on-exception, so the test sees what loopwarden set.
        with tracer().start_as_current_span(
            f"execute_tool {tool}", record_exception=False, set_status_on_exception=False
        ):
            try:
                decision = run.before_call(tool, params, call_id)
            except lw.LoopAbort as stop:
                seen.append(f"stop:{stop.code}")
                return seen
            seen.append(decision.action)
            if not decision.blocked:
                run.after_call(tool, params, call_id, result=result)
    return seen
