"""`examples/otel_pydantic_ai.py` (the screenshot's source) sends what the docs show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from tests.telemetry._receiver import otlp_receiver

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otel_pydantic_ai.py"


def test_the_example_sends_the_guard_events_on_pydantic_ai_tool_spans() -> None:
    """Run as a script against a loopback OTLP receiver: warn, blocks and the stop arrive."""
    with otlp_receiver() as receiver:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), f"{receiver.url}/v1/traces"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "stopped: global_circuit_breaker"
        spans = [
            span
            for request in receiver.messages("/v1/traces")
            for rs in request.resource_spans  # type: ignore[attr-defined]
            for ss in rs.scope_spans
            for span in ss.spans
        ]
    ours = [(s.name, e.name) for s in spans for e in s.events if e.name.startswith("loopwarden.")]
    assert ours == [
        ("execute_tool poll_status", "loopwarden.warn"),
        ("execute_tool poll_status", "loopwarden.block"),
        ("execute_tool poll_status", "loopwarden.block"),
        ("execute_tool poll_status", "loopwarden.stop"),
    ]
    stopped = next(s for s in spans if any(e.name == "loopwarden.stop" for e in s.events))
    assert stopped.status.code == 2  # STATUS_CODE_ERROR
