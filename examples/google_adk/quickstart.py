"""The README's Google ADK example, run against a model that never stops polling.

No API key, no network: a small ``BaseLlm`` takes the place of Gemini, asking
for the same tool call every turn. The plugin reads ``loopwarden.json5`` from
the directory it runs in, so run it from here::

    pip install 'loopwarden[google-adk]'
    cd examples/google_adk && python quickstart.py
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from google.genai.types import Content, Part

from loopwarden.integrations.google_adk import LoopGuardPlugin, loop_abort


class StuckModel(BaseLlm):
    """Stands in for Gemini: it asks whether job 42 is done, every turn."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        n = sum(1 for c in llm_request.contents for p in c.parts or () if p.function_response)
        call = types.FunctionCall(name="poll_status", args={"job": "42"}, id=f"c{n}")
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=len(str(n)))
        content = Content(role="model", parts=[Part(function_call=call)])
        yield LlmResponse(content=content, usage_metadata=usage)


def poll_status(job: str) -> dict:
    return {"status": "pending"}


agent = LlmAgent(name="poller", model="gemini-2.5-flash", tools=[poll_status])
guard = LoopGuardPlugin("loopwarden.json5")
runner = InMemoryRunner(app=App(name="demo", root_agent=agent, plugins=[guard]))
runner.auto_create_session = True


def ask(question: str) -> list:
    message = Content(role="user", parts=[Part(text=question)])
    return list(runner.run(user_id="me", session_id="s1", new_message=message))


agent.model = StuckModel(model="stuck")

try:
    events = ask("Is job 42 done?")
except RuntimeError as exc:
    stop = loop_abort(exc)  # CircuitBreakerTripped, CompactionLoopPersisted or None
    if stop is None:
        raise
    print("loopwarden stopped the run:", stop.code, stop.tool_name, stop.count)
