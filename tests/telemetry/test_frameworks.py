"""Guard events land on each framework's own tool span, driven through the real frameworks.

Every integration is given ``{"loopwarden": {"telemetry": true}}`` in its
config and nothing else: the switch reaches the guard through the public
integration classes, and metrics go to the global meter provider.

* Pydantic AI: its ``Instrumentation`` capability opens ``execute_tool <name>``
  and runs the other capabilities inside it.
* Google ADK: built-in OpenTelemetry tracing, plugin callbacks run inside its
  ``execute_tool <name>`` span (global tracer provider).
* OpenAI Agents: its own tracing model; events become ``loopwarden.<action>``
  custom spans under the tool's ``function`` span, seen by a trace processor.
* LangChain: no spans of its own; with OpenInference's instrumentation the
  events land on the span of the current LangChain run, the ``tools`` node
  that encloses the call (the tool span itself opens only when the tool runs).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

import loopwarden as lw
from tests.telemetry._otel import SMALL, global_metrics, sums

ACTIONS = ["loopwarden.warn", "loopwarden.block", "loopwarden.block", "loopwarden.stop"]
CONFIG = {**SMALL, "loopwarden": {"telemetry": True}}


@pytest.fixture(name="counted")
def fixture_counted() -> Iterator[Any]:
    """After the test: the metrics it added for agent `poller` equal the loop's decisions."""
    reader = global_metrics()
    before = sums(reader)
    yield
    added = sums(reader)
    added.subtract(before)

    def value(metric: str, **where: str) -> int:
        want = {("gen_ai.agent.name", "poller"), ("gen_ai.tool.name", "poll_status")}
        want |= {(k.replace("__", "."), v) for k, v in where.items()}
        return sum(n for (name, attrs), n in added.items() if name == metric and want <= attrs)

    calls = "loopwarden.tool_calls"
    assert [value(calls, loopwarden__action=a) for a in ("allow", "warn", "block")] == [4, 1, 3]
    assert value("loopwarden.detections") == 4
    assert value("loopwarden.detections", loopwarden__action="block") == 2
    assert value("loopwarden.runs.stopped", loopwarden__code="global_circuit_breaker") == 1
    assert value("loopwarden.guard.duration") == 8  # one sample per call, blocked ones too


@pytest.fixture(name="provider")
def fixture_provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def annotated(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str]]:
    """(span name, event name) of every loopwarden span event, in order."""
    return [(s.name, e.name) for s in spans for e in s.events if e.name.startswith("loopwarden.")]


def event_attrs(span: ReadableSpan, name: str) -> dict[str, Any]:
    return next(dict(e.attributes or {}) for e in span.events if e.name == name)


def check_stop(span: ReadableSpan) -> None:
    """A stop leaves the tool span in error with our code (the framework may reword the status)."""
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["loopwarden.code"] == "global_circuit_breaker"


@pytest.mark.usefixtures("counted")
def test_pydantic_ai_tool_span(provider: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """Pydantic AI's own `execute_tool` spans get the events, with its call ids."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from loopwarden.integrations.pydantic_ai import LoopGuardCapability

    tracer_provider, exporter = provider
    ids = itertools.count()

    def stuck(messages: Any, info: AgentInfo) -> ModelResponse:
        call = ToolCallPart("poll_status", {"job": "42"}, tool_call_id=f"c{next(ids)}")
        return ModelResponse(parts=[call])

    agent = Agent(
        FunctionModel(stuck),
        name="poller",
        capabilities=[
            Instrumentation(settings=InstrumentationSettings(tracer_provider=tracer_provider)),
            LoopGuardCapability(CONFIG, on_stop="raise"),
        ],
    )

    @agent.tool_plain
    def poll_status(job: str) -> str:
        return "pending"

    with pytest.raises(lw.CircuitBreakerTripped):
        asyncio.run(agent.run("Is job 42 done?", conversation_id="conv-1"))

    spans = exporter.get_finished_spans()
    assert annotated(spans) == [("execute_tool poll_status", a) for a in ACTIONS]
    tools = {(s.attributes or {}).get("gen_ai.tool.call.id"): s for s in spans}
    warn = event_attrs(tools["c3"], "loopwarden.warn")
    assert warn == {
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "c3",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.agent.name": "poller",
        "loopwarden.detector": "generic_repeat",
        "loopwarden.level": "warning",
        "loopwarden.count": 3,
        "loopwarden.warning_key": warn["loopwarden.warning_key"],
        "loopwarden.run_id": warn["loopwarden.run_id"],
    }
    assert event_attrs(tools["c5"], "loopwarden.block")["loopwarden.count"] == 5
    check_stop(tools["c7"])
    assert event_attrs(tools["c7"], "loopwarden.stop")["loopwarden.code"] == (
        "global_circuit_breaker"
    )


@pytest.mark.usefixtures("counted")
def test_google_adk_tool_span(spans: InMemorySpanExporter) -> None:
    """ADK's built-in `execute_tool` spans (global provider) get the events."""
    pytest.importorskip("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm, LlmRequest, LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from loopwarden.integrations.google_adk import LoopGuardPlugin

    class Looping(BaseLlm):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> Any:
            n = sum(1 for c in llm_request.contents for p in c.parts or () if p.function_response)
            call = types.FunctionCall(name="poll_status", args={"job": "42"}, id=f"c{n}")
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)])
            )

    def poll_status(job: str) -> dict[str, str]:
        """Status of a background job."""
        return {"status": "pending"}

    plugin = LoopGuardPlugin(CONFIG, on_stop="raise")
    agent = LlmAgent(name="poller", model=Looping(model="scripted"), tools=[poll_status])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))

    async def run() -> str:
        session = await runner.session_service.create_session(app_name="app", user_id="me")
        with pytest.raises(RuntimeError) as caught:  # ADK wraps plugin errors
            async for _ in runner.run_async(
                user_id="me",
                session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text="hi")]),
            ):
                pass
        assert isinstance(lw.LoopAbort.find(caught.value), lw.CircuitBreakerTripped)
        return session.id

    session_id = asyncio.run(run())
    finished = spans.get_finished_spans()
    assert annotated(finished) == [("execute_tool poll_status", a) for a in ACTIONS]
    tool_spans = [s for s in finished if s.name == "execute_tool poll_status"]
    warn_span = next(s for s in tool_spans if s.events and s.events[0].name == "loopwarden.warn")
    assert (warn_span.attributes or {})["gen_ai.tool.call.id"] == "c3"
    warn = event_attrs(warn_span, "loopwarden.warn")
    assert (warn["gen_ai.tool.call.id"], warn["gen_ai.conversation.id"]) == ("c3", session_id)
    assert warn["gen_ai.agent.name"] == "poller"
    check_stop(next(s for s in tool_spans if any(e.name == "loopwarden.stop" for e in s.events)))


