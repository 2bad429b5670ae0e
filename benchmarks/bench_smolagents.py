"""Added latency per tool call of the smolagents integration.

A ``ToolCallingAgent`` (or, with ``LOOPWARDEN_BENCH_AGENT=code``, a
``CodeAgent``) driven by an in-process scripted ``Model`` calls ``poll_status``
with a new job id every time (so nothing is ever warned or blocked),
``--per-turn`` calls per model turn (parallel tool calls in smolagents' thread
pool; several calls in one code block for the CodeAgent), with and without
:meth:`LoopGuardForSmolagents.protect`. Prints microseconds per tool call of
both, the difference, and the engine's own per-call cost
(``RunGuard.before_call`` + ``after_call`` on the same params and results).
Target: difference <= engine cost + 20 us.

The whole ``agent.run`` is timed (CPU time of this process, all threads), so
the difference also holds the once-per-run and once-per-step work spread over
the calls. smolagents itself spends 100-300 us per call (it renders its whole
memory for every model call), so on a busy machine the timed difference is
noisy; ``--instructions`` also counts instructions per call with valgrind.

``--hook`` instead times the interception point alone, on the same calls:
``execute_tool_call`` of a protected agent (inside a run, the step's call ids
noted) against the agent's own, and a CodeAgent's wrapped tool against the
tool itself; with the engine's cost beside them.

Run: ``python benchmarks/bench_smolagents.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from smolagents import CodeAgent, Tool, ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from smolagents.monitoring import LogLevel

import loopwarden as lw
from loopwarden.integrations.smolagents import LoopGuardForSmolagents

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import CONFIG, Case, run_benchmark  # sibling scripts, not a package
from bench_engine import measure

CODE = os.environ.get("LOOPWARDEN_BENCH_AGENT") == "code"


class Scripted(Model):
    """``per_turn`` new ``poll_status`` calls per turn until ``calls`` were made, then done."""

    def __init__(self, calls: int, per_turn: int) -> None:
        super().__init__(model_id="scripted")
        self.calls = calls
        self.per_turn = per_turn
        self.done = 0

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        if len(messages) <= 2:  # system prompt and task: a new run
            self.done = 0
        start, self.done = self.done, min(self.done + self.per_turn, self.calls)
        jobs = range(start, self.done)
        if CODE:
            lines = [f"poll_status(job='job-{n}')" for n in jobs] or ["final_answer('done')"]
            return ChatMessage(role=MessageRole.ASSISTANT, content="<code>\n" + "\n".join(lines))
        calls = [
            ChatMessageToolCall(
                id=f"c{n}",
                type="function",
                function=ChatMessageToolCallFunction(
                    name="poll_status", arguments={"job": f"job-{n}"}
                ),
            )
            for n in jobs
        ] or [
            ChatMessageToolCall(
                id="final",
                type="function",
                function=ChatMessageToolCallFunction(
                    name="final_answer", arguments={"answer": "done"}
                ),
            )
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls)


class PollStatus(Tool):
    name = "poll_status"
    description = "Check whether a job has finished."
    inputs: ClassVar[dict[str, Any]] = {"job": {"type": "string", "description": "the job id"}}
    output_type = "string"

    def forward(self, job: str) -> str:
        return "pending"


def agent_case(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int, guarded: bool) -> Case:
    kind = CodeAgent if CODE else ToolCallingAgent
    agent = kind(
        tools=[PollStatus()],
        model=Scripted(calls, per_turn),
        max_steps=calls + 5,
        verbosity_level=LogLevel.OFF,
    )
    if guarded:
        LoopGuardForSmolagents(CONFIG).protect(agent)

    def one_run(_: list[int]) -> float:
        start = time.process_time()
        agent.run("Are the jobs done?")
        return time.process_time() - start

    one_run([])  # warm up: imports, caches
    return one_run


def hook() -> None:
    """The interception points alone: guarded minus bare against the engine's own cost."""
    from loopwarden.integrations.smolagents import _CodeTool

    calls = [{"job": f"job-{n}"} for n in range(500)]

    def plain(_: list[Any]) -> float:
        agent = ToolCallingAgent(tools=[PollStatus()], model=Scripted(0, 1))
        start = time.process_time()
        for args in calls:
            agent.execute_tool_call("poll_status", args)
        return time.process_time() - start

    def protected(_: list[Any]) -> float:
        agent = ToolCallingAgent(tools=[PollStatus()], model=Scripted(0, 1))
        LoopGuardForSmolagents(CONFIG).protect(agent)
        binding = vars(agent)["run"]._loopwarden_binding
        run = binding._start()
        start = time.process_time()
        for n, args in enumerate(calls):
            if n % 10 == 0:  # process_tool_calls notes a step's ids, ten calls a step
                binding.pending = [("poll_status", calls[m], f"c{m}") for m in range(n, n + 10)]
            agent.execute_tool_call("poll_status", args)
        elapsed = time.process_time() - start
        binding._finish(run)
        return elapsed

    def tool(_: list[Any]) -> float:
        poll = PollStatus()
        start = time.process_time()
        for args in calls:
            poll(**args)
        return time.process_time() - start

    def code_tool(_: list[Any]) -> float:
        agent = CodeAgent(tools=[PollStatus()], model=Scripted(0, 1))
        LoopGuardForSmolagents(CONFIG).protect(agent)
        binding = vars(agent)["run"]._loopwarden_binding
        run = binding._start()
        wrapped = _CodeTool(binding, "poll_status", agent.tools["poll_status"])
        start = time.process_time()
        for args in calls:
            wrapped(**args)
        elapsed = time.process_time() - start
        binding._finish(run)
        return elapsed

    def engine(_: list[Any]) -> float:
        guard = lw.LoopGuard(CONFIG)
        run = guard.run()
        start = time.process_time()
        for n, args in enumerate(calls):
            run.before_call("poll_status", args, f"c{n}")
            run.after_call("poll_status", args, f"c{n}", result="pending")
        elapsed = time.process_time() - start
        run.end()
        return elapsed

    table = {"plain": plain, "protected": protected, "tool": tool, "code": code_tool}
    table["engine"] = engine
    got = measure({name: (fn, calls) for name, fn in table.items()}, 30)
    row = "{:48} {:10.1f}"
    print("smolagents interception points alone, 500 calls, best of 30 rounds, us per call")
    print(row.format("ToolCallingAgent.execute_tool_call", got["plain"]))
    print(row.format("  protected", got["protected"]))
    print(row.format("CodeAgent tool called from code", got["tool"]))
    print(row.format("  through loopwarden's wrapper", got["code"]))
    print(row.format("engine alone (before_call + after_call)", got["engine"]))
    for name, added in (
        ("execute_tool_call", got["protected"] - got["plain"]),
        ("code tool", got["code"] - got["tool"]),
    ):
        verdict = "met" if added <= got["engine"] + 20 else "MISSED"
        own = added - got["engine"]
        print(f"{name}: added {added:.1f} us (engine + {own:.1f}) -> target {verdict}")


if __name__ == "__main__":
    if "--hook" in sys.argv:
        hook()
        sys.exit()
    run_benchmark(
        script=__file__,
        title=f"smolagents {'CodeAgent' if CODE else 'ToolCallingAgent'}.run",
        unit="run",
        guarded="LoopGuardForSmolagents",
        agent_case=agent_case,
    )
