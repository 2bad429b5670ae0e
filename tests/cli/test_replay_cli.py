"""``loopwarden replay`` as a real subprocess: outputs, exit codes, bad input."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import EXAMPLES, Run, no_traceback, replay_json

CLAUDE = next((EXAMPLES / "claude-code").glob("*.jsonl"))

# Every run object of the JSON report has these keys (documented in docs/cli.md).
RUN_KEYS = {
    "run",
    "session",
    "agent",
    "title",
    "source",
    "level",
    "verdict",
    "calls",
    "tools",
    "counts",
    "first_warning_call",
    "first_intervention_call",
    "first_block_call",
    "stop",
    "calls_after_first_warning",
    "calls_after_stop",
    "calls_prevented",
    "compactions",
    "live_events",
    "events",
    "events_omitted",
}
EVENT_KEYS = {
    "call",
    "line",
    "position",
    "call_id",
    "action",
    "level",
    "tool",
    "detector",
    "count",
    "paired_tool",
    "message",
}


def _run(report: dict[str, Any], fmt: str, index: int = 0) -> dict[str, Any]:
    runs = [r for r in report["runs"] if r["source"]["format"] == fmt]
    return runs[index]


def test_examples_json_report_covers_every_format_and_pattern() -> None:
    """The JSON report of the examples covers every format, documented keys and decisions."""
    report = replay_json(str(EXAMPLES))
    assert report["schema"] == "loopwarden.replay/1"
    assert report["config"]["effective"]["enabled"] is True  # the replay default
    formats = {r["source"]["format"] for r in report["runs"]}
    assert formats == {"loopwarden", "claude-code", "codex", "openclaw", "chat", "otel"}
    for run in report["runs"]:
        assert set(run) == RUN_KEYS
        for event in run["events"]:
            assert set(event) == EVENT_KEYS
    assert {i["format"] for i in report["inputs"]} == formats
    assert report["problems"] == []

    # Claude Code: 1 listing call, then 34 identical polls (calls 2..35) with no wait
    # between them. With the defaults the 5th identical poll in a row warns, the 6th
    # is blocked and the 8th stops the run (consecutive repeats, issue 9).
    claude = _run(report, "claude-code")
    assert claude["calls"] == 35
    assert claude["first_warning_call"] == 6
    assert claude["first_block_call"] == 7
    assert claude["stop"]["call"] == 9
    assert claude["stop"]["detector"] == "consecutive_repeat"
    assert claude["counts"] == {"warn": 1, "block": 2, "stop": 1, "abort": 0}
    assert claude["calls_after_first_warning"] == 35 - 6
    assert claude["calls_after_stop"] == 26
    assert claude["level"] == "critical"
    assert claude["title"].startswith("CI for release/4.2")
    assert _run(report, "claude-code", 1)["level"] == "ok"

    # OpenClaw: a read/exec alternation (a cycle of two with unchanged results), and
    # a re-read that survives compaction.
    pingpong = _run(report, "openclaw")
    assert {e["detector"] for e in pingpong["events"]} == {"cycle"}
    assert pingpong["stop"]["call"] == 11
    after_compaction = _run(report, "openclaw", 1)
    assert after_compaction["compactions"] == 1
    assert after_compaction["stop"]["detector"] == "compaction_loop_persisted"
    assert after_compaction["stop"]["action"] == "abort"

    # Chat export with a tools list: the unregistered refund_order, retried with the
    # same arguments and the same error, is blocked by the consecutive-repeat rule at its
    # 6th try (call 7), before the unknown-tool guard's 10 misses, and reported as the
    # unknown tool it is.
    chat = next(r for r in report["runs"] if r["run"] == "conv_support_1042")
    first_block = next(e for e in chat["events"] if e["action"] == "block")
    assert first_block["detector"] == "unknown_tool_repeat"
    assert first_block["tool"] == "refund_order"
    assert first_block["call"] == 1 + 6

    # OTel: 12 identical searches in a row: warned at the 5th, stopped at the 8th.
    otel = next(r for r in report["runs"] if r["source"]["format"] == "otel" and r["calls"] == 13)
    assert otel["level"] == "critical"
    assert otel["events"][0]["call"] == 5
    assert otel["stop"]["call"] == 8

    totals = report["totals"]
    assert totals["runs"] == len(report["runs"])
    assert totals["calls"] == sum(r["calls"] for r in report["runs"])
    assert totals["runs_ok"] + totals["runs_warning"] + totals["runs_critical"] == totals["runs"]


def test_text_report_lists_events_and_verdicts(cli: Run) -> None:
    """The text report lists each event and a verdict per run, and --loops-only hides clean runs."""
    done = cli(["replay", str(CLAUDE)])
    no_traceback(done)
    assert done.returncode == 0
    out = done.stdout
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert "call 6" in out and "warn" in out and "consecutive_repeat" in out
    assert "call 7" in out and "2 blocks" in out
    assert "call 9" in out and "stop" in out
    assert "STOPPED  stopped at call 9 of 35" in out
    assert "OK  ok: 4 calls, no loop detected" in out
    assert "Summary: 2 runs, 39 calls from 1 file" in out

    loops = cli(["replay", str(CLAUDE), "--loops-only", "-v"])
    assert "no loop detected" not in loops.stdout
    # --verbose shows what the model would be told
    assert "CRITICAL: loopwarden stopped this run: Bash was called 8 times" in loops.stdout


def test_set_overrides_and_fail_on(cli: Run, tmp_path: Path) -> None:
    """--set lowers thresholds in the report, and --fail-on sets exit 1 at the chosen level only."""
    lowered = replay_json(
        str(CLAUDE), "--set", "warningThreshold=3", "--set", "criticalThreshold=5"
    )
    run = lowered["runs"][0]
    assert lowered["config"]["overrides"] == {"warningThreshold": 3, "criticalThreshold": 5}
    assert run["first_warning_call"] == 5  # the 4th poll sees 3 identical calls
    assert run["first_block_call"] == 7  # the consecutive repeat's 6th, before critical 5+1
    assert run["stop"]["call"] == 9

    assert cli(["replay", str(CLAUDE), "--fail-on", "critical"]).returncode == 1
    # The chat trace of two forecasts never warns: no level fails it.
    weather = EXAMPLES / "chat" / "weather-responses.jsonl"
    assert cli(["replay", str(weather), "--fail-on", "critical"]).returncode == 0
    assert cli(["replay", str(weather), "--fail-on", "warning"]).returncode == 0
    otel = EXAMPLES / "otel" / "research-agent-spans.json"
    assert cli(["replay", str(otel), "--fail-on", "warning"]).returncode == 1

    typo = cli(["replay", str(CLAUDE), "--set", "warningTreshold=5"])
    no_traceback(typo)
    assert typo.returncode == 2
    assert "did you mean 'warningThreshold'" in typo.stderr
    bad = cli(["replay", str(CLAUDE), "--set", "warningThreshold"])
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_config_file_agents_and_enabled_note(cli: Run, tmp_path: Path) -> None:
    """A config's agent block applies by trace path; the live run record stays untouched."""
    config = tmp_path / "openclaw.json5"
    config.write_text(
        "{ // per-agent thresholds\n"
        "  tools: { loopDetection: { enabled: true } },\n"
        "  agents: { list: [ { id: 'ops', tools: { loopDetection: {\n"
        "    warningThreshold: 2, criticalThreshold: 3,\n"
        "    globalCircuitBreakerThreshold: 4 } } } ] },\n"
        "  loopwarden: { runRecord: '" + str(tmp_path / "must-not-exist.jsonl") + "' },\n"
        "}\n"
    )
    trace = EXAMPLES / "openclaw"
    # The OpenClaw transcript lives under agents/ops/sessions: the ops block applies.
    report = replay_json(str(trace), "--config", str(config))
    first = report["runs"][0]
    assert first["agent"] == "ops"
    # The ops block's critical 3 blocks the read/exec ping-pong at call 4; with a
    # breaker of 4 one block in a row is all it takes to stop the run, and the stop names
    # the rule that ends it.
    assert first["stop"]["call"] == 5
    assert first["stop"]["detector"] == "blocks_in_a_row"
    # Replay never writes into the run record the config names.
    assert not (tmp_path / "must-not-exist.jsonl").exists()

    # --agent forces a block for every run; an unknown agent gets the global one.
    forced = replay_json(str(CLAUDE), "--config", str(config), "--agent", "ops")
    assert forced["runs"][0]["agent"] == "ops"
    assert forced["runs"][0]["stop"]["call"] == 2 + 4

    unset = tmp_path / "unset.json"
    unset.write_text('{"tools": {"loopDetection": {"historySize": 40}}}')
    done = cli(["replay", str(CLAUDE), "--config", str(unset)])
    assert done.returncode == 0
    assert "enabled is unset" in done.stderr and "--set enabled=true" in done.stderr
    assert "OK  ok: 35 calls" in done.stdout  # rolling detectors off: nothing fires

    broken = tmp_path / "broken.json"
    broken.write_text('{"tools": {"loopDetection": {"warningThreshold": "ten"}}}\n')
    done = cli(["replay", str(CLAUDE), "--config", str(broken)])
    no_traceback(done)
    assert done.returncode == 2
    assert "broken.json:1" in done.stderr and "warningThreshold" in done.stderr


