"""The store contract (``loopwarden.stores.base``), checked on every backend."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from loopwarden.config import LoopDetectionConfig
from loopwarden.engine.state import RunState, Stop
from loopwarden.stores import BaseStore, InProcess, Inspectable, SideRecords, Store
from loopwarden.testing import FakeClock
from tests.stores.conftest import (
    TTL,
    all_stores,
    clocked_stores,
    persistent_stores,
    stores_with,
    thread_safe_stores,
)
from tests.stores.twice import TwiceStore

CONFIG = LoopDetectionConfig(enabled=True, history_size=50)


def bump(state: RunState) -> int:
    state.miss_count += 1
    return state.miss_count


def read(state: RunState) -> int:
    return state.miss_count


@all_stores
class TestTransact:
    def test_new_state_and_result(self, store: Store) -> None:
        """An unknown key starts from a fresh state sized by the config; fn's result comes back."""
        small = LoopDetectionConfig(history_size=3)
        assert store.transact("k", small, lambda st: (len(st.window), st.window.capacity)) == (0, 3)
        assert store.transact("k", small, bump) == 1

    def test_changes_are_kept_and_keys_are_separate(self, store: Store) -> None:
        """Each transaction sees the changes of the ones before it, for its key only."""
        for _ in range(3):
            store.transact("a", CONFIG, bump)
        store.transact("b", CONFIG, bump)
        assert (store.transact("a", CONFIG, read), store.transact("b", CONFIG, read)) == (3, 1)

    def test_failed_function_changes_nothing(self, store: Store) -> None:
        """An exception in fn propagates; persistent stores keep the state as it was."""
        store.transact("k", CONFIG, bump)

        def fail(state: RunState) -> None:
            state.miss_count = 99
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            store.transact("k", CONFIG, fail)
        if not isinstance(store, InProcess):  # live in-process states are the caller's to guard
            assert store.transact("k", CONFIG, read) == 1

    async def test_async(self, store: BaseStore) -> None:
        """``atransact`` applies updates atomically on an event loop; ``aclose`` closes there."""
        results = await asyncio.gather(*(store.atransact("k", CONFIG, bump) for _ in range(20)))
        assert sorted(results) == list(range(1, 21))
        await store.aclose()

    def test_delete(self, store: Store) -> None:
        """A deleted run starts afresh; deleting an unknown key is fine."""
        store.transact("k", CONFIG, bump)
        store.delete("k")
        store.delete("never-there")
        assert store.transact("k", CONFIG, read) == 0

    def test_state_round_trip(self, store: Store) -> None:
        """Everything a run state holds survives the store."""

        def fill(st: RunState) -> None:
            st.window.add("read", "read:a", "c1", "r1", None, 10.0)
            st.window.add("ghost", "ghost:x", "c2", "e", "ghost", 11.0, veto=True)
            st.window.add("read", "read:a", "c3", None, None, 12.0)
            st.should_deliver("generic:read", 10, 10)
            st.add_note("c3", "a note")
            st.mark_blocked("c2")
            st.miss_name, st.miss_count = "ghost", 2
            st.stopped = Stop("read", 30, "global_circuit_breaker", "stopped")
            st.started = True
            st.guard.open()
            st.guard.step("read", "read:a", "r1")

        def dump(st: RunState) -> Any:
            return (
                [r.to_dict() for r in st.window],
                st.buckets,
                st.notes,
                st.blocked,
                (st.miss_name, st.miss_count),
                st.stopped,
                st.started,
                st.guard.dump(),
            )

        store.transact("k", CONFIG, fill)
        expected = RunState.new(CONFIG)
        fill(expected)
        assert store.transact("k", CONFIG, dump) == dump(expected)

    def test_context_manager(self, store: Store) -> None:
        """``with store:`` hands back the store and closes it; closing twice is harmless."""
        with store as entered:  # type: ignore[attr-defined]
            assert entered is store
            live = store.attach("k", CONFIG) if isinstance(store, InProcess) else None
        if live is not None:
            assert live.detached  # an in-process store lets go of its live states
        store.close()


@thread_safe_stores
def test_threads_never_lose_an_update(store: Store) -> None:
    """Concurrent read-modify-write transactions on one run are all counted once."""
    threads = [
        threading.Thread(target=lambda: [store.transact("k", CONFIG, bump) for _ in range(25)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.transact("k", CONFIG, read) == 100


@persistent_stores
def test_runs_outlive_the_store_object(store: Store, reopen: Any) -> None:
    """A committed run is seen by another store object on the same backend."""
    store.transact("k", CONFIG, bump)
    store.close()
    assert reopen().transact("k", CONFIG, read) == 1


@stores_with(Inspectable)
def test_load_keys_check(store: Any) -> None:
    """Stored runs can be listed and read without changing them; the backend checks out."""
    store.transact("b", CONFIG, bump)
    store.transact("a", CONFIG, bump)
    assert store.keys() == ["a", "b"]
    loaded = store.load("a", CONFIG)
    assert loaded is not None and loaded.miss_count == 1
    assert store.load("missing", CONFIG) is None
    store.check()


@stores_with(SideRecords)
def test_side_records(store: Any) -> None:
    """``fn(old)`` returns ``(new, result)``; ``None`` as new deletes; ``delete_value`` forgets."""
    assert store.transact_value("k", lambda old: (b"1", old)) is None
    assert store.transact_value("k", lambda old: (old + b"2", old)) == b"1"
    assert store.transact_value("k", lambda old: (None, old)) == b"12"
    assert store.transact_value("k", lambda old: (old, old)) is None
    store.transact_value("gone", lambda old: (b"x", None))
    store.delete_value("gone")
    assert store.transact_value("gone", lambda old: (old, old)) is None


@clocked_stores
class TestExpiryByTheClock:
    def test_idle_runs_expire(self, store: Any, clock: FakeClock) -> None:
        """Runs idle for longer than the TTL (by the injected clock) expire; busy ones stay."""
        store.transact("idle", CONFIG, bump)
        clock.advance(TTL / 2)
        store.transact("busy", CONFIG, bump)
        clock.advance(TTL / 2 + 1)
        store.expire()
        assert store.keys() == ["busy"]
        assert store.transact("idle", CONFIG, read) == 0

    def test_side_records_expire(self, store: Any, clock: FakeClock) -> None:
        """Side records expire like runs, where a store keeps them."""
        if not isinstance(store, SideRecords):
            return  # nothing to expire: the memory store keeps no side records
        store.transact_value("old", lambda old: (b"x", None))
        clock.advance(TTL + 1)
        store.expire()
        assert store.transact_value("old", lambda old: (old, old)) is None


def test_functions_may_run_twice() -> None:
    """The contract lets a store run fn twice and keep one run's changes (the double does)."""
    store = TwiceStore()
    assert store.transact("k", CONFIG, bump) == 1
    assert store.transact("k", CONFIG, bump) == 2
    assert store.runs == 4
