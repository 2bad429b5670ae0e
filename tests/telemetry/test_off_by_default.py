"""Telemetry is off by default and costs nothing when off: no OpenTelemetry import at all."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from pathlib import Path

import pytest

import loopwarden as lw
from loopwarden.errors import ConfigError
from loopwarden.telemetry import TelemetrySettings, parse_telemetry_setting

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
    assert "Allowed keys: enabled, maxToolNames, maxAgents" in str(issues[-1])


def test_config_file_errors_name_the_file_line_and_path(tmp_path: Path) -> None:
    """The key is validated with the whole config: file, line, full path, a "did you mean"."""
    path = tmp_path / "lw.json5"
    path.write_text(
        "{\n  loopwarden: {\n    telemetry: {\n      enabled: 'on',\n"
        "      maxToolName: 5,\n      maxAgents: 0,\n    },\n  },\n}\n"
    )
    with pytest.raises(ConfigError) as caught:
        lw.load_config(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:4: loopwarden.telemetry.enabled: expected true or false, got 'on'",
        f"{path}:5: loopwarden.telemetry.maxToolName: unknown key; did you mean "
        "'maxToolNames'? Allowed keys: enabled, maxToolNames, maxAgents",
        f"{path}:6: loopwarden.telemetry.maxAgents: expected a positive integer (1 or more), got 0",
    ]
    settings = lw.load_config({"loopwarden": {"telemetry": {"maxAgents": 3}}}).settings
    assert settings.telemetry == TelemetrySettings(enabled=True, max_agents=3)
