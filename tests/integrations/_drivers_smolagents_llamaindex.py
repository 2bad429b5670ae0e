"""Scenario drivers for smolagents (``ToolCallingAgent``, ``CodeAgent``) and LlamaIndex.

smolagents ships no offline model: its agents talk through its real
``OpenAIServerModel`` client, over HTTP, to a scripted chat-completions server
on loopback (``_chatserver.py``). LlamaIndex agents use the framework's own
``MockFunctionCallingLLM``. Framework imports happen inside the drivers.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import typing
from collections.abc import Callable
from typing import Any

import pytest

from tests.integrations._chatserver import ChatServer
from tests.integrations._drivers import LIMIT, Driver, Result, Script, _stopped

TASK = "Is job 42 done?"
_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


# -- smolagents ----------------------------------------------------------------------------
def smol_tool(fn: Callable[..., Any]) -> Any:
    """A smolagents Tool running the scenario's async function (one event loop per call)."""
    from smolagents import Tool

    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)

    class ScenarioTool(Tool):
        skip_forward_signature_validation = True
        name = fn.__name__
        description = inspect.getdoc(fn) or fn.__name__
        inputs = {
            p: {"type": _TYPES.get(hints.get(p, str), "string"), "description": p} for p in params
        }
        output_type = "string"

        def forward(self, **kwargs: Any) -> Any:
            return asyncio.run(fn(**kwargs))

    return ScenarioTool()


def _compact_at_step(step: int) -> Callable[..., None]:
    """A memory-trimming step callback, as smolagents users write them: at the end of
    ``step``, every earlier step but the task is dropped."""

    def trim(memory_step: Any, agent: Any = None) -> None:
        if memory_step.step_number == step and agent is not None:
            del agent.memory.steps[1:]

    return trim


# What smolagents wraps around what the code printed or raised.
_FAILED_AT = re.compile(r"Code execution failed at line '.*?' due to: \w+: ", re.DOTALL)


