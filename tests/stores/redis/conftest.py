"""Fixtures: real Redis servers, started once per session (a per-test one where a test kills it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stores.redis._servers import Cluster, SentinelSetup, Server, require_redis


@pytest.fixture(scope="session", name="redis_server")
def fixture_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One standalone server without persistence, shared by the session."""
    require_redis()
    server = Server(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session", name="redis_cluster")
def fixture_redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three primaries with a replica each, shared by the session."""
    require_redis()
    cluster = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session", name="redis_sentinel")
def fixture_redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary, a replica and a sentinel, shared by the session."""
    require_redis()
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel")).start()
    yield setup
    setup.stop()


@pytest.fixture(name="prefix")
def fixture_prefix() -> str:
    """A key prefix of this test's own, so tests sharing a server never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}:"


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