def test_malformed_records_are_reported_and_skipped(cli: Run, tmp_path: Path) -> None:
    """Malformed records are reported with file and line, counted, and replay goes on."""
    lines = CLAUDE.read_text().splitlines()
    lines.insert(3, '{"type": "assistant", "message": {"content": [')  # cut off
    lines.insert(5, "[1, 2, 3]")
    lines.insert(7, '{"type": "assistant", "sessionId": "s", "message": "not an object"}')
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n\n")
    done = cli(["replay", str(broken), "--format", "json"])
    no_traceback(done)
    assert done.returncode == 0
    assert f"{broken}:4: not valid JSON" in done.stderr
    assert f"{broken}:6: expected a JSON object" in done.stderr
    assert f"{broken}:8: assistant record without a message object" in done.stderr
    report = json.loads(done.stdout)
    assert report["totals"]["problems"] == 3
    assert [p["where"] for p in report["problems"]] == [
        f"{broken}:4",
        f"{broken}:6",
        f"{broken}:8",
    ]
    assert report["runs"][0]["stop"] is not None  # replay went on after the bad lines

    record = tmp_path / "record.jsonl"
    record.write_text(
        '{"type": "call", "run_id": "r1", "call_id": "c1", "args_hash": "x:1"}\n'
        '{"type": "call", "call_id": "c2", "tool": "x", "args_hash": "x:1"}\n'
        '{"type": "bogus", "run_id": "r1"}\n'
        '{"type": "call", "run_id": "r1", "call_id": "c3", "tool": "x", "args_hash": "x:1"}\n'
    )
    done = cli(["replay", str(record), "--input-format", "loopwarden"])
    no_traceback(done)
    assert f"{record}:1: call without a tool name or args_hash" in done.stderr
    assert f"{record}:2: call without a run_id" in done.stderr
    assert f"{record}:3: unknown record type 'bogus'" in done.stderr
    assert "1 run, 1 calls" in done.stdout