class _Smolagents(Driver):
    requires = "smolagents"
    module = "loopwarden.integrations.smolagents"
    extra = "smolagents"
    hidden = ("smolagents",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.smolagents import LoopGuardForSmolagents

        guard_kwargs.setdefault("on_stop", "raise")  # the scenarios check the stop itself
        return LoopGuardForSmolagents(config, **guard_kwargs)

    def reply(self, calls: list[Any] | None) -> dict[str, Any]:
        raise NotImplementedError

    def agent(self, tools: list[Any], model: Any, callbacks: list[Any]) -> Any:
        raise NotImplementedError

    def answers(self, step: Any, turn: int, script: Script, outputs: dict[str, str]) -> list[str]:
        """Add the step's answers to ``outputs``; returns the texts the model is sent for it."""
        raise NotImplementedError

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        pytest.importorskip("openai")  # OpenAIServerModel's client
        return await asyncio.to_thread(self._run, adapter, script, tools, compact)

    def _run(self, adapter: Any, script: Script, tools: list[Any], compact: bool) -> Result:
        from smolagents import OpenAIServerModel
        from smolagents.agents import ToolOutput
        from smolagents.memory import ActionStep, FinalAnswerStep

        turns = itertools.count()

        def reply(body: dict[str, Any]) -> dict[str, Any]:
            return self.reply(script(next(turns)))

        result = Result()
        sent: list[str] = []  # texts of finished steps: the next request must carry them
        with ChatServer(reply) as server:
            model = OpenAIServerModel("scripted", api_base=server.url, api_key="none")
            callbacks = [_compact_at_step(3)] if compact else []
            agent = adapter.protect(self.agent([smol_tool(fn) for fn in tools], model, callbacks))
            step_outputs: dict[str, str] = {}  # the running step's ToolOutput observations
            turn = 0
            try:
                for item in agent.run(TASK, stream=True):
                    if isinstance(item, ToolOutput) and not item.is_final_answer:
                        step_outputs[item.id] = item.observation
                    elif isinstance(item, ActionStep) and not item.is_final_answer:
                        # A step that the stop ended is never yielded: its calls have no answer.
                        sent.extend(self.answers(item, turn, script, step_outputs))
                        result.answers.update(step_outputs)
                        step_outputs = {}
                        turn += 1
                    elif isinstance(item, FinalAnswerStep):
                        result.final = str(item.output)
            except Exception as exc:
                _stopped(exc, result)
            result.model_calls = len(server.requests)
            read = [_texts(request) for request in server.requests]
        for text in sent:
            assert any(text in seen for seen in read), f"the model was never sent {text!r}"
        return result


def _texts(request: dict[str, Any]) -> str:
    """Every text part of a chat-completions request's messages."""
    parts: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


class SmolagentsTools(_Smolagents):
    name = "smolagents"

    def reply(self, calls: list[Any] | None) -> dict[str, Any]:
        if calls is None:
            return {"tool_calls": [("final_answer", {"answer": "done"}, "final")]}
        return {"tool_calls": calls}

    def agent(self, tools: list[Any], model: Any, callbacks: list[Any]) -> Any:
        from smolagents import ToolCallingAgent
        from smolagents.monitoring import LogLevel

        return ToolCallingAgent(
            tools=tools,
            model=model,
            name="poller",
            max_steps=LIMIT + 5,
            verbosity_level=LogLevel.OFF,
            step_callbacks=callbacks,
        )

    def answers(self, step: Any, turn: int, script: Script, outputs: dict[str, str]) -> list[str]:
        texts = list(outputs.values())
        # A call that raised (an unknown name) has no ToolOutput: the model reads the error.
        if step.error is not None:
            texts.append(str(step.error))
            for _, _, call_id in script(turn) or ():
                outputs.setdefault(call_id, str(step.error))
        return texts


class SmolagentsCode(_Smolagents):
    name = "smolagents_code"

    def reply(self, calls: list[Any] | None) -> dict[str, Any]:
        if calls is None:
            return {"content": "<code>\nfinal_answer('done')\n</code>"}
        lines = []
        for name, args, _ in calls:
            arguments = ", ".join(f"{key}={value!r}" for key, value in args.items())
            lines.append(f"print({name}({arguments}))")
        return {"content": "Thought: check it.\n<code>\n" + "\n".join(lines) + "\n</code>"}

    def agent(self, tools: list[Any], model: Any, callbacks: list[Any]) -> Any:
        from smolagents import CodeAgent
        from smolagents.monitoring import LogLevel

        return CodeAgent(
            tools=tools,
            model=model,
            name="poller",
            max_steps=LIMIT + 5,
            verbosity_level=LogLevel.OFF,
            step_callbacks=callbacks,
        )

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        first = script(0)
        if first is not None and len(first) > 1:
            pytest.skip(
                "a CodeAgent's calls in one code block run one after another and carry no "
                "model call ids (test_smolagents.py checks how they are paired)"
            )
        return await super().arun(adapter, script, tools, compact=compact)

    def answers(self, step: Any, turn: int, script: Script, outputs: dict[str, str]) -> list[str]:
        texts = [t for t in (step.observations, step.error and str(step.error)) if t]
        calls = script(turn)
        if not calls:
            return texts
        # What the model read for the step, without smolagents' framing of it.
        text = (step.observations or "").replace("Execution logs:\n", "", 1)
        text = text.replace("\nLast output from code snippet:\nNone", "")
        if step.error is not None:
            reason = _FAILED_AT.sub("", str(step.error), count=1)
            text = f"{text}\n\n{reason}" if text else reason
        outputs[calls[0][2]] = text.strip()
        return texts


SMOLAGENTS_DRIVERS = (SmolagentsTools(), SmolagentsCode())


# -- LlamaIndex ----------------------------------------------------------------------------
class LlamaIndex(Driver):
    name = "llamaindex"
    requires = "llama_index.core"
    module = "loopwarden.integrations.llamaindex"
    extra = "llamaindex"
    hidden = ("llama_index.core",)

    def adapter(self, config: Any, **guard_kwargs: Any) -> Any:
        from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex

        guard_kwargs.setdefault("on_stop", "raise")  # the scenarios check the stop itself
        return LoopGuardForLlamaIndex(config, **guard_kwargs)

    async def arun(
        self, adapter: Any, script: Script, tools: list[Any], *, compact: bool = False
    ) -> Result:
        if compact:
            pytest.skip("LlamaIndex agents do not compact a run's context (docs page)")
        from llama_index.core.agent.workflow import FunctionAgent
        from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
        from llama_index.core.llms.mock import MockFunctionCallingLLM

        seen: list[list[Any]] = []
        turns = itertools.count()

        def reply(messages: Any, **kwargs: Any) -> Any:
            seen.append(list(messages))
            calls = script(next(turns))
            if calls is None:
                return ChatMessage(role="assistant", content="done")
            blocks = [
                ToolCallBlock(tool_call_id=i, tool_name=n, tool_kwargs=a) for n, a, i in calls
            ]
            return ChatMessage(role="assistant", blocks=blocks)

        llm = MockFunctionCallingLLM(response_generator=reply)
        agent = adapter.protect(FunctionAgent(name="poller", tools=tools, llm=llm))
        result = Result()
        try:
            out = await agent.run(user_msg=TASK, max_iterations=LIMIT + 5)
            result.final = str(out.response.content)
        except Exception as exc:
            _stopped(exc, result)
        for messages in seen:
            for message in messages:
                call_id = message.additional_kwargs.get("tool_call_id")
                if message.role == "tool" and call_id:
                    result.answers[call_id] = str(message.content)
        result.model_calls = len(seen)
        return result


LLAMAINDEX_DRIVERS = (LlamaIndex(),)
