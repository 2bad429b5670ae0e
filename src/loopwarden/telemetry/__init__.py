"""Observability: OpenTelemetry span events and metrics, Prometheus ``/metrics``, OTLP JSON.

Off by default and free when off: this package is imported only when the
guard is asked for telemetry, and it imports OpenTelemetry (or
prometheus-client) only when a :class:`Telemetry` that uses it is created.
See ``docs/observability.md`` for every event, metric and attribute.

* :class:`Telemetry` — what the guard driver calls: ``on_event`` (an
  ``EventSink``), ``record_call`` and ``record_outcome``.
* :func:`resolve_telemetry` / :func:`parse_telemetry_setting` — the one switch:
  ``LoopGuard(telemetry=True)`` or ``{"loopwarden": {"telemetry": true}}``.
* :func:`serve_metrics` — a ``/metrics`` endpoint for long-running processes.
* :class:`OtlpJsonWriter` — guard decisions as OTLP/JSON spans (replay output).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._core import Recorder, Telemetry
    from ._settings import TelemetrySettings, parse_telemetry_setting, resolve_telemetry
    from .otlp_json import CallRecord, OtlpJsonWriter
    from .prometheus import MetricsServer, PrometheusMetrics, serve_metrics

_EXPORTS = {
    "CallRecord": "otlp_json",
    "MetricsServer": "prometheus",
    "OtlpJsonWriter": "otlp_json",
    "PrometheusMetrics": "prometheus",
    "Recorder": "_core",
    "Telemetry": "_core",
    "TelemetrySettings": "_settings",
    "parse_telemetry_setting": "_settings",
    "resolve_telemetry": "_settings",
    "serve_metrics": "prometheus",
}

__all__ = [
    "CallRecord",
    "MetricsServer",
    "OtlpJsonWriter",
    "PrometheusMetrics",
    "Recorder",
    "Telemetry",
    "TelemetrySettings",
    "parse_telemetry_setting",
    "resolve_telemetry",
    "serve_metrics",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    __import__(f"{__name__}.{module}")
    value = getattr(sys.modules[f"{__name__}.{module}"], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
