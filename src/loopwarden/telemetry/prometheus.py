"""A Prometheus ``/metrics`` endpoint for long-running processes (MCP proxy, hook helper).

Built on ``prometheus-client`` directly rather than OpenTelemetry's Prometheus
exporter: that exporter needs the OpenTelemetry SDK *and* prometheus-client
(whose registry and HTTP server it uses), so it is a strict superset of the
moving parts, and it would install a process-wide meter provider that can
clash with the application's own. prometheus-client is one pure-Python
package without dependencies. Metric and label names are the ones an
OpenTelemetry Collector gives the OTLP metrics (dots become underscores,
counters get ``_total``, seconds get ``_seconds``), so one dashboard works
with either path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    stop_code,
)

__all__ = ["MetricsServer", "PrometheusMetrics", "parse_address", "serve_metrics"]


def _label(name: str) -> str:
    return name.replace(".", "_")


def _base_name(metric: str) -> str:
    """prometheus-client adds ``_total`` to counters itself."""
    name = METRICS[metric][1]
    return name.removesuffix("_total")


class PrometheusMetrics:
    """The four loopwarden metrics in a prometheus-client registry of their own.

    Pass it to :class:`~loopwarden.telemetry.Telemetry` (``prometheus=``) and
    serve ``registry`` (or use :func:`serve_metrics`, which does both).
    """

    def __init__(self, registry: Any = None) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError as exc:
            raise ImportError(
                "the /metrics endpoint needs prometheus-client; install it with: "
                "pip install 'loopwarden[prometheus]'"
            ) from exc
        self.registry = registry if registry is not None else CollectorRegistry()
        tool, agent = _label(TOOL_NAME), _label(AGENT_NAME)
        self._calls = Counter(
            _base_name(TOOL_CALLS),
            METRICS[TOOL_CALLS][2],
            [_label(ACTION), tool, agent],
            registry=self.registry,
        )
        self._detections = Counter(
            _base_name(DETECTIONS),
            METRICS[DETECTIONS][2],
            [_label(DETECTOR), _label(LEVEL), _label(ACTION), tool, agent],
            registry=self.registry,
        )
        self._stopped = Counter(
            _base_name(RUNS_STOPPED),
            METRICS[RUNS_STOPPED][2],
            [_label(CODE), tool, agent],
            registry=self.registry,
        )
        self._duration = Histogram(
            _base_name(GUARD_DURATION),
            METRICS[GUARD_DURATION][2],
            [tool, agent],
            registry=self.registry,
            buckets=DURATION_BUCKETS,
        )

    def call(self, action: str, tool: str, agent: str, seconds: float) -> None:
        self._calls.labels(action, tool, agent).inc()
        if action == "block":  # no after_call follows
            self._duration.labels(tool, agent).observe(seconds)

    def outcome(self, tool: str, agent: str, seconds: float) -> None:
        self._duration.labels(tool, agent).observe(seconds)

    def event(self, event: LoopEvent, tool: str, agent: str) -> None:
        self._detections.labels(event.detector, event.level, event.action, tool, agent).inc()
        code = stop_code(event)
        if code is not None:
            self._stopped.labels(code, tool, agent).inc()


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT`` (host defaults to 127.0.0.1)."""
    text = address.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ValueError(
            f"invalid metrics address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:9464"
        )
    return host, number


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint (a daemon thread). ``port`` is the bound port."""

    host: str
    port: int
    metrics: PrometheusMetrics
    _server: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(
    address: str | tuple[str, int], metrics: PrometheusMetrics | None = None
) -> MetricsServer:
    """Serve ``metrics`` (new ones by default) at ``http://HOST:PORT/metrics``.

    Port 0 picks a free port (see ``MetricsServer.port``). Raises ``OSError``
    when the address cannot be bound and ``ValueError`` when it is malformed.
    """
    host, port = parse_address(address) if isinstance(address, str) else address
    metrics = metrics if metrics is not None else PrometheusMetrics()
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsServer(host, int(server.server_port), metrics, server)
