"""Replay of run records whose outcome lines are out of place: paired or reported.

Issue 24, item 16. Several processes (or threads of the hook helper) append to
one run record, so an outcome line can land before its call's line; such
outcomes were dropped without a word, and so were the outcomes of calls made
without a call id. A run record is written by a real ``LoopGuard`` and then
replayed by the ``loopwarden replay`` console script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import loopwarden as lw
from tests.adversarial._procs import LOOPWARDEN, run_bounded
from tests.adversarial.conftest import SMALL

pytestmark = pytest.mark.timeout(180)


def live_record(path: Path, *, ids: bool) -> list[str]:
    """A loop the live guard stops (the outcomes matter: it is the no-progress breaker);
    its run record at ``path``; the actions the live guard took."""
    guard = lw.LoopGuard(SMALL, run_record=path)
    run = guard.run("r1", session_id="s1")
    actions: list[str] = []
    try:
        for n in range(12):
            call_id = f"c{n}" if ids else None
            decision = run.before_call("poll", {"job": 7}, call_id=call_id)
            actions.append(decision.action)
            if not decision.blocked:
                run.after_call("poll", {"job": 7}, call_id=call_id, result="pending")
    except lw.LoopAbort as abort:
        actions.append(abort.code)
    guard.close()
    return actions


def replay(path: Path, config: Path) -> dict[str, Any]:
    ran = run_bounded(
        [LOOPWARDEN, "replay", str(path), "--config", str(config), "--format", "json"],
        timeout=120,
    )
    assert ran.code == 0, ran.err
    assert "Traceback" not in ran.err
    result: dict[str, Any] = orjson.loads(ran.stdout)
    return result


@pytest.fixture(name="config")
def fixture_config(tmp_path: Path) -> Path:
    path = tmp_path / "small.json"
    path.write_bytes(orjson.dumps(SMALL))
    return path


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def kind(line: bytes) -> str:
    return str(orjson.loads(line)["type"])


@pytest.mark.parametrize("ids", [True, False], ids=["call-ids", "no-call-ids"])
def test_outcomes_written_before_their_calls_are_paired(
    tmp_path: Path, config: Path, ids: bool
) -> None:
    """A record whose outcome lines all come before the call lines replays as the live run
    went: stopped by the same rule at the same call, with no problem reported."""
    path = tmp_path / "live.jsonl"
    live = live_record(path, ids=ids)
    assert live[-1] == "global_circuit_breaker"
    lines = lines_of(path)
    outcomes = [line for line in lines if kind(line) == "outcome"]
    others = [line for line in lines if kind(line) != "outcome"]
    assert len(outcomes) == 3
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_bytes(b"\n".join([others[0], *outcomes, *others[1:]]) + b"\n")
    for record in (path, swapped):
        result = replay(record, config)
        assert result["problems"] == [], result["problems"]
        [run] = result["runs"]
        assert run["stop"] is not None, f"{record.name}: the replay did not stop the run"
        assert (run["stop"]["detector"], run["stop"]["call"]) == ("global_circuit_breaker", 5)


def test_outcomes_whose_calls_never_come_are_reported(tmp_path: Path, config: Path) -> None:
    """Outcome lines whose call line is missing from the run are each reported as a problem
    at their own ``file:line``; the rest of the run replays."""
    path = tmp_path / "live.jsonl"
    live_record(path, ids=True)
    lines = lines_of(path)
    dropped = [i for i, line in enumerate(lines) if kind(line) == "call"][:2]
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join(kept) + b"\n")
    orphan_lines = [
        n for n, line in enumerate(kept, 1) if kind(line) == "outcome" and b'"c0"' in line
    ] + [n for n, line in enumerate(kept, 1) if kind(line) == "outcome" and b'"c1"' in line]
    result = replay(broken, config)
    where = sorted(problem["where"] for problem in result["problems"])
    assert where == sorted(f"{broken}:{n}" for n in orphan_lines), result["problems"]
    assert all("call" in problem["reason"] for problem in result["problems"])
    assert result["totals"]["problems"] == 2
