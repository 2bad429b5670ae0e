"""Telemetry is off by default and costs nothing when off: no OpenTelemetry import at all."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from loopwarden.telemetry import TelemetrySettings, parse_telemetry_setting

LOOP = """
import json, sys
import loopwarden as lw
cfg = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3,
       "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}}}
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
from loopwarden.telemetry import resolve_telemetry, parse_telemetry_setting
settings, _ = parse_telemetry_setting({"enabled": False})
assert resolve_telemetry(None, settings) is None
assert resolve_telemetry(False) is None
loaded = sorted(m for m in sys.modules
                if m.split(".")[0] in ("opentelemetry", "prometheus_client", "google")
                or m.startswith("loopwarden.telemetry._"))
print(json.dumps({"events": [e.action for e in events], "loaded": loaded}))
"""


def run_python(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_a_guard_without_telemetry_imports_no_opentelemetry() -> None:
    """A full loop with events, plus resolving an off switch, loads no OTel/Prometheus module."""
    result = run_python(LOOP)
    assert result["events"] == ["warn", "block", "block", "stop"]
    assert result["loaded"] == ["loopwarden.telemetry._names", "loopwarden.telemetry._settings"]


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry") is None, reason="opentelemetry-api not installed"
)
def test_turning_it_on_is_what_imports_opentelemetry() -> None:
    """The same check sees the OTel API once a Telemetry is created (so the test above can fail)."""
    code = LOOP.replace(
        "assert resolve_telemetry(False) is None",
        "assert resolve_telemetry(True) is not None",
    )
    loaded = run_python(code)["loaded"]
    assert isinstance(loaded, list)
    assert "opentelemetry.trace" in loaded and "opentelemetry.metrics" in loaded
    assert "loopwarden.telemetry._otel" in loaded
    assert not any(m.startswith("opentelemetry.sdk") for m in loaded)  # the API only


def test_settings_key_accepts_a_boolean_or_an_object() -> None:
    """`loopwarden.telemetry` takes true/false or {enabled, maxToolNames, maxAgents}."""
    assert parse_telemetry_setting(None) == (TelemetrySettings(), [])
    assert parse_telemetry_setting(True) == (TelemetrySettings(enabled=True), [])
    settings, issues = parse_telemetry_setting({"maxToolNames": 20})
    assert issues == [] and settings == TelemetrySettings(enabled=True, max_tool_names=20)
    settings, issues = parse_telemetry_setting({"enabled": False, "maxAgents": 5})
    assert issues == [] and settings == TelemetrySettings(enabled=False, max_agents=5)


def test_settings_key_reports_each_problem_with_its_path() -> None:
    """Bad values give one ConfigIssue per problem, each naming its key."""
    _, issues = parse_telemetry_setting("yes")
    assert [(i.path, i.message) for i in issues] == [
        ("loopwarden.telemetry", "expected true, false or an object, got str")
    ]
    _, issues = parse_telemetry_setting({"enabled": "on", "maxToolNames": 0, "spans": True})
    assert sorted(i.path for i in issues) == [
        "loopwarden.telemetry.enabled",
        "loopwarden.telemetry.maxToolNames",
        "loopwarden.telemetry.spans",
    ]
    assert "expected one of enabled, maxToolNames, maxAgents" in str(issues[-1])
