"""``loopwarden demo`` as a real subprocess (and on a pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, Run, _env, no_traceback, replay_json


def test_demo_shows_the_escalation(cli: Run) -> None:
    """Both acts show what the model sees: notes, blocks, the breaker and the abort."""
    done = cli(["demo", "--no-delay"])
    no_traceback(done)
    assert done.returncode == 0
    out = done.stdout
    # normal calls, the warning the model reads, blocks, the breaker, and act 2
    assert 'model → check_deploy(deploy_id="d-42")' in out
    assert 'ran → {"deploy_id": "d-42", "status": "pending"}' in out
    assert "model also reads: WARNING: check_deploy has been called 3 times" in out
    assert out.count("BLOCKED — not executed") == 2
    assert (
        "CircuitBreakerTripped(code='global_circuit_breaker', tool='check_deploy', count=7)" in out
    )
    assert "7 ran, 2 were blocked, and call 10 tripped the circuit breaker" in out
    assert "post-compaction guard armed for 3 attempts" in out
    assert "CompactionLoopPersisted(code='compaction_loop_persisted', tool='read_file'" in out
    assert out.index("Act 1") < out.index("Act 2")
    assert "\x1b[" not in out

    only_two = cli(["demo", "--no-delay", "--act", "2"])
    assert "Act 1" not in only_two.stdout and "CompactionLoopPersisted" in only_two.stdout


def test_demo_record_replays_to_the_same_decisions(cli: Run, tmp_path: Path) -> None:
    """The demo's run record, replayed as the demo suggests, gives the live decisions."""
    record = tmp_path / "demo.jsonl"
    done = cli(["demo", "--no-delay", "--record", str(record)])
    assert done.returncode == 0, done.stderr
    hint = next(
        line
        for line in done.stdout.splitlines()
        if "loopwarden replay" in line and str(record) in line
    )
    args = hint.split("loopwarden replay", 1)[1].split()
    live = [json.loads(line) for line in record.read_text().splitlines()]
    live_events = [
        (e["run_id"], e["action"], e["detector"], e["count"]) for e in live if e["type"] == "event"
    ]
    report = replay_json(*args)  # exactly the command the demo suggests
    replayed = [
        (run["run"], event["action"], event["detector"], event["count"])
        for run in report["runs"]
        for event in run["events"]
    ]
    assert replayed == live_events
    assert [run["stop"]["action"] for run in report["runs"]] == ["stop", "abort"]

    bad = cli(["demo", "--no-delay", "--record", str(tmp_path / "no" / "such" / "dir.jsonl")])
    no_traceback(bad)
    assert bad.returncode == 2 and "cannot write" in bad.stderr


def _run_on_pty(args: list[str], timeout: float = 30) -> tuple[int, str]:
    """Run ``python -m loopwarden ARGS`` with stdout and stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwarden", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=_env({"TERM": "xterm"}),
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    code = proc.wait(timeout=timeout)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_demo_and_replay_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the demo and replay use colour, and replay shows its progress."""
    code, out = _run_on_pty(["demo"])
    assert code == 0
    assert "\x1b[" in out  # colour on a terminal
    assert "CircuitBreakerTripped" in out and "CompactionLoopPersisted" in out

    # replay on a terminal: coloured text; with the report in a file, a progress bar on stderr
    big = tmp_path / "big.jsonl"
    lines = []
    for run in range(400):
        for call in range(25):
            for kind in ("call", "outcome"):
                lines.append(
                    json.dumps(
                        {
                            "type": kind,
                            "run_id": f"r{run}",
                            "call_id": f"c{call}",
                            "tool": "t",
                            "args_hash": "t:1",
                            "outcome_hash": "o",
                        }
                    )
                )
    big.write_text("\n".join(lines) + "\n")
    code, out = _run_on_pty(
        ["replay", str(big), "--loops-only", "--progress", "-o", str(tmp_path / "r.txt")]
    )
    assert code == 0
    assert "replaying" in out and "100%" in out
    assert "Summary: 400 runs, 10000 calls" in (tmp_path / "r.txt").read_text()
    code, out = _run_on_pty(["replay", str(ROOT / "examples" / "traces" / "codex")])
    # The Codex example's loop goes on after a compaction: the post-compaction guard ends it.
    assert code == 0 and "\x1b[" in out and "ABORTED" in out
