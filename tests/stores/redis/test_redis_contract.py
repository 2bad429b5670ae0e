"""The store contract on Redis and on Redis Cluster: atomicity, delete, TTL, side records, state.

Mirrors what the shared contract suite checks for every backend; when that suite's
``ALL_STORES`` matrix exists, ``redis`` and ``redis-cluster`` join it there.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading

import pytest

import loopwarden as lw
from loopwarden.engine.state import RunState
from loopwarden.stores import Inspectable, SideRecords, Store, store_from_url
from loopwarden.stores.redis import RedisStore
from tests._wait import wait_until
from tests.stores.conftest import SEMANTICS
from tests.stores.redis import _workers
from tests.stores.redis._workers import CONFIG, KEY, bump

# Without the redis extra (the no-extras CI suite) these tests skip, with the reason.
redis = pytest.importorskip("redis", reason="the redis extra is not installed")

SPAWN = multiprocessing.get_context("spawn")
LOOP = {"tools": {"loopDetection": {"enabled": True}}}


@pytest.fixture(name="url", params=["redis", "redis-cluster"])
def fixture_url(request: pytest.FixtureRequest, prefix: str) -> str:
    """A store URL for each Redis topology (servers shared by the session), with the answer
    timeout of the contract tests (``SEMANTICS``: they check what is stored, not outages)."""
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        return f"{server.url}?prefix={prefix}&{SEMANTICS}"
    cluster = request.getfixturevalue("redis_cluster")
    return f"{cluster.url}?prefix={prefix}&{SEMANTICS}"


def raw_client(store: RedisStore) -> redis.Redis:
    """A plain client on the store's server (cluster-aware), for looking at what is stored."""
    return store._sync_client()  # type: ignore[no-any-return]


def test_capabilities(url: str) -> None:
    """The Redis store declares the contract and the side-record and inspection capabilities."""
    store = store_from_url(url)
    assert isinstance(store, Store) and isinstance(store, SideRecords)
    assert isinstance(store, Inspectable)
    assert not isinstance(store, lw.stores.InProcess)
    store.close()


def test_state_survives_the_store_object(url: str) -> None:
    """A run's state outlives the store that wrote it; delete forgets it."""
    first = RedisStore(url)
    assert first.transact(KEY, CONFIG, bump) == 1
    first.close()
    second = RedisStore(url)
    assert second.transact(KEY, CONFIG, bump) == 2
    assert second.keys() == [KEY]
    second.delete(KEY)
    assert second.keys() == []
    assert second.transact(KEY, CONFIG, bump) == 1
    second.close()


def test_exception_in_fn_writes_nothing(url: str) -> None:
    """An exception raised by the update function leaves the stored state as it was."""
    store = RedisStore(url)
    store.transact(KEY, CONFIG, bump)

    def boom(state: RunState) -> None:
        state.miss_count = 99
        raise KeyError("inside fn")

    with pytest.raises(KeyError, match="inside fn"):
        store.transact(KEY, CONFIG, boom)
    assert store.transact(KEY, CONFIG, lambda st: st.miss_count) == 1
    other = RedisStore(url)
    assert other.transact(KEY, CONFIG, lambda st: st.miss_count) == 1
    store.close()
    other.close()


def test_writes_of_another_host_are_seen(url: str) -> None:
    """A store whose cached copy is stale reruns the update on the stored state."""
    a, b = RedisStore(url), RedisStore(url)
    calls: list[int] = []

    def counted(state: RunState) -> int:
        calls.append(state.miss_count)
        return bump(state)

    assert a.transact(KEY, CONFIG, counted) == 1
    assert b.transact(KEY, CONFIG, counted) == 2  # b had no copy: fresh attempt, then the real
    assert a.transact(KEY, CONFIG, counted) == 3  # a's copy is stale: rerun on b's write
    assert a.transact(KEY, CONFIG, counted) == 4  # a wrote last: one attempt
    assert calls == [0, 0, 1, 1, 2, 3]
    a.close()
    b.close()


