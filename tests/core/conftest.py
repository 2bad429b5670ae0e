"""The store matrix of ``tests/stores`` for the guard's behaviour tests."""

from __future__ import annotations

from tests.stores.conftest import (  # noqa: F401 - fixtures are found by name
    fixture_clock,
    fixture_cluster_url,
    fixture_local_store,
    fixture_memory_store,
    fixture_prefix,
    fixture_redis_cluster,
    fixture_redis_cluster_reopen,
    fixture_redis_cluster_store,
    fixture_redis_reopen,
    fixture_redis_server,
    fixture_redis_store,
    fixture_redis_url,
    fixture_sqlite_path,
    fixture_sqlite_store,
    fixture_store,
    fixture_twice_store,
)
