"""Drivers for the shared scenarios (``test_scenarios.py``): AG2 and CrewAI.

AG2 runs twice: with its own offline test model (``ag2.testing.TestConfig``,
wrapped in its ``TrackingConfig`` to see what the model was sent), and with its
real OpenAI client against a scripted chat-completions server on loopback
(``_chat_server.py``). CrewAI has no test model: it runs with its real OpenAI
client against that server. Framework imports happen inside the drivers, so
this module imports without any extra installed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from tests.integrations._chat_server import ChatServer, Reply, tool_messages
from tests.integrations._drivers import LIMIT, Driver, Result, Script, _stopped, _text

# CrewAI: no telemetry or tracing attempts (there is no network), nothing in the user's home.
CREWAI_ENV = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}


def import_crewai() -> Any:
    """Import CrewAI for a test: its environment set, its import-time ImportWarning
    (a lazily set submodule attribute) not turned into an error by pytest, its console
    panels off."""
    for key, value in CREWAI_ENV.items():
        os.environ.setdefault(key, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImportWarning)
        import crewai
        from crewai.events.event_listener import EventListener

    # CrewAI's console panels go to the terminal past pytest's capture: quiet CI logs.
    EventListener().formatter.verbose = False
    return crewai


CREWAI_WARNINGS = (
    # CrewAI reads its own deprecated fields (function_calling_llm) on every Agent.
    "ignore::DeprecationWarning:crewai",
)


# -- AG2 -------------------------------------------------------------------------------
class AG2(Driver):
    name = "ag2"
    requires = "ag2"
    module = "loopwarden.integrations.ag2"
    extra = "ag2"
    hidden = ("ag2",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.ag2 import LoopGuardMiddleware

        guard_kwargs.setdefault("on_stop", "raise")  # the scenarios check the stop itself
        return LoopGuardMiddleware(config, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        """One turn (``ask``); with ``compact``, a first short turn after which AG2 compacts
        the conversation, and the looping turn after it on the same stream."""
        from ag2 import Agent, MemoryStream, tool
        from ag2.compact import CompactTrigger, TailWindowCompact
        from ag2.knowledge import MemoryKnowledgeStore
        from ag2.knowledge.config import KnowledgeConfig

        knowledge = None
        if compact:
            knowledge = KnowledgeConfig(
                store=MemoryKnowledgeStore(),
                expose_tool=False,
                write_event_log=False,
                compact=TailWindowCompact(2),
                compact_trigger=CompactTrigger(max_events=4),
            )
        result = Result()
        with self.models(script, compact) as (models, collect):
            agent = Agent(
                "poller",
                config=models[0],
                tools=[tool(fn) for fn in tools],
                middleware=[adapter],
                knowledge=knowledge,
            )
            stream = MemoryStream()
            try:
                for number, model in enumerate(models):
                    question = "Check again." if number else "Is job 42 done?"
                    reply = await agent.ask(question, stream=stream, config=model)
                result.final = reply.body
            except Exception as exc:
                _stopped(exc, result)
            collect(result)
        return result

    @contextlib.contextmanager
    def models(
        self, script: Script, compact: bool
    ) -> Iterator[tuple[list[Any], Callable[[Result], None]]]:
        """The model config of each turn, and what fills a result's answers and model calls.

        AG2's ``TestConfig`` starts its script afresh for every turn: with ``compact``,
        two tool-call steps and a text answer in the first, the rest of the script after.
        """
        from ag2.events import ToolCallEvent, ToolResultsEvent
        from ag2.testing import TestConfig, TrackingConfig

        turns: list[list[Any]] = [[]]
        for turn in range(LIMIT):
            calls = script(turn)
            if calls is None:
                break
            turns[-1].append(
                [ToolCallEvent(name=n, arguments=json.dumps(a), id=i) for n, a, i in calls]
            )
            if compact and turn == 1:
                turns[-1].append(AFTER_TWO_CHECKS)
                turns.append([])
        turns[-1].append("done")
        # raise_tool_errors=False: a real provider reads a failed call as a result and goes on.
        models = [TrackingConfig(TestConfig(*steps, raise_tool_errors=False)) for steps in turns]

        def collect(result: Result) -> None:
            for model in models:
                for call in model.mock.call_args_list:
                    last = call.args[0]  # the newest event the model was sent
                    if isinstance(last, ToolResultsEvent):
                        for answer in last.results:
                            result.answers[answer.parent_id] = "\n\n".join(
                                _text(getattr(part, "content", getattr(part, "data", part)))
                                for part in answer.result.parts
                            )
                result.model_calls += len(model.mock.call_args_list)

        yield models, collect


AFTER_TWO_CHECKS = "Checked twice; will check again when asked."


class AG2OpenAI(AG2):
    """AG2 with its real OpenAI client (``ag2[openai]``) against the loopback chat model:
    what the provider is sent, call ids and tool messages as they travel on the wire."""

    name = "ag2-openai"
    requires_also = ("openai",)

    @contextlib.contextmanager
    def models(
        self, script: Script, compact: bool
    ) -> Iterator[tuple[list[Any], Callable[[Result], None]]]:
        from ag2.config import OpenAIConfig

        steps = itertools.count()
        lock = threading.Lock()
        paused = [False]  # with ``compact``: the first turn's text answer was given

        def reply(body: dict[str, Any]) -> Reply:
            with lock:
                if compact and not paused[0] and _answered(body) == 2:
                    paused[0] = True
                    return AFTER_TWO_CHECKS
                step = next(steps)
            calls = script(step) if step < LIMIT else None
            return "done" if calls is None else list(calls)

        def collect(result: Result) -> None:
            for body in server.requests:
                result.answers.update(tool_messages(body))
            result.model_calls = len(server.requests)

        with ChatServer(reply) as server:
            config = OpenAIConfig(model="gpt-4o-mini", base_url=server.url, api_key="test")
            yield [config] * (2 if compact else 1), collect


def _answered(body: dict[str, Any]) -> int:
    """The tool answers in a request (the first turn's two, before any compaction)."""
    return sum(1 for message in body.get("messages", []) if message.get("role") == "tool")


# -- CrewAI ----------------------------------------------------------------------------
_repeat_lock = threading.Lock()
_repeat_users = 0
_repeat_saved: Any = None


@contextlib.contextmanager
def crewai_repeat_limit_lifted() -> Iterator[None]:
    """Lift CrewAI's own stop at the 5th identical call (a fixed module constant) while a
    scenario runs, so that the scenarios see loopwarden's thresholds. Counted, because
    concurrent runs share the constant."""
    global _repeat_users, _repeat_saved
    from crewai.utilities import agent_utils

    if not hasattr(agent_utils, "MAX_REPEATED_TOOL_CALLS"):  # releases before the limit
        yield
        return
    with _repeat_lock:
        if _repeat_users == 0:
            _repeat_saved = agent_utils.MAX_REPEATED_TOOL_CALLS
            agent_utils.MAX_REPEATED_TOOL_CALLS = 10**6
        _repeat_users += 1
    try:
        yield
    finally:
        with _repeat_lock:
            _repeat_users -= 1
            if _repeat_users == 0:
                agent_utils.MAX_REPEATED_TOOL_CALLS = _repeat_saved


class CrewScript:
    """The scripted model behind the chat server: main turns from ``script``, CrewAI's
    summarising requests answered with a summary, and (``compact``) one context-overflow
    error before turn 3, which makes CrewAI compact the conversation."""

    SUMMARY = "<summary>The user asked whether job 42 is done; it was pending.</summary>"

    def __init__(self, script: Script, *, compact: bool = False) -> None:
        self.script = script
        self.compact = compact
        self.turns = itertools.count()
        self.turn = 0
        self.overflowed = False
        self.main: list[dict[str, Any]] = []  # the main requests that got an answer
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or [{}]
        if "structured summaries" in str(messages[0].get("content")):
            return self.SUMMARY
        with self.lock:
            if self.compact and self.turn == 3 and not self.overflowed:
                self.overflowed = True
                return (400, "This model's maximum context length is 128000 tokens.")
            turn = self.turn = next(self.turns)
            self.main.append(body)
        calls = self.script(turn) if turn < LIMIT else None
        return "done" if calls is None else list(calls)


class CrewAI(Driver):
    name = "crewai"
    requires = "crewai"
    module = "loopwarden.integrations.crewai"
    extra = "crewai"
    hidden = ("crewai",)
    unknown_tool_named = False  # CrewAI answers an unknown name with just "Tool not found"
    warnings_ignored = CREWAI_WARNINGS

    def __init__(self) -> None:
        self._installed: dict[int, int] = {}
        self._lock = threading.Lock()

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        import_crewai()
        from loopwarden.integrations.crewai import LoopGuardHooks

        guard_kwargs.setdefault("on_stop", "raise")  # the scenarios check the stop itself
        return LoopGuardHooks(config, **guard_kwargs)

    @contextlib.contextmanager
    def installed(self, adapter: Any) -> Iterator[None]:
        """The adapter's hooks are process-wide: installed while any of its runs runs."""
        with self._lock:
            count = self._installed.get(id(adapter), 0)
            if count == 0:
                adapter.install()
            self._installed[id(adapter)] = count + 1
        try:
            yield
        finally:
            with self._lock:
                self._installed[id(adapter)] -= 1
                if self._installed[id(adapter)] == 0:
                    del self._installed[id(adapter)]
                    adapter.uninstall()

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        from crewai import LLM, Agent
        from crewai.tools import tool

        model = CrewScript(script, compact=compact)
        result = Result()
        with ChatServer(model) as server, self.installed(adapter), crewai_repeat_limit_lifted():
            agent = Agent(
                role="poller",
                goal="Find out whether the job is done",
                backstory="You check jobs.",
                tools=[tool(fn) for fn in tools],
                llm=LLM(model="openai/gpt-4o-mini", base_url=server.url, api_key="test"),
                max_iter=LIMIT + 5,
                verbose=False,
            )
            try:
                out = await agent.kickoff_async("Is job 42 done?")
                result.final = str(out)
            except Exception as exc:
                _stopped(exc, result)
        for body in model.main:
            result.answers.update(tool_messages(body))
        result.model_calls = len(model.main)
        return result


def crewai_wait_for_events() -> None:
    """CrewAI hands events to its handlers on worker threads: let them finish."""
    from crewai.events import crewai_event_bus

    crewai_event_bus.flush()