def test_unknown_formats_and_bad_paths(cli: Run, tmp_path: Path) -> None:
    """An unknown format or a bad path is a usage error alone, and is skipped among good inputs."""
    other = tmp_path / "metrics.jsonl"
    other.write_text('{"cpu": 0.4, "host": "a"}\n{"cpu": 0.5, "host": "b"}\n')
    done = cli(["replay", str(other)])
    no_traceback(done)
    assert done.returncode == 2
    assert "cannot tell which trace format" in done.stderr
    for name in ("loopwarden", "claude-code", "codex", "openclaw", "chat", "otel"):
        assert name in done.stderr

    # In a folder, an unknown file is reported and the others are replayed.
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(other, folder / "metrics.jsonl")
    shutil.copy(CLAUDE, folder / "session.jsonl")
    (folder / "notes.txt").write_text("not a trace")
    (folder / "empty.jsonl").write_text("")
    done = cli(["replay", str(folder)])
    assert done.returncode == 0
    assert "metrics.jsonl: cannot tell" in done.stderr
    assert "Summary: 2 runs" in done.stdout

    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff\xfe\x00binary\x00" * 20)
    done = cli(["replay", str(garbage)])
    no_traceback(done)
    assert done.returncode == 2

    missing = cli(["replay", str(tmp_path / "nope.jsonl")])
    no_traceback(missing)
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith(
        "no such file or folder: " + str(tmp_path / "nope.jsonl")
    )

    forced = cli(["replay", str(CLAUDE), "--input-format", "yaml"])
    assert forced.returncode == 2 and "unknown trace format 'yaml'" in forced.stderr
    assert cli(["replay"]).returncode == 2
    assert cli(["replay", str(CLAUDE), "--format", "xml"]).returncode == 2


def test_stdin_gzip_and_output_file(cli: Run, tmp_path: Path) -> None:
    """Replay reads stdin and gzip files and writes the report to -o instead of stdout."""
    piped = cli(["replay", "-", "--format", "json"], input=CLAUDE.read_text())
    assert piped.returncode == 0, piped.stderr
    report = json.loads(piped.stdout)
    assert report["runs"][0]["source"]["file"] == "<stdin>"
    assert report["runs"][0]["stop"]["call"] == 9

    packed = tmp_path / "session.jsonl.gz"
    packed.write_bytes(gzip.compress(CLAUDE.read_bytes()))
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    done = cli(["replay", str(packed), "--format", "json", "-o", str(out)])
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert json.loads(out.read_text())["runs"][0]["stop"]["call"] == 9

    text_out = tmp_path / "report.txt"
    assert cli(["replay", str(CLAUDE), "-o", str(text_out)]).returncode == 0
    assert "STOPPED" in text_out.read_text()
    unwritable = cli(["replay", str(CLAUDE), "-o", str(tmp_path / "no" / "dir" / "x.txt")])
    assert unwritable.returncode == 2 and "cannot write" in unwritable.stderr


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--help"], ["demo", "replay", "config"]),
        (
            ["replay", "--help"],
            [
                "--config",
                "--agent",
                "--set",
                "--input-format",
                "--format",
                "--fail-on",
                "Exit codes",
                "enabled: true",
                "claude-code",
                "otel",
                "-o, --output",
            ],
        ),
        (["config", "check", "--help"], ["--agent", "--set", "Exit codes", "repair"]),
        (["demo", "--help"], ["--no-delay", "--record", "CircuitBreakerTripped"]),
    ],
)
def test_help_texts(cli: Run, args: list[str], needles: list[str]) -> None:
    """Each command's --help shows its options and the documented explanations."""
    done = cli(args)
    assert done.returncode == 0
    for needle in needles:
        assert needle in done.stdout, needle
