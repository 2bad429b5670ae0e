"""``loopwarden config check`` as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
      { id: "helper", name: "an agent without a block of its own" },
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
    assert "sendTools          [notify]" in out

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

    one = cli(["config", "check", str(path), "--agent", "Helper", "--set", "historySize=50"])
    assert one.returncode == 0
    assert "agent 'Helper' — no block of its own; the global block applies" in one.stdout
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


def test_agent_must_be_an_agent_of_the_file(cli: Run, tmp_path: Path) -> None:
    """--agent names an agent of the file (ids normalised) or fails with the file's agents."""
    path = tmp_path / "openclaw.json5"
    path.write_text(CONFIG)
    done = cli(["config", "check", str(path), "--agent", "nosuch"])
    no_traceback(done)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        f"loopwarden config: error: --agent 'nosuch' is not an agent of {path}; "
        "its agents: ops, helper, night-bot"
    ) in done.stderr
    assert cli(["config", "check", str(path), "--agent", "NIGHT BOT"]).returncode == 0

    bare = tmp_path / "bare.json5"
    bare.write_text("{tools: {loopDetection: {enabled: true}}}")
    done = cli(["config", "check", str(bare), "--agent", "ops", "--format", "json"])
    assert done.returncode == 2 and done.stdout == ""
    assert "names no agents" in done.stderr


TYPOS = [
    ("{tools: {loopDetecton: {enabled: true}}}", "tools.loopDetecton", "'loopDetection'"),
    ("{tools: {LoopDetection: {enabled: true}}}", "tools.LoopDetection", "'loopDetection'"),
    ("{loopDetection: {enabled: true}}", "loopDetection", "tools.loopDetection?"),
    ("{loopDetecton: {enabled: true}}", "loopDetecton", "tools.loopDetection?"),
    ("{Tools: {loopDetection: {enabled: true}}}", "Tools", "'tools'"),
    ("{tool: {loopDetection: {enabled: true}}}", "tool", "'tools'"),
    ("{agnets: {list: [{id: 'a', tools: {loopDetection: {}}}]}}", "agnets", "'agents'"),
    ("{agents: {lists: [{id: 'a', tools: {loopDetection: {}}}]}}", "agents.lists", "'list'"),
    ("{agents: {entry: {a: {tools: {loopDetection: {}}}}}}", "agents.entry", "'entries'"),
    ("{agents: {list: [{id: 'a', Tools: {}}]}}", "agents.list[0].Tools", "'tools'"),
    (
        "{agents: {entries: {a: {tools: {loop_detection: {}}}}}}",
        "agents.entries.a.tools.loop_detection",
        "'loopDetection'",
    ),
    (
        "{agents: {defaults: {tools: {loopDetection: {enabled: true}}}}}",
        "agents.defaults.tools.loopDetection",
        "tools.loopDetection?",
    ),
    ("{agent: {tools: {loopDetection: {}}}}", "agent.tools.loopDetection", "tools.loopDetection?"),
    ("{loopWarden: {store: 'memory://'}}", "loopWarden", "'loopwarden'"),
    ("{tools: {warningThreshold: 5}}", "tools.warningThreshold", "tools.loopDetection"),
]


@pytest.mark.parametrize(("text", "path", "fix"), TYPOS, ids=[t[1] for t in TYPOS])
def test_a_misspelt_block_name_is_an_error(
    cli: Run, tmp_path: Path, text: str, path: str, fix: str
) -> None:
    """A misspelt block or parent name fails the check, naming the key and the fix."""
    config = tmp_path / "openclaw.json5"
    config.write_text(text)
    done = cli(["config", "check", str(config)])
    no_traceback(done)
    assert done.returncode == 1, done.stdout
    assert f"{config}: invalid (1 problem)" in done.stdout
    assert f"{config}:1: {path}: " in done.stdout
    assert "did you mean" in done.stdout or "belongs in" in done.stdout
    assert fix in done.stdout


REAL_OPENCLAW = """// the shape of a real ~/.openclaw/openclaw.json
{
  $schema: "https://openclaw.ai/config.schema.json",
  meta: { lastTouchedVersion: "2026.7.2" },
  env: { vars: { TZ: "Europe/Berlin" } },
  gateway: { port: 18789, mode: "local", bind: "loopback", tools: { deny: ["browser"] } },
  channels: { telegram: { enabled: true, botToken: "${TELEGRAM_TOKEN}" } },
  models: { providers: {} },
  session: { scope: "per-sender" },
  messages: { ackReaction: "👀" },
  hooks: { enabled: false },
  skills: { entries: { notes: { enabled: true, config: { loopDetection: "theirs" } } } },
  plugins: { entries: { memory: { enabled: true, config: { tools: 1, agents: 2 } } } },
  talk: { provider: "system" },
  cron: { enabled: true },
  agent: { model: "anthropic/claude-opus-4" },  // the older layout some files still carry
  tools: {
    profile: "coding",
    allow: ["exec", "read"],
    exec: { host: "sandbox" },
    web: { search: { enabled: true } },
    elevated: { enabled: false },
    subagents: { tools: { deny: ["exec"] } },
    loopDetection: { enabled: true, warningThreshold: 8 },
  },
  agents: {
    defaults: { model: { primary: "anthropic/claude-sonnet-4" }, workspace: "~/work" },
    list: [
      { id: "main", default: true, identity: { name: "Claw" } },
      { id: "ops", workspace: "~/ops",
        tools: { profile: "minimal", loopDetection: { criticalThreshold: 12 } } },
    ],
  },
  loopwarden: { sendTools: ["notify"] },
}
"""


