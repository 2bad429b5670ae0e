"""A looping Pydantic AI agent whose spans and loopwarden's events go to an OTLP endpoint.

No API key and no network beyond the endpoint: the model is Pydantic AI's
``FunctionModel``, scripted to poll a job that never finishes. loopwarden
warns, blocks and finally stops the run; each of those is a span event on
Pydantic AI's ``execute_tool poll_status`` span, and the stop fails that span.

Run it against any OTLP/HTTP receiver (Arize Phoenix, Jaeger, an OpenTelemetry
Collector)::

    pip install 'loopwarden[pydantic-ai,otel]' opentelemetry-sdk \\
        opentelemetry-exporter-otlp-proto-http
    python examples/otel_pydantic_ai.py http://127.0.0.1:6006/v1/traces

This is what made the screenshot in ``docs/observability.md``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

import loopwarden as lw
from loopwarden.integrations.pydantic_ai import LoopGuardCapability
from loopwarden.testing import SMALL_THRESHOLDS

# Small thresholds (warn at 3, block at 5, stop at 7) keep the loop short.
CONFIG = {**SMALL_THRESHOLDS, "loopwarden": {"telemetry": True}}  # the one switch


def main(endpoint: str) -> int:
    provider = TracerProvider(resource=Resource.create({"service.name": "loopwarden-demo"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    ids = itertools.count()

    def stuck(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if next(ids) > 20:  # never reached: the guard stops the run first
            return ModelResponse(parts=[TextPart("giving up")])
        call = ToolCallPart("poll_status", {"job": "42"}, tool_call_id=f"call_{len(messages)}")
        return ModelResponse(parts=[call])

    agent = Agent(
        FunctionModel(stuck),
        name="release-bot",
        capabilities=[
            Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)),
            # The stop ends the run with an exception, as the screenshot shows (the
            # default would end it with the model's last answer instead).
            LoopGuardCapability(CONFIG, on_stop="raise"),
        ],
    )

    @agent.tool_plain
    def poll_status(job: str) -> dict[str, Any]:
        """Status of a background job."""
        return {"job": job, "status": "pending"}

    try:
        asyncio.run(agent.run("Wait until job 42 is done.", conversation_id="conv-42"))
    except lw.CircuitBreakerTripped as stop:
        print(f"stopped: {stop.code}")
    finally:
        provider.shutdown()  # flush the spans to the endpoint
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:4318/v1/traces"))
