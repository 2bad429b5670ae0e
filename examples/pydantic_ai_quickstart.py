"""The README's Pydantic AI example, run against a model that never stops polling.

No API key, no network: the model is Pydantic AI's own ``FunctionModel``,
scripted to ask for the same tool call every turn. Run it::

    pip install 'loopwarden[pydantic-ai]'
    python examples/pydantic_ai_quickstart.py
"""

from __future__ import annotations

import itertools

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopwarden.integrations.pydantic_ai import LoopGuardCapability

ids = itertools.count(1)


def stuck(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for your model: it asks whether job 42 is done, every turn."""
    call = ToolCallPart("poll_status", {"job": "42"}, tool_call_id=f"c{next(ids)}")
    return ModelResponse(parts=[call])


model = FunctionModel(stuck)

guard = LoopGuardCapability({"tools": {"loopDetection": {"enabled": True}}})
agent = Agent(model, capabilities=[guard], name="support-bot")


@agent.tool_plain
def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


result = agent.run_sync("Is job 42 done?")
stop = (result.metadata or {}).get("loopwarden")
if stop:  # loopwarden stopped the run; the output is the model's last answer
    print("stopped:", stop["code"], stop["tool"], stop["count"])
