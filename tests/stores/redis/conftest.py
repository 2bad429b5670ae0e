"""Fixtures of the Redis tests; the shared servers are in ``tests/stores/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stores.redis._servers import Server, require_redis


@pytest.fixture(name="own_server")
def fixture_own_server(tmp_path: Path) -> Iterator[Server]:
    """A server of this test alone (not started), for tests that kill or reconfigure it."""
    require_redis()
    server = Server(tmp_path / "own")
    yield server
    server.stop()
