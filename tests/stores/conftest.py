"""Every store backend as one test matrix (the shape of limits' ``ALL_STORAGES``).

``@all_stores`` runs a test (or every test of a class) once per backend; the
test asks for the ``store`` fixture and gets a fresh store of that kind, with
``TTL`` seconds of expiry (on the ``clock`` fixture where the backend takes a
clock). Subsets are derived from the capabilities a backend declares
(``stores_with(SideRecords)``) or picked by name. A new backend is one more
entry below plus a ``<name>_store`` fixture.

The Redis servers are real ones, started once per session (``redis_server``,
``redis_cluster``); without ``redis-server`` installed those entries skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwarden.stores import LocalStore, MemoryStore, Store
from loopwarden.stores.redis import RedisStore
from loopwarden.stores.sqlite import SQLiteStore
from loopwarden.testing import FakeClock
from tests.stores.redis._servers import Cluster, SentinelSetup, Server, require_redis
from tests.stores.twice import TwiceStore

TTL = 3600.0

ALL_STORES = {
    "memory": pytest.param("memory", MemoryStore, id="memory"),
    "sqlite": pytest.param("sqlite", SQLiteStore, id="sqlite"),
    "local": pytest.param("local", LocalStore, id="local"),
    # Runs every transaction twice, as an optimistic backend (Redis) may.
    "twice": pytest.param("twice", TwiceStore, id="twice"),
    "redis": pytest.param("redis", RedisStore, id="redis"),
    "redis_cluster": pytest.param("redis_cluster", RedisStore, id="redis-cluster"),
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


# Stores that several threads may share (LocalStore is for one thread); stores
# whose runs outlive the store object (another one sees them); stores that
# expire runs by the injected clock (Redis expires them by the server's).
thread_safe_stores = stores("memory", "sqlite", "twice", "redis", "redis_cluster")
persistent_stores = stores("sqlite", "redis", "redis_cluster")
clocked_stores = stores("memory", "sqlite")


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


def _serve(setup: Callable[[Path], Any], tmp: pytest.TempPathFactory, name: str) -> Iterator[Any]:
    require_redis()
    servers = setup(tmp.mktemp(name)).start()
    yield servers
    servers.stop()


@pytest.fixture(scope="session", name="redis_server")
def fixture_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One standalone server without persistence, shared by the session."""
    yield from _serve(Server, tmp_path_factory, "redis")


@pytest.fixture(scope="session", name="redis_cluster")
def fixture_redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three primaries with a replica each, shared by the session."""
    yield from _serve(Cluster, tmp_path_factory, "cluster")


@pytest.fixture(scope="session", name="redis_sentinel")
def fixture_redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary, a replica and a sentinel, shared by the session."""
    yield from _serve(SentinelSetup, tmp_path_factory, "sentinel")


@pytest.fixture(name="prefix")
def fixture_prefix() -> str:
    """A key prefix of this test's own, so tests sharing a server never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}:"


# The contract and behaviour tests check what is stored, not how fast: on a loaded CI
# machine a reply can take longer than the production read timeout (0.25 s), most of all
# on the Cluster (two round trips per step). The fault tests set their own timeouts.
SEMANTICS = "timeout=2"


@pytest.fixture(name="redis_url")
def fixture_redis_url(redis_server: Server, prefix: str) -> str:
    return f"{redis_server.url}?prefix={prefix}&{SEMANTICS}"


@pytest.fixture(name="cluster_url")
def fixture_cluster_url(redis_cluster: Cluster, prefix: str) -> str:
    return f"{redis_cluster.url}?prefix={prefix}&{SEMANTICS}"


def _reopener(url: str) -> Iterator[Any]:
    pytest.importorskip("redis", reason="the redis extra is not installed")
    opened: list[RedisStore] = []

    def reopen() -> RedisStore:
        opened.append(RedisStore(url, ttl_seconds=TTL))
        return opened[-1]

    yield reopen
    for store in opened:
        store.close()


@pytest.fixture(name="redis_reopen")
def fixture_redis_reopen(redis_url: str) -> Iterator[Any]:
    yield from _reopener(redis_url)


@pytest.fixture(name="redis_cluster_reopen")
def fixture_redis_cluster_reopen(cluster_url: str) -> Iterator[Any]:
    yield from _reopener(cluster_url)


@pytest.fixture(name="redis_store")
def fixture_redis_store(redis_reopen: Any) -> RedisStore:
    return redis_reopen()


@pytest.fixture(name="redis_cluster_store")
def fixture_redis_cluster_store(redis_cluster_reopen: Any) -> RedisStore:
    return redis_cluster_reopen()
