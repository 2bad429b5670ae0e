"""Every store backend as one test matrix (the shape of limits' ``ALL_STORAGES``).

``@all_stores`` runs a test (or every test of a class) once per backend; the
test asks for the ``store`` fixture and gets a fresh store of that kind, with
``TTL`` seconds of expiry on the ``clock`` fixture. Subsets are derived from
the capabilities a backend declares (``stores_with(SideRecords)``) or picked
by name. A new backend is one more entry below plus a ``<name>_store`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwarden.stores import LocalStore, MemoryStore, Store
from loopwarden.stores.sqlite import SQLiteStore
from loopwarden.testing import FakeClock
from tests.stores.twice import TwiceStore

TTL = 3600.0

ALL_STORES = {
    "memory": pytest.param("memory", MemoryStore, id="memory"),
    "sqlite": pytest.param("sqlite", SQLiteStore, id="sqlite"),
    "local": pytest.param("local", LocalStore, id="local"),
    # Runs every transaction twice, as an optimistic backend (Redis) may.
    "twice": pytest.param("twice", TwiceStore, id="twice"),
}
_ARGS = ("store_kind", "store_type")
all_stores = pytest.mark.parametrize(_ARGS, ALL_STORES.values())


def stores_with(capability: type[Any]) -> pytest.MarkDecorator:
    """The backends that declare ``capability`` (``SideRecords``, ``Inspectable``...)."""
    params = [p for p in ALL_STORES.values() if issubclass(p.values[1], capability)]
    return pytest.mark.parametrize(_ARGS, params)


def stores(*names: str) -> pytest.MarkDecorator:
    """The named backends."""
    return pytest.mark.parametrize(_ARGS, [ALL_STORES[name] for name in names])


# Stores that several threads may share (LocalStore is for one thread), and
# stores whose runs outlive the store object (another one sees them).
thread_safe_stores = stores("memory", "sqlite", "twice")
persistent_stores = stores("sqlite")


@pytest.fixture(name="clock")
def fixture_clock() -> FakeClock:
    """The clock the stores (and guards built on them in tests) read."""
    return FakeClock()


@pytest.fixture(name="store")
def fixture_store(store_kind: str, store_type: type[Any], request: pytest.FixtureRequest) -> Store:
    """A fresh store of the parametrized kind, closed after the test."""
    store: Store = request.getfixturevalue(f"{store_kind}_store")
    assert isinstance(store, store_type)
    return store


@pytest.fixture(name="reopen")
def fixture_reopen(store_kind: str, request: pytest.FixtureRequest) -> Any:
    """Another store object on the same backend (the same file for SQLite)."""
    return request.getfixturevalue(f"{store_kind}_reopen")


@pytest.fixture(name="memory_store")
def fixture_memory_store(clock: FakeClock) -> Iterator[MemoryStore]:
    with MemoryStore(ttl_seconds=TTL, clock=clock) as store:
        yield store


@pytest.fixture(name="sqlite_path")
def fixture_sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "lw.db"


@pytest.fixture(name="sqlite_store")
def fixture_sqlite_store(sqlite_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    with SQLiteStore(sqlite_path, ttl_seconds=TTL, clock=clock) as store:
        yield store


@pytest.fixture(name="sqlite_reopen")
def fixture_sqlite_reopen(sqlite_path: Path, clock: FakeClock) -> Iterator[Any]:
    opened: list[SQLiteStore] = []

    def reopen() -> SQLiteStore:
        opened.append(SQLiteStore(sqlite_path, ttl_seconds=TTL, clock=clock))
        return opened[-1]

    yield reopen
    for store in opened:
        store.close()


@pytest.fixture(name="local_store")
def fixture_local_store() -> Iterator[LocalStore]:
    with LocalStore() as store:
        yield store


@pytest.fixture(name="twice_store")
def fixture_twice_store() -> Iterator[TwiceStore]:
    with TwiceStore() as store:
        yield store
