"""Child-process bodies for the SQLite store tests (kept light: spawned children import this)."""

from __future__ import annotations

import time
from typing import Any

from loopwarden.config import LoopDetectionConfig
from loopwarden.engine.state import RunState
from loopwarden.guard import LoopGuard
from loopwarden.stores.sqlite import SQLiteStore

CONFIG = LoopDetectionConfig(enabled=True, history_size=1000)
KEY = "agent\x1fsession\x1frun"


def _bump(state: RunState) -> int:
    state.miss_count += 1
    return state.miss_count


def add_call(state: RunState) -> int:
    """Record one call with its outcome in the window; the window's length."""
    n = state.window.next_seq
    state.window.add("fetch", f"fetch:{n}", f"c{n}", f"r{n}", None, float(n))
    return len(state.window)


def increment(path: str, n: int, start: Any) -> None:
    """``n`` read-modify-write transactions on one run."""
    store = SQLiteStore(path, busy_timeout=30)
    start.wait()
    for _ in range(n):
        store.transact(KEY, CONFIG, _bump)
    store.close()


def record_calls(path: str, worker: int, n: int, start: Any) -> None:
    """``n`` guarded calls (check, record call, record outcome) on the shared run."""
    guard = LoopGuard(
        {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
        store=SQLiteStore(path, busy_timeout=30),
    )
    run = guard.run("run", session_id="session")
    start.wait()
    for i in range(n):
        call_id = f"w{worker}-{i}"
        params = {"worker": worker, "i": i}
        run.before_call("fetch", params, call_id=call_id)
        run.after_call("fetch", params, call_id=call_id, result={"ok": i})
    guard.close()


def record_forever(path: str, committed: Any) -> None:
    """Guarded calls on one run as fast as possible, publishing how many were recorded."""
    guard = LoopGuard(
        {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
        store=SQLiteStore(path),
    )
    run = guard.run("run", session_id="session")
    i = 0
    while True:
        params = {"i": i}
        run.before_call("fetch", params, call_id=f"c{i}")
        run.after_call("fetch", params, call_id=f"c{i}", result={"ok": i})
        i += 1
        committed.value = i


def hold_transaction(path: str, ready: Any) -> None:
    """Change the state, then stall inside the transaction until killed."""
    store = SQLiteStore(path)

    def stall(state: RunState) -> None:
        state.miss_count += 1000
        ready.set()
        time.sleep(120)

    store.transact(KEY, CONFIG, stall)


def commit_forever(path: str, committed: Any) -> None:
    """Commit increments as fast as possible, publishing each committed value."""
    store = SQLiteStore(path)
    while True:
        committed.value = store.transact(KEY, CONFIG, _bump)
