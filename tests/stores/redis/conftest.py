"""Fixtures: real Redis servers (the shared ones are in ``tests/stores/conftest.py``).

A test that kills or reconfigures a server gets one of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stores.redis._servers import Cluster, SentinelSetup, Server, require_redis


@pytest.fixture(scope="session", name="redis_sentinel")
def fixture_redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary, a replica and a sentinel, shared by the session."""
    require_redis()
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel")).start()
    yield setup
    setup.stop()


@pytest.fixture(name="redis_url")
def fixture_redis_url(redis_server: Server, prefix: str) -> str:
    return f"{redis_server.url}?prefix={prefix}"


@pytest.fixture(name="cluster_url")
def fixture_cluster_url(redis_cluster: Cluster, prefix: str) -> str:
    return f"{redis_cluster.url}?prefix={prefix}"


@pytest.fixture(name="own_server")
def fixture_own_server(tmp_path: Path) -> Iterator[Server]:
    """A server of this test alone (not started), for tests that kill or reconfigure it."""
    require_redis()
    server = Server(tmp_path / "own")
    yield server
    server.stop()