def test_a_real_openclaw_file_is_valid(cli: Run, tmp_path: Path) -> None:
    """OpenClaw's own sections and settings, beside ours, are never taken for misspellings."""
    path = tmp_path / "openclaw.json"
    path.write_text(REAL_OPENCLAW, encoding="utf-8")
    done = cli(["config", "check", str(path), "--agent", "ops", "--format", "json"])
    no_traceback(done)
    assert done.returncode == 0, done.stdout
    (ops,) = json.loads(done.stdout)["agents"]
    assert ops["effective"]["warningThreshold"] == 8
    assert ops["effective"]["criticalThreshold"] == 12


def test_a_misspelt_block_name_stops_every_entry_point(cli: Run, tmp_path: Path) -> None:
    """The guard, the hook and the MCP proxy refuse the config too, saying what to rename."""
    import loopwarden as lw

    path = tmp_path / "typo.json5"
    path.write_text("{tools: {loopDetecton: {enabled: true}}}")
    with pytest.raises(lw.ConfigError, match=r"tools\.loopDetecton: .*did you mean"):
        lw.LoopGuard(str(path))

    event = {
        "session_id": "typo",
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": "a.py"},
        "prompt_id": "p1",
        "tool_use_id": "t1",
    }
    hook = cli(
        ["hook", "claude-code", "--no-daemon", "--config", str(path)],
        input=json.dumps(event),
        env={"HOME": str(tmp_path)},
    )
    no_traceback(hook)
    assert hook.returncode == 0  # the agent is never broken: the call is allowed ...
    assert "invalid loopwarden config" in hook.stderr  # ... and the user is told why
    assert "did you mean 'loopDetection'" in hook.stderr

    proxy = cli(["mcp-proxy", "--config", str(path), "--", "true"])
    no_traceback(proxy)
    assert proxy.returncode == 2
    assert "tools.loopDetecton: unknown key; did you mean 'loopDetection'" in proxy.stderr


# -- every rule in force, and what acts first ------------------------------------------

REPEAT_CONFIG = """{
  tools: { loopDetection: { enabled: true } },
  loopwarden: {
    consecutiveRepeat: { warnAt: 3, blockAt: 4, stopAt: 6 },
    waitSeconds: 4,
  },
}
"""


def _guard_on_identical_calls(path: Path) -> dict[str, int]:
    """The call numbers at which a real guard under ``path`` first warns, blocks and stops a
    stuck agent repeating one call (driven as an integration does, by ScriptedAgent)."""
    from loopwarden import LoopAbort, LoopGuard
    from loopwarden.testing import ScriptedAgent

    guard = LoopGuard(str(path), run_record=False)
    agent = ScriptedAgent(guard.run("stuck"), {"read_file": lambda path: "the same text"})
    first: dict[str, int] = {}
    for number in range(1, 100):
        try:
            seen = agent.call("read_file", {"path": "a.txt"}, f"c{number}")
        except LoopAbort:
            first["stop"] = number
            break
        if seen.blocked:
            first.setdefault("block", number)
        elif seen.warned:
            first.setdefault("warn", number)
    return first


def test_the_block_is_reported_at_the_call_where_the_guard_blocks(cli: Run, tmp_path: Path) -> None:
    """With consecutiveRepeat {3, 4, 6}, config check says the identical loop is warned at
    call 3, blocked at call 4 and stopped at call 6 by consecutive_repeat, which is what a
    real guard under the same file does; the old summary said "block at 20"."""
    path = tmp_path / "loopwarden.json5"
    path.write_text(REPEAT_CONFIG)
    truth = _guard_on_identical_calls(path)
    assert truth == {"warn": 3, "block": 4, "stop": 6}

    data = json.loads(cli(["config", "check", str(path), "--format", "json"]).stdout)
    (view,) = data["agents"]
    identical = next(p for p in view["first_actions"] if p["pattern"] == "identical")
    assert {action: act["call"] for action, act in identical["first"].items()} == truth
    assert {act["rule"] for act in identical["first"].values()} == {"consecutive_repeat"}

    done = cli(["config", "check", str(path)])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "identical loop   warn at call 3 (consecutive_repeat) · block at call 4 "
        "(consecutive_repeat) · stop at call 6 (consecutive_repeat)" in out
    )
    assert "block at 20" not in out and "warning at 10" not in out
    # The numbers, and where each comes from: the file's line, or the default.
    assert "consecutive_repeat         warn 3 · block 4 · stop 6" in out
    assert "loopwarden.consecutiveRepeat.blockAt = 4" in out
    assert f"loopwarden {path}:4" in out
    assert "loopwarden.cycle.warnRounds = 3" in out


