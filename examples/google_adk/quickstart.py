"""The README's Google ADK example, run against a model that never stops polling.

No API key, no network: a small ``BaseLlm`` takes the place of Gemini, asking
for the same tool call every turn until loopwarden stops the run, and then
(asked without tools) saying what it found. The plugin reads ``loopwarden.json5``
from the directory it runs in, so run it from here::

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

from loopwarden.integrations.google_adk import LoopGuardPlugin


class StuckModel(BaseLlm):
    """Stands in for Gemini: it asks whether job 42 is done, every turn it is offered
    the tool (loopwarden's last request offers none: then it says what it found)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if not llm_request.config.tools:
            text = "Job 42 is still pending after 30 checks. Check it by hand."
            yield LlmResponse(content=Content(role="model", parts=[Part(text=text)]))
            return
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

events = ask("Is job 42 done?")
answer = events[-1]  # the model's last answer, with loopwarden's summary after it
print(answer.content.parts[0].text)
report = answer.custom_metadata["loopwarden"]  # rule, tool, count, calls, what it saved
