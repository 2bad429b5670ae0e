"""Added latency per tool call of the LlamaIndex integration.

A ``FunctionAgent`` driven by LlamaIndex's ``MockFunctionCallingLLM`` calls
``poll_status`` with a new job id every time (so nothing is ever warned or
blocked), ``--per-turn`` parallel calls per model turn, with and without
:meth:`LoopGuardForLlamaIndex.protect`. Prints microseconds per tool call of
both, the difference, and the engine's own per-call cost
(``RunGuard.before_call`` + ``after_call`` on the same params and results).
Target: difference <= engine cost + 20 us.

The whole workflow run is timed (CPU time of this process), so the difference
also holds the once-per-run work (the run watcher) spread over the calls. A
workflow step costs tens of microseconds, so the timed difference is noisy on
a busy machine; ``--instructions`` also counts instructions per call with
valgrind.

Run: ``python benchmarks/bench_llamaindex.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from loopwarden.integrations.llamaindex import LoopGuardForLlamaIndex

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import CONFIG, Case, run_benchmark  # a sibling script, not a package


def scripted(calls: int, per_turn: int) -> MockFunctionCallingLLM:
    """``per_turn`` new ``poll_status`` calls per turn until ``calls`` were answered."""

    def reply(messages: Any, **kwargs: Any) -> ChatMessage:
        done = sum(1 for m in messages if m.role == "tool")
        if done >= calls:
            return ChatMessage(role="assistant", content="done")
        blocks = [
            ToolCallBlock(
                tool_call_id=f"c{n}", tool_name="poll_status", tool_kwargs={"job": f"job-{n}"}
            )
            for n in range(done, min(done + per_turn, calls))
        ]
        return ChatMessage(role="assistant", blocks=blocks)

    return MockFunctionCallingLLM(response_generator=reply)


async def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


def agent_case(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int, guarded: bool) -> Case:
    agent = FunctionAgent(name="poller", tools=[poll_status], llm=scripted(calls, per_turn))
    if guarded:
        LoopGuardForLlamaIndex(CONFIG).protect(agent)

    async def run() -> None:
        await agent.run(user_msg="Are the jobs done?", max_iterations=calls + 5)

    def one_run(_: list[int]) -> float:
        start = time.process_time()
        loop.run_until_complete(run())
        return time.process_time() - start

    one_run([])  # warm up: imports, caches
    return one_run


if __name__ == "__main__":
    run_benchmark(
        script=__file__,
        title="LlamaIndex FunctionAgent.run",
        unit="run",
        guarded="LoopGuardForLlamaIndex",
        agent_case=agent_case,
    )
