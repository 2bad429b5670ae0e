"""The OpenTelemetry recorder: span events on the current span, and four metric instruments.

Only the ``opentelemetry-api`` is used: the application's SDK (or none, then
everything is a no-op) decides where spans and metrics go.
"""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode

from ..events import LoopEvent
from ._names import (
    ACTION,
    AGENT_NAME,
    CODE,
    DETECTIONS,
    DETECTOR,
    DURATION_BUCKETS,
    GUARD_DURATION,
    HOOK,
    LEVEL,
    METRICS,
    RUNS_STOPPED,
    TOOL_CALLS,
    TOOL_NAME,
    event_attributes,
    event_name,
    stop_code,
)

__all__ = ["OtelRecorder"]

Attrs = dict[str, str]


def _version() -> str:
    from .. import __version__

    return str(__version__)


class OtelRecorder:
    """Records into OpenTelemetry instruments and onto the current span."""

    def __init__(self, meter_provider: Any = None) -> None:
        meter = metrics.get_meter("loopwarden", _version(), meter_provider)
        unit, _, text = METRICS[TOOL_CALLS]
        self._calls = meter.create_counter(TOOL_CALLS, unit=unit, description=text)
        unit, _, text = METRICS[DETECTIONS]
        self._detections = meter.create_counter(DETECTIONS, unit=unit, description=text)
        unit, _, text = METRICS[RUNS_STOPPED]
        self._stopped = meter.create_counter(RUNS_STOPPED, unit=unit, description=text)
        unit, _, text = METRICS[GUARD_DURATION]
        self._duration = meter.create_histogram(
            GUARD_DURATION,
            unit=unit,
            description=text,
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        # Attribute dicts per label combination: labels are capped, so this stays small,
        # and the per-call path builds no dicts.
        self._attrs: dict[tuple[str, str, str], tuple[Attrs, Attrs]] = {}
        self._after: dict[tuple[str, str], Attrs] = {}

    def call(self, action: str, tool: str, agent: str, seconds: float) -> None:
        key = (action, tool, agent)
        cached = self._attrs.get(key)
        if cached is None:
            base = _base(tool, agent)
            cached = self._attrs[key] = ({**base, ACTION: action}, {**base, HOOK: "before_call"})
        self._calls.add(1, cached[0])
        self._duration.record(seconds, cached[1])

    def outcome(self, tool: str, agent: str, seconds: float) -> None:
        key = (tool, agent)
        attrs = self._after.get(key)
        if attrs is None:
            attrs = self._after[key] = {**_base(tool, agent), HOOK: "after_call"}
        self._duration.record(seconds, attrs)

    def event(self, event: LoopEvent, tool: str, agent: str) -> None:
        base = _base(tool, agent)
        self._detections.add(
            1, {**base, DETECTOR: event.detector, LEVEL: event.level, ACTION: event.action}
        )
        code = stop_code(event)
        if code is not None:
            self._stopped.add(1, {**base, CODE: code})
        span = _current_span()
        if span is None:
            return
        span.add_event(event_name(event), event_attributes(event))
        if code is not None:
            span.set_status(Status(StatusCode.ERROR, code))
            # Frameworks reset the status description when our stop exception ends
            # their span; the attribute keeps the code.
            span.set_attribute(CODE, code)


def _current_span() -> Any:
    """The span to annotate: OpenTelemetry's current span, else the instrumented LangChain run's.

    LangChain instrumentations open spans from callbacks without making them
    current (OpenInference's explains why); OpenInference publishes the span of
    the current LangChain run instead.
    """
    span = trace.get_current_span()
    if span.is_recording():
        return span
    langchain = sys.modules.get("openinference.instrumentation.langchain")
    finder = getattr(langchain, "get_current_span", None)
    if finder is not None:
        span = finder()
        if span is not None and span.is_recording():
            return span
    return None


def _base(tool: str, agent: str) -> Attrs:
    return {TOOL_NAME: tool, AGENT_NAME: agent} if agent else {TOOL_NAME: tool}
