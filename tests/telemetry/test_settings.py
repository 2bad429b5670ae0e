"""The `loopwarden.telemetry` setting: validated with the config, shown by `config check`."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import loopwarden as lw
from loopwarden.errors import ConfigError
from loopwarden.telemetry import TelemetrySettings, parse_telemetry_setting
from loopwarden.traces.replay import Replayer
from tests.cli.conftest import run_cli


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


def test_config_check_shows_the_setting(tmp_path: Path) -> None:
    """`loopwarden config check` lists telemetry with its effective values and source."""
    path = tmp_path / "lw.json5"
    path.write_text("{loopwarden: {telemetry: {maxToolNames: 20}}}")
    done = run_cli(["config", "check", str(path), "--format", "json"])
    if importlib.util.find_spec("opentelemetry") is None:
        # The guard could not start its telemetry: the check says so, with the extra to install.
        assert done.returncode == 1 and "pip install 'loopwarden[otel]'" in done.stdout
        assert '"path": "loopwarden.telemetry"' in done.stdout, done.stdout
        return
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["settings"]["telemetry"]
    assert shown == {
        "value": {"enabled": True, "maxToolNames": 20, "maxAgents": 100},
        "source": "loopwarden",
    }
    text = run_cli(["config", "check", str(path)]).stdout
    assert re.search(r"telemetry +\{enabled: true, maxToolNames: 20, maxAgents: 100\}", text)


def test_replay_never_reports_recorded_decisions_as_live_telemetry() -> None:
    """Replay ignores `telemetry: true`: its decisions are about the past."""
    config = lw.load_config({"loopwarden": {"telemetry": True}})
    replayer = Replayer(config, on_run=lambda report: None, on_problem=lambda *a: None)
    assert replayer.guard.telemetry is None
    assert type(replayer.guard.run("r")) is lw.RunGuard
