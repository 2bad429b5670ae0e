"""The Python API under hostile use: nothing raises into the agent, memory stays bounded.

Issue 11, defects 8 and 16. Memory is measured with ``tracemalloc``: what the
guard still holds after the caller has dropped every reference of its own.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import loopwarden as lw

MiB = 1024 * 1024


def record_guard(tmp_path: Path, **settings: Any) -> lw.LoopGuard:
    config = {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwarden": {"runRecord": str(tmp_path / "record.jsonl"), **settings},
    }
    return lw.LoopGuard(config)


SURROGATE_VALUES = {
    "set": lambda: {"s": {"\ud800"}},
    "frozenset": lambda: [frozenset({"a\udfff"})],
    "set-in-tuple-key": lambda: {("k", "\udc80"): {"\ud83d"}},
}


@pytest.mark.parametrize("kind", sorted(SURROGATE_VALUES))
def test_log_params_with_lone_surrogates_never_raises(tmp_path: Path, kind: str) -> None:
    """With ``logParams`` on, params and results holding lone surrogates inside sets are
    recorded (or skipped) without an exception reaching the agent."""
    guard = record_guard(tmp_path, logParams=True)
    run = guard.run("surrogates")
    value = SURROGATE_VALUES[kind]()
    try:
        decision = run.before_call("tool", value, call_id="c1")
        note = run.after_call("tool", value, call_id="c1", result=value)
    finally:
        guard.close()
    assert decision.allowed and note is None
    lines = [orjson.loads(line) for line in (tmp_path / "record.jsonl").read_bytes().splitlines()]
    assert [line["type"] for line in lines] == ["run_start", "call", "outcome"]


def test_log_params_with_lone_surrogates_in_lists_is_recorded(tmp_path: Path) -> None:
    """Lone surrogates outside sets are already handled: the call is allowed, nothing raises."""
    guard = record_guard(tmp_path, logParams=True)
    run = guard.run("surrogates")
    assert run.before_call("tool", ["\ud800"], call_id="c1").allowed
    assert run.after_call("tool", ["\ud800"], call_id="c1", result="\udfff") is None
    guard.close()
    lines = [orjson.loads(line) for line in (tmp_path / "record.jsonl").read_bytes().splitlines()]
    assert [line["type"] for line in lines] == ["run_start", "call", "outcome"]
    assert all(line.get("params", line.get("result", 1)) is not None for line in lines[1:])


# -- defect 16: memory ---------------------------------------------------------------------------
def retained(step: Callable[[int], None], rounds: int, warmup: int = 0) -> int:
    """Bytes still allocated after ``step(i)`` ran for ``rounds`` rounds (after ``warmup``)."""
    for i in range(warmup):
        step(i)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(warmup, warmup + rounds):
            step(i)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_per_agent_config_cache_is_bounded() -> None:
    """Runs of 20,000 different agent ids leave a bounded amount of memory behind."""
    config = lw.load_config(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {"list": [{"id": "ops", "tools": {"loopDetection": {"historySize": 5}}}]},
        }
    )
    guard = lw.LoopGuard(config)

    def step(i: int) -> None:
        guard.run(f"run-{i}", agent_id=f"agent-{i}")

    grown = retained(step, 20_000, warmup=2_000)
    assert grown < 2 * MiB, f"{grown / MiB:.1f} MiB kept for 20,000 agent ids"


@pytest.mark.parametrize("with_ids", [True, False], ids=["call-ids", "no-call-ids"])
def test_blocked_calls_do_not_keep_their_arguments(with_ids: bool) -> None:
    """The README loop never reports blocked calls back; the guard must not keep their
    (large) arguments: 150 blocked calls with 256 KiB of arguments each."""
    guard = lw.LoopGuard(
        {
            "tools": {
                "loopDetection": {
                    "enabled": True,
                    "warningThreshold": 2,
                    "criticalThreshold": 3,
                    "globalCircuitBreakerThreshold": 400,
                }
            },
            # Many blocks without a stop: the guard's own early stop is not what is measured.
            "loopwarden": {"consecutiveRepeat": False},
        }
    )
    run = guard.run("big-args")
    blocked = []

    def step(i: int) -> None:
        args = {"document": "x" * (256 * 1024)}  # a fresh object every call, same content
        call_id = f"c{i}" if with_ids else None
        decision = run.before_call("summarise", args, call_id=call_id)
        blocked.append(decision.blocked)
        if not decision.blocked:
            run.after_call("summarise", args, call_id=call_id, result="too long")

    grown = retained(step, 150, warmup=5)
    assert all(blocked[5:])
    assert grown < 8 * MiB, f"{grown / MiB:.0f} MiB kept after 150 blocked calls"


def test_completed_calls_do_not_keep_their_arguments() -> None:
    """Calls reported back with ``after_call`` leave nothing of their arguments behind."""
    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    run = guard.run("progress")

    def step(i: int) -> None:
        args = {"page": i, "document": "y" * (256 * 1024)}
        run.before_call("read", args, call_id=f"c{i}")
        run.after_call("read", args, call_id=f"c{i}", result=f"page {i}")

    grown = retained(step, 150, warmup=5)
    assert grown < 8 * MiB, f"{grown / MiB:.0f} MiB kept after 150 completed calls"
