"""The README's LangChain example, run against a chat model that never stops polling.

No API key, no network: the model is LangChain's own fake chat model, scripted
to ask for the same tool call every turn. Run it::

    pip install 'loopwarden[langchain]'
    python examples/langchain_quickstart.py
"""

from __future__ import annotations

import itertools
from typing import Any

from langchain.agents import create_agent
from langchain.tools import tool
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from loopwarden.integrations.langchain import LoopGuardMiddleware


class StuckChatModel(GenericFakeChatModel):
    """Stands in for your chat model: it asks whether job 42 is done, every turn."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self  # the script already knows the one tool it calls


model = StuckChatModel(
    messages=(
        AIMessage("", tool_calls=[{"name": "poll_status", "args": {"job": "42"}, "id": f"c{n}"}])
        for n in itertools.count(1)
    )
)


@tool
def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


guard = LoopGuardMiddleware({"tools": {"loopDetection": {"enabled": True}}})
agent = create_agent(model, [poll_status], middleware=[guard], name="support-bot")
result = agent.invoke({"messages": [{"role": "user", "content": "Is job 42 done?"}]})
stop = result["messages"][-1].response_metadata.get("loopwarden")
if stop:  # loopwarden stopped the run; the last message is the model's last answer
    print("stopped:", stop["code"], stop["tool"], stop["count"])
