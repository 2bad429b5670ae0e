"""The OpenTelemetry recorder: span events on the current span, and four metric instruments.

Only the ``opentelemetry-api`` is used: the application's SDK (or none, then
everything is a no-op) decides where spans and metrics go.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
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

# Durations are recorded outside the tool span's context: with the SDK's default
# trace-based exemplar filter every sample in a sampled span would carry an
# exemplar, a third of the histogram's cost per call, for a link to a trace that
# says nothing about the guard's own time.
_NO_SPAN = trace.set_span_in_context(trace.INVALID_SPAN, Context())


def _version() -> str:
    from .. import __version__

    return str(__version__)


class _Tally:
    """Counts per label tuple, reported through an observable counter when the SDK collects.

    The SDK's synchronous ``Counter.add`` costs a few microseconds per call; a
    locked dict update costs a tenth of that.
    """

    def __init__(self, attrs: Callable[[tuple[str, ...]], Attrs]) -> None:
        self._attrs = attrs
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, ...], int] = {}

    def add(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            counts = list(self._counts.items())
        return [Observation(n, self._attrs(key)) for key, n in counts]


class _Instruments:
    """The four instruments of one meter provider, and the tallies behind the counters.

    Shared by every recorder on that provider: the SDK hands a second
    registration of an instrument name the first instrument, with the first
    registration's callbacks, so per-recorder tallies would go unreported.
    """

    def __init__(self, meter_provider: Any) -> None:
        meter = metrics.get_meter("loopwarden", _version(), meter_provider)
        # Label tuples end with (tool, agent); the rest is named per metric.
        self.calls = _Tally(lambda k: {**_base(k[1], k[2]), ACTION: k[0]})
        self.detections = _Tally(
            lambda k: {**_base(k[3], k[4]), DETECTOR: k[0], LEVEL: k[1], ACTION: k[2]}
        )
        self.stopped = _Tally(lambda k: {**_base(k[1], k[2]), CODE: k[0]})
        for name, tally in (
            (TOOL_CALLS, self.calls),
            (DETECTIONS, self.detections),
            (RUNS_STOPPED, self.stopped),
        ):
            unit, _, text = METRICS[name]
            meter.create_observable_counter(
                name, callbacks=[tally.observe], unit=unit, description=text
            )
        unit, _, text = METRICS[GUARD_DURATION]
        self.duration = meter.create_histogram(
            GUARD_DURATION,
            unit=unit,
            description=text,
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )


class _GlobalProvider:
    """Key of the instruments on the global meter provider (whatever it is set to later)."""


_GLOBAL = _GlobalProvider()
_shared: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def _instruments(meter_provider: Any) -> _Instruments:
    key = _GLOBAL if meter_provider is None else meter_provider
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = _Instruments(meter_provider)
        return found


class OtelRecorder:
    """Records into OpenTelemetry instruments and onto the current span."""

    def __init__(self, meter_provider: Any = None) -> None:
        shared = _instruments(meter_provider)
        self._calls = shared.calls
        self._detections = shared.detections
        self._stopped = shared.stopped
        self._duration = shared.duration
        # Attribute dicts per (tool, agent): labels are capped, so this stays small,
        # and the per-call path builds no dicts.
        self._attrs: dict[tuple[str, str], Attrs] = {}

    def _base(self, tool: str, agent: str) -> Attrs:
        key = (tool, agent)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = _base(tool, agent)
        return attrs

    def call(self, action: str, tool: str, agent: str, seconds: float) -> None:
        self._calls.add((action, tool, agent))
        if action == "block":  # no after_call follows: this is the call's whole guard time
            self._duration.record(seconds, self._base(tool, agent), context=_NO_SPAN)

    def outcome(self, tool: str, agent: str, seconds: float) -> None:
        self._duration.record(seconds, self._base(tool, agent), context=_NO_SPAN)

    def event(self, event: LoopEvent, tool: str, agent: str) -> None:
        self._detections.add((event.detector, event.level, event.action, tool, agent))
        code = stop_code(event)
        if code is not None:
            self._stopped.add((code, tool, agent))
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