@pytest.mark.usefixtures("counted")
def test_openai_agents_function_span() -> None:
    """OpenAI Agents: `loopwarden.*` custom spans under the tool's `function` span."""
    pytest.importorskip("agents")
    from agents import (
        Agent,
        Runner,
        function_tool,
        set_trace_processors,
        set_tracing_disabled,
    )
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.tracing import TracingProcessor

    from loopwarden.integrations.openai_agents import LoopGuardForAgents

    class Recorder(TracingProcessor):
        """Keeps every finished span, exported as the SDK exports it."""

        def __init__(self) -> None:
            self.spans: list[dict[str, Any]] = []

        def on_trace_start(self, trace: Any) -> None:
            pass

        def on_trace_end(self, trace: Any) -> None:
            pass

        def on_span_start(self, span: Any) -> None:
            pass

        def on_span_end(self, span: Any) -> None:
            self.spans.append(span.export())

        def shutdown(self) -> None:
            pass

        def force_flush(self) -> None:
            pass

    @function_tool
    def poll_status(job: str) -> str:
        """Status of a background job."""
        return "pending"

    steps: list[Any] = [
        [function_call("poll_status", {"job": "42"}, call_id=f"c{i}")] for i in range(12)
    ]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    guard = LoopGuardForAgents(CONFIG, on_stop="raise")
    agent = guard.protect(Agent(name="poller", model=model, tools=[poll_status]))
    recorder = Recorder()
    set_trace_processors([recorder])  # nothing is uploaded
    set_tracing_disabled(False)
    try:
        with pytest.raises(lw.CircuitBreakerTripped):
            asyncio.run(Runner.run(agent, "hi", run_config=guard.run_config(), max_turns=30))
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])

    by_id = {s["id"]: s for s in recorder.spans}
    ours = [s for s in recorder.spans if s["span_data"].get("name", "").startswith("loopwarden.")]
    assert [s["span_data"]["name"] for s in ours] == ACTIONS
    parents = [by_id[s["parent_id"]]["span_data"] for s in ours]
    assert [(p["type"], p["name"]) for p in parents] == [("function", "poll_status")] * 4
    warn = ours[0]["span_data"]["data"]
    assert warn == {
        "gen_ai.tool.name": "poll_status",
        "gen_ai.tool.call.id": "c3",
        "gen_ai.agent.name": "poller",
        "loopwarden.detector": "generic_repeat",
        "loopwarden.level": "warning",
        "loopwarden.count": 3,
        "loopwarden.warning_key": warn["loopwarden.warning_key"],
        "loopwarden.run_id": warn["loopwarden.run_id"],
    }
    assert ours[-1]["span_data"]["data"]["loopwarden.code"] == "global_circuit_breaker"
    assert by_id[ours[-1]["parent_id"]]["error"] is not None  # the stopped tool span failed


@pytest.mark.usefixtures("counted")
def test_langchain_with_openinference(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """LangChain + OpenInference: events on the `tools` node span that encloses each call."""
    pytest.importorskip("langchain.agents")
    instrumentation = pytest.importorskip("openinference.instrumentation.langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from loopwarden.integrations.langchain import LoopGuardMiddleware

    ids = itertools.count()

    class Stuck(BaseChatModel):
        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            call = {"name": "poll_status", "args": {"job": "42"}, "id": f"c{next(ids)}"}
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))]
            )

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Stuck:  # type: ignore[override]
            return self

    @tool
    def poll_status(job: str) -> str:
        """Status of a background job."""
        return "pending"

    tracer_provider, exporter = provider
    instrumentor = instrumentation.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        middleware = LoopGuardMiddleware(CONFIG, on_stop="raise")
        agent = create_agent(Stuck(), tools=[poll_status], middleware=[middleware], name="poller")
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.invoke({"messages": [("user", "hi")]})
    finally:
        instrumentor.uninstrument()

    spans = exporter.get_finished_spans()
    assert annotated(spans) == [("tools", a) for a in ACTIONS]
    root = next(s for s in spans if s.name == "poller")
    tools_spans = [s for s in spans if s.name == "tools"]
    assert {s.parent.span_id for s in tools_spans if s.parent} == {root.context.span_id}
    ran = [s for s in spans if s.name == "poll_status"]
    assert len(ran) == 5  # the blocked calls never opened a tool span
    warn_node = next(s for s in tools_spans if s.events and s.events[0].name == "loopwarden.warn")
    assert event_attrs(warn_node, "loopwarden.warn")["gen_ai.tool.call.id"] == "c3"
    check_stop(next(s for s in tools_spans if any(e.name == "loopwarden.stop" for e in s.events)))
