"""The `/metrics` endpoint: prometheus-client serving loopwarden's metrics over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

import loopwarden as lw
from loopwarden.telemetry import MetricsServer, Telemetry, serve_metrics
from loopwarden.telemetry.prometheus import parse_address
from tests.telemetry._common import CANARY, SMALL


@pytest.fixture(name="server")
def fixture_server() -> Iterator[MetricsServer]:
    server = serve_metrics("127.0.0.1:0")
    try:
        yield server
    finally:
        server.close()


def scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def loop(telemetry: Telemetry, agent: str, params: object, result: object) -> list[lw.LoopEvent]:
    events: list[lw.LoopEvent] = []
    guard = lw.LoopGuard(SMALL, agent_id=agent, on_event=events.append, telemetry=telemetry)
    run = guard.run(f"run-{agent}")
    try:
        for i in range(20):
            decision = run.before_call("poll_status", params, f"c{i}")
            if not decision.blocked:
                run.after_call("poll_status", params, f"c{i}", result=result)
    except lw.LoopAbort:
        pass
    return events


def test_metrics_are_scraped_over_http_with_the_counts_of_the_loop(server: MetricsServer) -> None:
    """After a stuck loop, `/metrics` shows its calls, detections, stop and guard time."""
    telemetry = Telemetry(otel=False, prometheus=server.metrics)
    events = loop(telemetry, "poller", {"job": "42"}, "pending")
    assert [e.action for e in events] == ["warn", "block", "block", "stop"]

    text, samples = scrape(server.url)
    agent = ("gen_ai_agent_name", "poller")
    tool = ("gen_ai_tool_name", "poll_status")

    def calls(action: str) -> float:
        return samples[
            ("loopwarden_tool_calls_total", (agent, tool, ("loopwarden_action", action)))
        ]

    assert (calls("allow"), calls("warn"), calls("block")) == (4.0, 1.0, 3.0)
    detection = (
        "loopwarden_detections_total",
        (
            agent,
            tool,
            ("loopwarden_action", "block"),
            ("loopwarden_detector", "generic_repeat"),
            ("loopwarden_level", "critical"),
        ),
    )
    assert samples[detection] == 2.0
    stopped = (
        "loopwarden_runs_stopped_total",
        (agent, tool, ("loopwarden_code", "global_circuit_breaker")),
    )
    assert samples[stopped] == 1.0
    count = ("loopwarden_guard_duration_seconds_count", (agent, tool))
    assert samples[count] == 8.0  # one per call: 5 ran (after_call), 3 blocked
    assert "# TYPE loopwarden_guard_duration_seconds histogram" in text


def test_no_secret_reaches_the_metrics_endpoint(server: MetricsServer) -> None:
    """The canary in params and results never appears in the scraped text."""
    telemetry = Telemetry(otel=False, prometheus=server.metrics)
    loop(telemetry, "poller", {"token": CANARY}, {"echo": CANARY})
    text, _ = scrape(server.url)
    assert "loopwarden_runs_stopped_total" in text
    assert CANARY not in text


def test_two_servers_keep_separate_registries() -> None:
    """Each endpoint serves only its own guard's metrics (no global registry)."""
    first, second = serve_metrics(("127.0.0.1", 0)), serve_metrics(("127.0.0.1", 0))
    try:
        loop(Telemetry(otel=False, prometheus=first.metrics), "one", {"job": 1}, "pending")
        _, samples = scrape(second.url)
        assert not any(name.startswith("loopwarden_tool_calls") for name, _ in samples)
        _, samples = scrape(first.url)
        assert any(name == "loopwarden_tool_calls_total" for name, _ in samples)
    finally:
        first.close()
        second.close()


def test_a_closed_server_stops_answering(server: MetricsServer) -> None:
    """After close() the port no longer serves metrics."""
    url = server.url
    server.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
        ("[::1]:9464", ("::1", 9464)),
        (":9100", ("127.0.0.1", 9100)),
        ("9100", ("127.0.0.1", 9100)),
    ],
)
def test_addresses_are_parsed(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT forms accepted by `--metrics`; the host defaults to loopback."""
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "host:http", "127.0.0.1:70000"])
def test_bad_addresses_get_a_clear_error(text: str) -> None:
    """A malformed address raises ValueError naming the expected form."""
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address(text)