def test_every_rule_is_listed_with_its_thresholds_and_sources(cli: Run, tmp_path: Path) -> None:
    """Every registered rule is in the JSON, in precedence order, with numbers that are its
    own thresholds() under the file; the loopwarden block's other settings show their
    source; a rule switched off says which key did it."""
    from loopwarden.engine.detectors import rules

    path = tmp_path / "loopwarden.json5"
    path.write_text(
        REPEAT_CONFIG.replace("waitSeconds: 4,", "waitSeconds: 4, cycle: { enabled: false },")
    )
    data = json.loads(cli(["config", "check", str(path), "--format", "json"]).stdout)
    (view,) = data["agents"]
    listed = [r["name"] for r in view["rules"]]
    assert listed == [cls.name for cls in rules()]
    by_name = {r["name"]: r for r in view["rules"]}
    assert by_name["cycle"]["on"] is False
    assert by_name["cycle"]["switch"]["source"] == "loopwarden"
    repeat = by_name["consecutive_repeat"]
    assert [(t["action"], t["at"]) for t in repeat["thresholds"]] == [
        ("warn", 3),
        ("block", 4),
        ("stop", 6),
    ]
    assert repeat["thresholds"][1]["sources"] == [
        {
            "key": "loopwarden.consecutiveRepeat.blockAt",
            "value": 4,
            "source": "loopwarden",
            "line": 4,
            "detail": None,
        }
    ]
    (stop_after,) = by_name["blocks_in_a_row"]["thresholds"][0]["sources"]
    assert stop_after["source"] == "derived" and stop_after["value"] == 10
    warn = by_name["generic_repeat"]["thresholds"][0]["sources"][0]
    assert warn["key"] == "tools.loopDetection.warningThreshold" and warn["source"] == "default"
    assert data["settings"]["waitSeconds"] == {"value": 4, "source": "loopwarden", "line": 5}
    assert data["settings"]["volatileCounters"]["source"] == "default"
    assert data["settings"]["consecutiveRepeat"]["value"]["blockAt"] == 4
    # With the cycle rule off, the ping-pong is left to another rule, and the summary says so.
    ping = next(p for p in view["first_actions"] if p["pattern"] == "ping_pong")
    assert "cycle" not in {act["rule"] for act in ping["first"].values()}
    assert ping["first"]["block"]["rule"] == "ping_pong"

    out = cli(["config", "check", str(path)]).stdout
    assert (
        f"cycle                      off (loopwarden.cycle.enabled: false, loopwarden {path}:5)"
        in out
    )


@pytest.mark.parametrize(
    ("block", "pattern", "action", "call", "rule"),
    [
        ("{enabled: true}", "poll", "block", 21, "known_poll_no_progress"),
        ("{enabled: true, criticalThreshold: 12}", "poll", "block", 13, "known_poll_no_progress"),
        ("{enabled: true}", "failure_streak", "stop", 15, "failure_streak"),
        ("{enabled: true}", "unknown_tool", "block", 11, "unknown_tool_repeat"),
        ("{enabled: true}", "post_compaction", "stop", 3, "compaction_loop_persisted"),
        ("{}", "identical", None, None, None),
    ],
)
def test_what_acts_first_follows_the_config(
    cli: Run,
    tmp_path: Path,
    block: str,
    pattern: str,
    action: str | None,
    call: int | None,
    rule: str | None,
) -> None:
    """Each pattern's summary moves with the thresholds (it is a run of the guard, not a
    sentence); with enabled unset nothing catches an identical loop."""
    path = tmp_path / "loopwarden.json5"
    path.write_text(f"{{tools: {{loopDetection: {block}}}}}")
    data = json.loads(cli(["config", "check", str(path), "--format", "json"]).stdout)
    found = next(p for p in data["agents"][0]["first_actions"] if p["pattern"] == pattern)
    if action is None:
        assert found["first"] == {}
        assert found["calls"] > 20
    else:
        assert found["first"][action] == {
            "call": call,
            "rule": rule,
            "count": found["first"][action]["count"],
        }


def test_a_rule_switched_off_with_false_names_its_line(cli: Run, tmp_path: Path) -> None:
    """``cycle: false`` (the short form) is the file's switch, with its line, not a default."""
    path = tmp_path / "loopwarden.json5"
    path.write_text("{tools: {loopDetection: {enabled: true}},\n loopwarden: {cycle: false}}")
    data = json.loads(cli(["config", "check", str(path), "--format", "json"]).stdout)
    cycle = next(r for r in data["agents"][0]["rules"] if r["name"] == "cycle")
    assert cycle["on"] is False
    assert cycle["switch"] == {
        "key": "loopwarden.cycle.enabled",
        "value": False,
        "source": "loopwarden",
        "line": 2,
        "detail": None,
    }
