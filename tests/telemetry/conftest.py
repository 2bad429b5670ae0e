from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from tests.telemetry._otel import global_spans  # noqa: E402


@pytest.fixture(name="spans")
def fixture_spans() -> Iterator[InMemorySpanExporter]:
    yield from global_spans()
