from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(name="spans")
def fixture_spans() -> Iterator[Any]:
    """The global SDK tracer provider's finished spans, recorded for this test only."""
    pytest.importorskip("opentelemetry.sdk")
    from tests.telemetry._otel import global_spans

    yield from global_spans()
