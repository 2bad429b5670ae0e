"""The post-compaction guard's verdict comes first.

A loop that began before a compaction and goes on after it must end with
``compaction_loop_persisted`` — never with one of loopwarden's own stops, and never at a later
call than OpenClaw's rules alone would end it. Swept over loops with 0 to 7 identical calls
before the compaction, through the library, replay, and the Claude Code hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw

ENABLED: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
# OpenClaw's rules alone: the same block with every rule of loopwarden's own switched off.
ALONE: dict[str, Any] = {
    **ENABLED,
    "loopwarden": {
        key: {"enabled": False}
        for key in ("consecutiveRepeat", "cycle", "failureStreak", "blocksInARow")
    },
}
PARAMS = {"command": "ls"}
RESULT = {"content": [{"type": "text", "text": "same listing"}]}
LIMIT = 40


def _library(config: dict[str, Any], before: int) -> tuple[str, str, int, list[str]]:
    """Identical calls, a compaction after ``before`` of them; how the run ends.

    Returns the exception type, its code, the 1-based call at which it was raised and the
    actions of the calls after the compaction.
    """
    run = lw.LoopGuard(config).run("r")
    after: list[str] = []
    for n in range(1, LIMIT + 1):
        if n == before + 1:
            run.on_compaction()
        try:
            decision = run.before_call("exec", PARAMS, call_id=f"c{n}")
            if not decision.blocked:
                run.after_call("exec", PARAMS, call_id=f"c{n}", result=RESULT)
            if n > before:
                after.append(decision.action)
        except lw.LoopAbort as stop:
            return type(stop).__name__, stop.code, n, after
    raise AssertionError(f"no stop in {LIMIT} calls")


@pytest.mark.parametrize("before", range(8))
def test_a_loop_through_a_compaction_ends_with_the_seed_abort(before: int) -> None:
    kind, code, at, after = _library(ENABLED, before)
    alone_kind, alone_code, alone_at, _ = _library(ALONE, before)
    assert (alone_kind, alone_code) == ("CompactionLoopPersisted", "compaction_loop_persisted")
    assert (kind, code) == ("CompactionLoopPersisted", "compaction_loop_persisted"), (
        f"{before} calls before the compaction: ended by {code} at call {at}"
    )
    assert at <= alone_at
    # Nothing after the compaction was stopped by another rule on the way.
    assert "stop" not in after


def test_a_loop_that_stopped_before_the_compaction_stays_stopped() -> None:
    """Compaction does not undo a stop: a run stopped by its own rules is over."""
    run = lw.LoopGuard(ENABLED).run("r")
    with pytest.raises(lw.CircuitBreakerTripped) as stopped:
        for n in range(1, LIMIT):
            if not run.before_call("exec", PARAMS, call_id=f"c{n}").blocked:
                run.after_call("exec", PARAMS, call_id=f"c{n}", result=RESULT)
    assert stopped.value.code == "consecutive_repeat"
    run.on_compaction()
    with pytest.raises(lw.LoopAbort):
        run.before_call("exec", PARAMS, call_id="after")


def _record(before: int, calls: int) -> str:
    """A loopwarden run record: ``calls`` identical calls, a compaction after ``before``."""
    lines: list[dict[str, Any]] = [{"type": "run_start", "ts": 0.0, "run_id": "r"}]
    sig = lw.args_hash("exec", PARAMS)
    for n in range(1, calls + 1):
        if n == before + 1:
            lines.append({"type": "compaction", "ts": float(n), "run_id": "r"})
        cid = f"c{n}"
        lines.append(
            {"type": "call", "ts": float(n), "run_id": "r", "call_id": cid, "tool": "exec"}
            | {"args_hash": sig}
        )
        lines.append(
            {"type": "outcome", "ts": n + 0.5, "run_id": "r", "call_id": cid, "tool": "exec"}
            | {"args_hash": sig, "outcome_hash": "same"}
        )
    return "\n".join(json.dumps(line) for line in lines) + "\n"


@pytest.mark.parametrize("before", range(8))
def test_replay_shows_the_seed_abort_first(tmp_path: Path, before: int) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text(_record(before, 20))
    stops = {}
    for name, config in (("enabled", ENABLED), ("alone", ALONE)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        argv = [sys.executable, "-m", "loopwarden", "replay", str(trace), "--config", str(path)]
        done = subprocess.run(
            [*argv, "--format", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        (run,) = json.loads(done.stdout)["runs"]
        stops[name] = run["stop"]
    assert stops["alone"]["detector"] == "compaction_loop_persisted"
    assert stops["enabled"]["detector"] == "compaction_loop_persisted"
    assert stops["enabled"]["action"] == "abort"
    assert stops["enabled"]["call"] <= stops["alone"]["call"]
