from __future__ import annotations

import pytest

from tests.integrations._drivers import installed
from tests.integrations._drivers_more import import_crewai
from tests.integrations._shared import Counter, Events

if installed("crewai"):  # CrewAI's own venv: its environment set before anything imports it
    import_crewai()


@pytest.fixture(name="counter")
def fixture_counter() -> Counter:
    return Counter()


@pytest.fixture(name="events")
def fixture_events() -> Events:
    return Events()
