from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(name="lw_logs")
def fixture_lw_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture everything the ``loopwarden`` logger writes, from DEBUG up."""
    caplog.set_level(logging.DEBUG, logger="loopwarden")
    yield caplog


@pytest.fixture(autouse=True)
def _close_leftover_event_loop() -> Iterator[None]:
    """Close an event loop a test left set on this thread (Pydantic AI's and the OpenAI
    Agents SDK's ``run_sync`` do so on purpose). Otherwise it is collected later, inside
    some other test, whose run then fails on the unclosed-loop ResourceWarning."""
    yield
    policy = asyncio.get_event_loop_policy()
    loop = getattr(getattr(policy, "_local", None), "_loop", None)
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()
        policy.set_event_loop(None)
