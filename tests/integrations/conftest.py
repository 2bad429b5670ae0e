from __future__ import annotations

import pytest

from tests.integrations._shared import Counter, Events


@pytest.fixture(name="counter")
def fixture_counter() -> Counter:
    return Counter()


@pytest.fixture(name="events")
def fixture_events() -> Events:
    return Events()
