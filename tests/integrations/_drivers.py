"""One driver per framework for the shared scenarios (``test_scenarios.py``).

A driver builds a real agent of its framework around a scripted offline model
(the framework's own test model where it has one), runs it once through the
integration under test, and reports what the model read for each tool call.
Framework imports happen inside the drivers, so this module imports without
any extra installed.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loopwarden.errors import LoopAbort

Call = tuple[str, dict[str, Any], str]
Script = Callable[[int], "list[Call] | None"]
"""Turn number (from 0) -> the tool calls the model makes in it, or None to answer "done"."""

LIMIT = 80  # model turns a scripted model can make at most (frameworks with finite scripts)


@dataclass
class Result:
    """One run as the model saw it."""

    answers: dict[str, str] = field(default_factory=dict)
    """Call id -> the text the model read as that call's answer (notes included)."""
    stop: LoopAbort | None = None
    """loopwarden's stop behind the exception the run ended with, if it did."""
    model_calls: int = 0
    final: str | None = None
    """The model's closing text, when the run ended normally."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            str(item.get("text", item)) if isinstance(item, dict) else str(item) for item in content
        )
    return str(content)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class Driver:
    name: str
    requires: str
    """The framework module whose absence skips this driver."""
    requires_also: tuple[str, ...] = ()
    """Further modules the driver needs (a framework's optional model client)."""
    module: str
    """loopwarden's integration module."""
    extra: str
    hidden: tuple[str, ...]
    """Modules to hide to see the missing-extra error."""
    unknown_tool_named = True
    """The framework's own answer to a call of an unknown name names the tool."""
    warnings_ignored: tuple[str, ...] = ()
    """Warning filters for the framework's own warnings during its tests (pytest's syntax)."""

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        raise NotImplementedError

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        """One run; ``compact`` makes the framework compact the context during it."""
        raise NotImplementedError

    def run(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        return asyncio.run(self.arun(adapter, script, tools, compact=compact))

    def missing(self) -> str | None:
        """The first module this driver needs that is not installed."""
        return next((m for m in (self.requires, *self.requires_also) if not installed(m)), None)

    def __repr__(self) -> str:
        return self.name


def _stopped(exc: BaseException, result: Result) -> Result:
    stop = LoopAbort.find(exc)
    if stop is None:
        raise exc
    result.stop = stop
    return result


# -- LangChain -------------------------------------------------------------------------
@functools.cache
def _lc_model_class() -> type:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Scripted(BaseChatModel):
        script: Any
        seen: list[Any] = []

        def _generate(
            self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            self.seen.append(list(messages))
            return ChatResult(generations=[ChatGeneration(message=self.script(messages))])

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return Scripted


class LangChain(Driver):
    name = "langchain"
    requires = "langchain.agents"
    module = "loopwarden.integrations.langchain"
    extra = "langchain"
    hidden = ("langchain", "langchain.agents")

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.langchain import LoopGuardMiddleware

        # The shared scenarios check the stop itself: raise it (onStop in test_langchain.py).
        on_stop = guard_kwargs.pop("on_stop", "raise")
        return LoopGuardMiddleware(config, on_stop=on_stop, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        from langchain.agents import create_agent
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.messages import AIMessage, ToolMessage
        from langchain_core.tools import tool

        turns = itertools.count()

        def reply(messages: list[Any]) -> Any:
            calls = script(next(turns))
            if calls is None:
                return AIMessage("done")
            return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])

        llm = _lc_model_class()(script=reply, seen=[])
        middleware: list[Any] = [adapter]
        if compact:
            summary = FakeMessagesListChatModel(responses=[AIMessage("Polled job 42: pending.")])
            middleware.insert(
                0, SummarizationMiddleware(summary, trigger=("messages", 8), keep=("messages", 2))
            )
        agent = create_agent(llm, [tool(fn) for fn in tools], middleware=middleware, name="poller")
        result = Result()
        try:
            out = await agent.ainvoke(
                {"messages": [{"role": "user", "content": "Is job 42 done?"}]}
            )
            result.final = str(out["messages"][-1].content)
        except Exception as exc:
            _stopped(exc, result)
        for seen in llm.seen:
            for message in seen:
                if isinstance(message, ToolMessage):
                    result.answers[message.tool_call_id] = _text(message.content)
        result.model_calls = len(llm.seen)
        return result


# -- Pydantic AI -------------------------------------------------------------------------
class PydanticAI(Driver):
    name = "pydantic_ai"
    requires = "pydantic_ai"
    module = "loopwarden.integrations.pydantic_ai"
    extra = "pydantic-ai"
    hidden = ("pydantic_ai",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.pydantic_ai import LoopGuardCapability

        # The shared scenarios check the stop itself: raise it (onStop in test_pydantic_ai.py).
        on_stop = guard_kwargs.pop("on_stop", "raise")
        return LoopGuardCapability(config, on_stop=on_stop, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        from pydantic_ai import Agent
        from pydantic_ai.messages import (
            CompactionPart,
            ModelRequest,
            ModelResponse,
            RetryPromptPart,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )
        from pydantic_ai.models.function import FunctionModel

        seen: list[list[Any]] = []
        turns = itertools.count()

        def reply(messages: list[Any], info: Any) -> Any:
            seen.append(list(messages))
            turn = next(turns)
            calls = script(turn)
            if calls is None:
                return ModelResponse(parts=[TextPart("done")])
            parts: list[Any] = [ToolCallPart(n, a, tool_call_id=i) for n, a, i in calls]
            if compact and turn == 3:  # provider compaction in this response
                parts.insert(0, CompactionPart(content="Polled job 42.", provider_name="function"))
            return ModelResponse(parts=parts)

        # Unknown names cost Pydantic AI's tool retries: enough for loopwarden's stop first.
        agent: Any = Agent(
            FunctionModel(reply), name="poller", capabilities=[adapter], retries={"tools": 100}
        )
        for fn in tools:
            agent.tool_plain(fn)
        result = Result()
        try:
            out = await agent.run("Is job 42 done?")
            result.final = str(out.output)
        except Exception as exc:
            _stopped(exc, result)
        for history in seen:
            for message in history:
                if not isinstance(message, ModelRequest):
                    continue
                last: str | None = None
                for part in message.parts:
                    if isinstance(part, (ToolReturnPart, RetryPromptPart)) and part.tool_call_id:
                        last = part.tool_call_id
                        result.answers[last] = _text(part.content)
                    elif isinstance(part, UserPromptPart) and last is not None:
                        # A note loopwarden enqueued right after that call's answer.
                        result.answers[last] += "\n\n" + _text(part.content)
        result.model_calls = len(seen)
        return result


# -- OpenAI Agents ---------------------------------------------------------------------
class OpenAIAgents(Driver):
    name = "openai_agents"
    requires = "agents"
    module = "loopwarden.integrations.openai_agents"
    extra = "openai-agents"
    hidden = ("agents",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from agents import set_tracing_disabled

        from loopwarden.integrations.openai_agents import LoopGuardForAgents

        set_tracing_disabled(True)  # nothing may try to upload traces
        # The shared scenarios check how a run is stopped: the stop is raised.
        guard_kwargs.setdefault("on_stop", "raise")
        return LoopGuardForAgents(config, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        from agents import Agent, Runner, function_tool
        from agents.testing import ScriptedModel, assistant_message, function_call
        from openai.types.responses import ResponseCompactionItem

        steps: list[list[Any]] = []
        for turn in range(LIMIT):
            calls = script(turn)
            if calls is None:
                break
            step: list[Any] = [function_call(n, a, call_id=i) for n, a, i in calls]
            if compact and turn == 3:  # server-side compaction in this response
                step.insert(
                    0, ResponseCompactionItem(id="cmp", type="compaction", encrypted_content="x")
                )
            steps.append(step)
        model = ScriptedModel([*steps, [assistant_message("done")]])
        agent = adapter.protect(
            Agent(name="poller", model=model, tools=[function_tool(fn) for fn in tools])
        )
        result = Result()
        try:
            out = await Runner.run(
                agent,
                "Is job 42 done?",
                max_turns=LIMIT + 5,
                run_config=adapter.run_config(tracing_disabled=True),
            )
            result.final = str(out.final_output)
        except Exception as exc:
            _stopped(exc, result)
        for call in model.calls:
            for item in call.input:
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    result.answers[item["call_id"]] = _text(item["output"])
        result.model_calls = len(model.calls)
        return result


# -- Google ADK ---------------------------------------------------------------------------
@functools.cache
def _adk_model_class() -> type:
    from collections.abc import AsyncGenerator

    from google.adk.models import BaseLlm, LlmRequest, LlmResponse
    from google.genai import types

    class Scripted(BaseLlm):
        steps: list[Any] = []
        big_prompt_at: set[int] = set()  # request numbers that report a huge prompt
        requests: int = 0

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            self.requests += 1
            step = self.steps.pop(0) if self.steps else "done"
            if isinstance(step, str):
                parts = [types.Part(text=step)]
            else:
                parts = [
                    types.Part(function_call=types.FunctionCall(name=n, args=a, id=i))
                    for n, a, i in step
                ]
            usage = (
                types.GenerateContentResponseUsageMetadata(prompt_token_count=100_000)
                if self.requests in self.big_prompt_at
                else None
            )
            yield LlmResponse(
                content=types.Content(role="model", parts=parts), usage_metadata=usage
            )

    return Scripted


class GoogleADK(Driver):
    name = "google_adk"
    requires = "google.adk"
    module = "loopwarden.integrations.google_adk"
    extra = "google-adk"
    hidden = ("google.adk",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.google_adk import LoopGuardPlugin

        # The shared scenarios check how a run is stopped: the stop is raised.
        guard_kwargs.setdefault("on_stop", "raise")
        return LoopGuardPlugin(config, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        import warnings

        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
        from google.adk.runners import InMemoryRunner
        from google.genai import types

        from loopwarden.integrations.google_adk import WARNING_KEY

        steps: list[Any] = []
        for turn in range(LIMIT):
            calls = script(turn)
            if calls is None:
                break
            steps.append(calls)
        model_class = _adk_model_class()
        # Compaction before the 3rd request: the 2nd response reports a huge prompt.
        model = model_class(model="scripted", steps=steps, big_prompt_at={2} if compact else set())
        compaction = None
        if compact:
            from google.adk.apps._configs import EventsCompactionConfig

            summarizer = LlmEventSummarizer(
                llm=model_class(model="summarizer", steps=["Pending."] * 9)
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # EXPERIMENTAL
                compaction = EventsCompactionConfig(
                    summarizer=summarizer, token_threshold=1000, event_retention_size=1
                )
        app = App(
            name="app",
            root_agent=LlmAgent(name="poller", model=model, tools=tools),
            plugins=[adapter],
            events_compaction_config=compaction,
        )
        runner = InMemoryRunner(app=app)
        session = await runner.session_service.create_session(app_name="app", user_id="me")
        message = types.Content(role="user", parts=[types.Part(text="Is job 42 done?")])
        result = Result()
        events: list[Any] = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # EXPERIMENTAL compaction
                async for event in runner.run_async(
                    user_id="me", session_id=session.id, new_message=message
                ):
                    events.append(event)
            last = events[-1].content if events else None
            result.final = last.parts[0].text if last is not None and last.parts else None
        except Exception as exc:
            _stopped(exc, result)
        for event in events:
            for part in (event.content.parts or ()) if event.content else ():
                response = part.function_response
                if response is None or not response.id:
                    continue
                body = response.response or {}
                text = _text(body.get("error", body.get("result", body)))
                if WARNING_KEY in body:
                    text += "\n\n" + str(body[WARNING_KEY])
                result.answers[response.id] = text
        result.model_calls = model.requests
        return result


DRIVERS = (LangChain(), PydanticAI(), OpenAIAgents(), GoogleADK())
