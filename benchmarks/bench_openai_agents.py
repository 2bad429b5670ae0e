"""Added latency per tool call of the OpenAI Agents SDK integration.

An agent driven by the SDK's ``ScriptedModel`` calls ``poll_status`` with a new
job id every time (so nothing is ever warned or blocked), ``--per-turn`` calls
per model turn, and runs with and without :class:`LoopGuardForAgents`
(guardrails, hooks and run config). Prints microseconds per tool call of both,
the difference, and the engine's own per-call cost (``RunGuard.before_call`` +
``after_call`` on the same params and results). Target: difference <= engine
cost + 20 us.

The whole ``Runner.run`` is timed (CPU time of this process), so the difference
also holds the once-per-run and once-per-model-call work (the hooks) spread over
the calls. The SDK itself spends around a millisecond per call, so on a busy
machine the timed difference is noisy; ``--instructions`` also counts
instructions per call with valgrind (immune to noise, but slow: the SDK's import
alone takes a minute or two under valgrind).

Run: ``python benchmarks/bench_openai_agents.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from loopwarden.integrations.openai_agents import LoopGuardForAgents

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import CONFIG, Case, run_benchmark  # a sibling script, not a package

set_tracing_disabled(True)


def make_tool() -> Any:
    # One tool object per agent: protect() adds guardrails to the tool itself.
    # Async, so that the SDK runs it on the event loop, not in a worker thread.
    @function_tool
    async def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        return "pending"

    return poll_status


def script(calls: int, per_turn: int) -> list[Any]:
    steps: list[Any] = []
    for start in range(0, calls, per_turn):
        ids = range(start, min(start + per_turn, calls))
        steps.append(
            [function_call("poll_status", {"job": f"job-{n}"}, call_id=f"c{n}") for n in ids]
        )
    return [*steps, [assistant_message("done")]]


def agent_case(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int, guarded: bool) -> Case:
    agent: Agent[Any] = Agent(name="poller", tools=[make_tool()])
    config = RunConfig(tracing_disabled=True)
    if guarded:
        guard = LoopGuardForAgents(CONFIG)
        guard.protect(agent)
        config = guard.run_config(config)
    turns = -(-calls // per_turn) + 1

    def one_run(_: list[int]) -> float:
        agent.model = ScriptedModel(script(calls, per_turn))  # built outside the timing
        start = time.process_time()
        loop.run_until_complete(
            Runner.run(agent, "Are the jobs done?", max_turns=turns, run_config=config)
        )
        return time.process_time() - start

    one_run([])  # warm up: imports, caches
    return one_run


if __name__ == "__main__":
    run_benchmark(
        script=__file__,
        title="OpenAI Agents SDK Runner.run",
        unit="run",
        guarded="LoopGuardForAgents",
        agent_case=agent_case,
    )