def test_threads_share_one_store(url: str) -> None:
    """Threads of one process updating one run never lose an update."""
    store = RedisStore(url)
    threads = [
        threading.Thread(target=lambda: [store.transact(KEY, CONFIG, bump) for _ in range(40)])
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.transact(KEY, CONFIG, lambda st: st.miss_count) == 240
    store.close()


def test_processes_share_a_run(url: str) -> None:
    """Processes with their own connections never lose or double-count an update."""
    start = SPAWN.Event()
    procs = [
        SPAWN.Process(target=_workers.increment, args=(url, 2, 40, True, start)) for _ in range(3)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = RedisStore(url)
    assert store.transact(KEY, CONFIG, lambda st: st.miss_count) == 240
    store.close()


async def test_async(url: str) -> None:
    """Concurrent asyncio updates of one run are applied exactly once each."""
    store = RedisStore(url)
    results = await asyncio.gather(*(store.atransact(KEY, CONFIG, bump) for _ in range(20)))
    assert sorted(results) == list(range(1, 21))
    assert store.transact(KEY, CONFIG, lambda st: st.miss_count) == 20
    await store.aclose()


def test_ttl_is_redis_expiry(url: str) -> None:
    """Each write sets the run's Redis TTL; Redis itself forgets an idle run."""
    store = RedisStore(url, ttl_seconds=3600)
    store.transact(KEY, CONFIG, bump)
    client = raw_client(store)
    ttl = client.pttl(store.run_key(KEY))
    assert 3_590_000 < ttl <= 3_600_000
    short = RedisStore(url, ttl_seconds=0.2)
    short.transact("short-lived", CONFIG, bump)
    wait_until(lambda: short.load("short-lived", CONFIG) is None, what="Redis to expire the run")
    assert short.keys() == [KEY]
    store.expire()  # nothing to do: must not fail
    store.close()
    short.close()


def test_url_ttl_wins_over_the_config(url: str) -> None:
    """A ttl in the URL beats loopwarden.stateTtlSeconds; without one the config's applies."""
    assert RedisStore.from_url(url + "&ttl=60", ttl_seconds=5).ttl_seconds == 60
    assert RedisStore.from_url(url, ttl_seconds=5).ttl_seconds == 5
    assert RedisStore(url + "&ttl=60", ttl_seconds=7).ttl_seconds == 7


def test_side_records(url: str) -> None:
    """Side records update atomically, return the old value, delete with None, and expire."""
    store = RedisStore(url, ttl_seconds=100)
    assert store.transact_value("k", lambda old: (b"1", old)) is None
    assert store.transact_value("k", lambda old: (old + b"2" if old else b"", old)) == b"1"
    assert 0 < raw_client(store).pttl(store.value_key("k")) <= 100_000
    other = RedisStore(url)
    assert other.transact_value("k", lambda old: (b"3", old)) == b"12"
    assert store.transact_value("k", lambda old: (None, old)) == b"3"
    assert store.transact_value("k", lambda old: (old, old)) is None
    store.transact_value("k", lambda old: (b"4", old))
    store.delete_value("k")
    assert other.transact_value("k", lambda old: (old, old)) is None
    assert store.keys() == []  # side records are not runs
    store.close()
    other.close()


def test_state_round_trip(url: str) -> None:
    """What the guard stored reads back the same through another store object."""
    guard = lw.LoopGuard(LOOP, store=url)
    run = guard.run("r1", session_id="s1", agent_id="a1")
    for i in range(12):
        run.before_call("poll", {"job": i % 3}, call_id=f"c{i}")
        run.after_call("poll", {"job": i % 3}, call_id=f"c{i}", result="pending")
    run.on_compaction()
    expected = run.snapshot()
    other = RedisStore(url)
    loaded = other.load(run.key, run.config)
    assert loaded is not None
    assert [r.to_dict() for r in loaded.window] == expected["records"]
    assert loaded.guard.armed == expected["post_compaction_armed"]
    assert RunState.from_bytes(loaded.to_bytes(), run.config).to_bytes() == loaded.to_bytes()
    run.end()
    assert other.load(run.key, run.config) is None
    guard.close()
    other.close()


def test_escalation_matches_the_memory_store(url: str) -> None:
    """Warn, block and stop happen at the same calls as with the memory store."""

    def actions(store: str) -> list[str]:
        guard = lw.LoopGuard(LOOP, store=store)
        run = guard.run("r", session_id="s")
        seen = []
        for i in range(32):
            try:
                decision = run.before_call("poll", {"job": 1}, call_id=str(i))
            except lw.CircuitBreakerTripped:
                seen.append("stop")
                continue
            note = run.after_call("poll", {"job": 1}, call_id=str(i), result="pending")
            seen.append(decision.action + ("+note" if note else ""))
        guard.close()
        return seen

    on_redis = actions(url)
    assert on_redis == actions("memory://")
    assert on_redis[10] == "warn+note" and on_redis[20] == "block" and on_redis[30] == "stop"


async def test_async_guard(url: str) -> None:
    """The guard's async methods use the asyncio client and agree with the sync ones."""
    store = RedisStore(url)
    guard = lw.LoopGuard(LOOP, store=store)
    run = guard.run("ar", session_id="s")
    seen = []
    for i in range(12):
        decision = await run.abefore_call("poll", {"job": 1}, call_id=str(i))
        note = await run.aafter_call("poll", {"job": 1}, call_id=str(i), result="pending")
        seen.append(decision.action + ("+note" if note else ""))
    assert seen[10] == "warn+note" and seen.count("allow") == 11
    assert len(run.snapshot()["records"]) == 12
    await store.aclose()
