"""Many writers on one run: 8 processes x 8 threads, exact counts, no lost or doubled update."""

from __future__ import annotations

import multiprocessing

import pytest

from loopwarden.stores.redis import RedisStore
from tests.stores.redis import _workers
from tests.stores.redis._workers import CONFIG, KEY

SPAWN = multiprocessing.get_context("spawn")
PROCESSES, THREADS, CALLS = 8, 8, 200
# What is tested is exactness under contention, not latency: 64 writers on one run of
# a loaded 2-core CI machine can wait longer than the production read timeout.
PATIENT = "&busy_timeout=60"  # with the fixture's patient read timeout


def run_all(target: object, args: list[tuple[object, ...]]) -> None:
    start = SPAWN.Event()
    procs = [SPAWN.Process(target=target, args=(*a, start)) for a in args]  # type: ignore[arg-type]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0


@pytest.mark.parametrize("own_pools", [False, True], ids=["workers", "hosts"])
def test_every_update_counts_once(redis_url: str, own_pools: bool) -> None:
    """8 processes x 8 threads x 200 updates of one run: the count is exactly 12,800.

    ``workers``: the threads of a process share one store (pool, cache, per-run turn-taking);
    ``hosts``: every thread has its own store, like 64 separate machines.
    """
    run_all(
        _workers.increment,
        [(redis_url + PATIENT, THREADS, CALLS, own_pools) for _ in range(PROCESSES)],
    )
    store = RedisStore(redis_url)
    assert store.transact(KEY, CONFIG, lambda st: st.miss_count) == PROCESSES * THREADS * CALLS
    store.close()


def test_guarded_calls_are_all_recorded_once(redis_url: str) -> None:
    """Guarded calls from 8 processes x 4 threads: each call and its outcome recorded once."""
    threads, calls = 4, 12  # 384 calls fit the 1000-record window, so each can be checked
    run_all(
        _workers.record_calls,
        [(redis_url + PATIENT, w, threads, calls) for w in range(PROCESSES)],
    )
    store = RedisStore(redis_url)
    state = store.load(KEY, CONFIG)
    assert state is not None
    records = list(state.window)
    ids = [r.call_id for r in records]
    assert len(ids) == len(set(ids)) == PROCESSES * threads * calls
    assert all(r.result_hash is not None for r in records)  # every outcome reached its call
    store.close()
