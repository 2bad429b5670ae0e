from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(name="lw_logs")
def fixture_lw_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture everything the ``loopwarden`` logger writes, from DEBUG up."""
    caplog.set_level(logging.DEBUG, logger="loopwarden")
    yield caplog
