"""Child-process bodies for the Redis store tests (spawned children import this module)."""

from __future__ import annotations

import threading
from typing import Any

from loopwarden.config import LoopDetectionConfig
from loopwarden.engine.state import RunState
from loopwarden.guard import LoopGuard
from loopwarden.stores.redis import RedisStore

CONFIG = LoopDetectionConfig(enabled=True, history_size=1000)
KEY = "agent\x1fsession\x1frun"


def bump(state: RunState) -> int:
    state.miss_count += 1
    return state.miss_count


def increment(url: str, threads: int, n: int, own_pools: bool, start: Any) -> None:
    """``threads`` threads doing ``n`` increments each on one run.

    ``own_pools``: every thread has its own store (its own connections and cache),
    like separate hosts; otherwise the threads share one store, like one worker.
    """
    shared = RedisStore(url, busy_timeout=120)

    def body() -> None:
        store = RedisStore(url, busy_timeout=120) if own_pools else shared
        for _ in range(n):
            store.transact(KEY, CONFIG, bump)
        if own_pools:
            store.close()

    workers = [threading.Thread(target=body) for _ in range(threads)]
    start.wait()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    shared.close()


def record_calls(url: str, worker: int, threads: int, n: int, start: Any) -> None:
    """``threads`` threads making ``n`` guarded calls each (check, run, record outcome)."""
    guard = LoopGuard(
        {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
        store=RedisStore(url, busy_timeout=120),
    )

    def body(thread: int) -> None:
        run = guard.run("run", session_id="session", agent_id="agent")
        for i in range(n):
            call_id = f"w{worker}-{thread}-{i}"
            params = {"worker": worker, "thread": thread, "i": i}
            run.before_call("fetch", params, call_id=call_id)
            run.after_call("fetch", params, call_id=call_id, result={"ok": i})

    workers = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    start.wait()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    guard.close()
