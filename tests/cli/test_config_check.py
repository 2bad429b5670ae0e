"""``loopwarden config check`` as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Run, no_traceback

CONFIG = """// an OpenClaw-style config
{
  tools: {
    loopDetection: {
      enabled: true,
      warningThreshold: 8,
      criticalThreshold: 5,   // below the warning: repaired to 9
    },
  },
  agents: {
    list: [
      { id: "ops", tools: { loopDetection: {
          warningThreshold: 4, detectors: { pingPong: false } } } },
    ],
    entries: { "Night Bot": { tools: { loopDetection: { enabled: false } } } },
  },
  loopwarden: { sendTools: ["notify"] },
}
"""


def _fields(view: dict[str, object]) -> dict[str, dict[str, object]]:
    fields = view["fields"]
    assert isinstance(fields, dict)
    return fields


def test_effective_config_with_sources(cli: Run, tmp_path: Path) -> None:
    """config check shows each agent's effective settings with their sources and lines."""
    path = tmp_path / "openclaw.json5"
    path.write_text(CONFIG)
    done = cli(["config", "check", str(path)])
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"{path}: valid (2 agent blocks)" in out
    assert f"global {path}:5" in out  # enabled, from the global block, with its line
    assert (
        "repair (criticalThreshold 5 is not above warningThreshold 8; using criticalThreshold 9)"
        in out
    )
    assert "agent 'ops' (agents.list[0].tools.loopDetection over the global block)" in out
    assert f"agent {path}:13" in out
    assert "agent 'night-bot'" in out and "the guard does nothing at all" in out
    assert "sendTools        [notify]" in out

    data = json.loads(cli(["config", "check", str(path), "--format", "json"]).stdout)
    assert data["valid"] is True
    views = {view["agent"]: view for view in data["agents"]}
    assert set(views) == {None, "ops", "night-bot"}
    glob = _fields(views[None])
    assert glob["criticalThreshold"] == {
        "value": 9,
        "source": "repair",
        "line": None,
        "detail": "criticalThreshold 5 is not above warningThreshold 8; using criticalThreshold 9",
    }
    assert glob["historySize"]["source"] == "default"
    ops = _fields(views["ops"])
    # Merged field by field: the agent's 4 wins, critical 5 from the global block
    # is now above it, so nothing is repaired for ops.
    assert (ops["warningThreshold"]["value"], ops["warningThreshold"]["source"]) == (4, "agent")
    assert (ops["criticalThreshold"]["value"], ops["criticalThreshold"]["source"]) == (5, "global")
    assert ops["detectors.pingPong"]["value"] is False
    assert views["night-bot"]["effective"]["enabled"] is False
    assert data["settings"]["sendTools"] == {"value": ["notify"], "source": "loopwarden"}

    one = cli(["config", "check", str(path), "--agent", "unknown-agent", "--set", "historySize=50"])
    assert one.returncode == 0
    assert "agent 'unknown-agent' — no block of its own; the global block applies" in one.stdout
    assert "historySize                      50      override" in one.stdout


def test_invalid_config_lists_every_problem(cli: Run, tmp_path: Path) -> None:
    """config check lists every problem with its line and exits 1; usage errors exit 2."""
    path = tmp_path / "bad.json5"
    path.write_text(
        "{\n  tools: { loopDetection: { warningTreshold: 5, historySize: 0 } },\n"
        "  agents: { list: [ { tools: { loopDetection: { enabled: 'yes' } } } ] },\n}\n"
    )
    done = cli(["config", "check", str(path)])
    no_traceback(done)
    assert done.returncode == 1
    assert f"{path}: invalid (4 problems)" in done.stdout
    assert (
        f"{path}:2: tools.loopDetection.warningTreshold: unknown key; "
        "did you mean 'warningThreshold'?" in done.stdout
    )
    assert (
        f"{path}:3: agents.list[0].tools.loopDetection.enabled: expected true or false"
        in done.stdout
    )
    data = json.loads(cli(["config", "check", str(path), "-f", "json"]).stdout)
    assert data["valid"] is False and len(data["problems"]) == 4

    broken = tmp_path / "broken.json"
    broken.write_text('{"tools": {"loopDetection": {"enabled": true,}\n')
    done = cli(["config", "check", str(broken)])
    assert done.returncode == 1 and "not valid JSON5" in done.stdout

    missing = cli(["config", "check", str(tmp_path / "missing.json")])
    no_traceback(missing)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    ok = tmp_path / "ok.json"
    ok.write_text('{"tools": {"loopDetection": {"enabled": true}}}')
    bad_set = cli(["config", "check", str(ok), "--set", "warningThreshold=0"])
    assert bad_set.returncode == 2 and "--set" in bad_set.stderr
    assert cli(["config"]).returncode == 2
    assert cli(["config", "frobnicate"]).returncode == 2
