"""Added latency per tool call of the Google ADK integration.

An ``LlmAgent`` driven by a scripted ``BaseLlm`` calls ``poll_status`` with a
new job id every time (so nothing is ever warned or blocked), ``--per-turn``
calls per model turn, and runs through ``InMemoryRunner`` with and without
:class:`LoopGuardPlugin`. Prints microseconds per tool call of both, the
difference, and the engine's own per-call cost (``RunGuard.before_call`` +
``after_call`` on the same params and results). Target: difference <= engine
cost + 20 us.

The whole invocation is timed (CPU time of this process), so the difference
also holds the plugin's once-per-invocation and once-per-model-call work spread
over the calls. ADK itself spends around a millisecond per call, so on a busy
machine the timed difference is noisy; ``--instructions`` also counts
instructions per call with valgrind (immune to noise, but slow).

Run: ``python benchmarks/bench_google_adk.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.genai import types

from loopwarden.integrations.google_adk import LoopGuardPlugin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import CONFIG, Case, run_benchmark  # a sibling script, not a package


class ScriptedLlm(BaseLlm):
    """Asks for ``per_turn`` new ``poll_status`` calls per turn until ``calls`` were answered."""

    calls: int
    per_turn: int

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        done = sum(1 for c in llm_request.contents for p in c.parts or () if p.function_response)
        if done >= self.calls:
            parts = [types.Part(text="done")]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(
                        name="poll_status", args={"job": f"job-{n}"}, id=f"c{n}"
                    )
                )
                for n in range(done, min(done + self.per_turn, self.calls))
            ]
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=100)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


async def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


def agent_case(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int, guarded: bool) -> Case:
    model = ScriptedLlm(model="scripted", calls=calls, per_turn=per_turn)
    agent = LlmAgent(name="poller", model=model, tools=[poll_status])
    plugins: list[BasePlugin] = [LoopGuardPlugin(CONFIG)] if guarded else []
    runner = InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))
    message = types.Content(role="user", parts=[types.Part(text="Are the jobs done?")])

    async def invocation() -> None:
        session = await runner.session_service.create_session(app_name="bench", user_id="me")
        async for _ in runner.run_async(user_id="me", session_id=session.id, new_message=message):
            pass

    def one_invocation(_: list[int]) -> float:
        start = time.process_time()
        loop.run_until_complete(invocation())
        return time.process_time() - start

    one_invocation([])  # warm up: imports, caches
    return one_invocation


if __name__ == "__main__":
    run_benchmark(
        script=__file__,
        title="Google ADK InMemoryRunner.run_async",
        unit="invocation",
        guarded="LoopGuardPlugin",
        agent_case=agent_case,
    )
