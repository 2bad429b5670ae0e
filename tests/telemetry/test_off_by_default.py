"""Telemetry is off by default and costs nothing when off: no OpenTelemetry import at all."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

LOOP = """
import json, sys
import loopwarden as lw
cfg = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3,
       "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}},
       "loopwarden": {"telemetry": SETTING}}
events = []
guard = lw.LoopGuard(cfg, on_event=events.append)
run = guard.run("r")
try:
    for i in range(10):
        d = run.before_call("poll", {"job": 1}, f"c{i}")
        if not d.blocked:
            run.after_call("poll", {"job": 1}, f"c{i}", result="pending")
except lw.LoopAbort:
    pass
loaded = sorted(m for m in sys.modules
                if m.split(".")[0] in ("opentelemetry", "prometheus_client", "google")
                or m.startswith("loopwarden.telemetry"))
print(json.dumps({"events": [e.action for e in events], "loaded": loaded,
                  "run": type(run).__name__}))
"""


def run_python(code: str, setting: str) -> dict[str, object]:
    code = code.replace("SETTING", setting)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("setting", ["None", "False", "{'enabled': False, 'maxAgents': 3}"])
def test_a_guard_without_telemetry_imports_no_opentelemetry(setting: str) -> None:
    """A full loop with telemetry unset or off loads no OTel, Prometheus or telemetry module."""
    result = run_python(LOOP, setting)
    assert result["events"] == ["warn", "block", "block", "stop"]
    assert result["loaded"] == []
    assert result["run"] == "RunGuard"  # the driver's code path is the one without telemetry


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry") is None, reason="opentelemetry-api not installed"
)
def test_turning_it_on_is_what_imports_opentelemetry() -> None:
    """The same loop with `telemetry: true` loads the OTel API (so the test above can fail)."""
    result = run_python(LOOP, "True")
    loaded = result["loaded"]
    assert isinstance(loaded, list)
    assert "opentelemetry.trace" in loaded and "opentelemetry.metrics" in loaded
    assert "loopwarden.telemetry._otel" in loaded
    assert not any(m.startswith("opentelemetry.sdk") for m in loaded)  # the API only
    assert not any(m.startswith("prometheus_client") for m in loaded)
    assert result["run"] == "TracedRun"
