"""Added latency per tool call of the Pydantic AI capability.

An agent whose ``FunctionModel`` calls one tool per turn, with different
arguments every time (so nothing is ever warned or blocked).

1. End to end: the agent runs bare; with a capability that has the same hooks
   as :class:`LoopGuardCapability` but does nothing (what Pydantic AI itself
   charges for those hooks); and with :class:`LoopGuardCapability`. Process CPU
   time, whole runs, so the once-per-run work (``for_run``, ``wrap_run``) is
   spread over the calls (``--calls 1`` shows it undivided). A run costs
   milliseconds, so these figures are only good to a few percent; the bare
   agent is measured twice to show the noise.
2. The hooks alone: the real ``RunContext``, ``ModelRequestContext``,
   ``ModelResponse`` and ``ToolCallPart`` objects of such a run, replayed
   through ``after_model_request`` + ``wrap_tool_execute`` of
   LoopGuardCapability and of the no-op capability (one model response and one
   tool call per turn, as in the run); and the engine's own cost
   (``RunGuard.abefore_call`` + ``aafter_call`` on the same params and
   results). Target: LoopGuardCapability - no-op <= engine + 20 us.

Cases alternate within each round and the best round is kept
(``bench_engine.measure``).

Run: ``python benchmarks/bench_pydantic_ai.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

import loopwarden as lw
from loopwarden.integrations.pydantic_ai import LoopGuardCapability

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import print_hook_report  # sibling scripts, not a package
from bench_engine import measure

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
PROMPT = "Are the jobs done?"
NO_LIMITS = UsageLimits(request_limit=None)  # the default stops a run at 50 requests


def scripted(calls: int) -> FunctionModel:
    """Calls ``poll_status`` with a new job id each turn, ``calls`` times, then answers."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(
            isinstance(part, ToolReturnPart) for message in messages for part in message.parts
        )
        if done >= calls:
            return ModelResponse(parts=[TextPart("done")])
        call = ToolCallPart("poll_status", {"job": f"job-{done}"}, tool_call_id=f"c{done}")
        return ModelResponse(parts=[call])

    return FunctionModel(reply)


class NoopCapability(AbstractCapability[Any]):
    """The hooks LoopGuardCapability uses, doing nothing: Pydantic AI's own cost of them."""

    async def for_run(self, ctx: Any) -> NoopCapability:
        return NoopCapability()

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        try:
            return await handler()
        finally:
            pass

    async def after_model_request(
        self, ctx: Any, *, request_context: Any, response: ModelResponse
    ) -> ModelResponse:
        return response

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        return await handler(args)


def make_agent(calls: int, capabilities: list[AbstractCapability[Any]]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(scripted(calls), capabilities=capabilities)

    @agent.tool_plain
    def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        return "pending"

    return agent


def agent_case(
    loop: asyncio.AbstractEventLoop, calls: int, capabilities: list[AbstractCapability[Any]]
) -> Callable[[list[int]], float]:
    agent = make_agent(calls, capabilities)
    loop.run_until_complete(agent.run(PROMPT, usage_limits=NO_LIMITS))  # warm up

    def one_run(_: list[int]) -> float:
        start = time.process_time()
        loop.run_until_complete(agent.run(PROMPT, usage_limits=NO_LIMITS))
        return time.process_time() - start

    return one_run


class Turn:
    """What the hooks saw in one turn of a real run."""

    def __init__(self, ctx: Any, request_context: Any, response: ModelResponse) -> None:
        self.ctx, self.request_context, self.response = ctx, request_context, response
        self.tool_ctx: Any = None
        self.call: Any = None
        self.tool_def: Any = None
        self.args: Any = None
        self.result: Any = None


class Recorder(AbstractCapability[Any]):
    """Keeps the hook arguments of every turn of a real run."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.run_ctx: Any = None

    async def for_run(self, ctx: Any) -> Recorder:
        self.run_ctx = ctx
        return self

    async def after_model_request(
        self, ctx: Any, *, request_context: Any, response: ModelResponse
    ) -> ModelResponse:
        self.turns.append(Turn(ctx, request_context, response))
        return response

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        turn = self.turns[-1]
        turn.tool_ctx, turn.call, turn.tool_def, turn.args = ctx, call, tool_def, args
        turn.result = await handler(args)
        return turn.result


def capture(loop: asyncio.AbstractEventLoop, calls: int) -> tuple[Any, list[Turn]]:
    recorder = Recorder()
    loop.run_until_complete(make_agent(calls, [recorder]).run(PROMPT, usage_limits=NO_LIMITS))
    return recorder.run_ctx, [t for t in recorder.turns if t.call is not None]


def hook_case(
    loop: asyncio.AbstractEventLoop, run_ctx: Any, capability: Callable[[], Any]
) -> Callable[[list[Turn]], float]:
    async def replay(turns: list[Turn]) -> float:
        bound = await capability().for_run(run_ctx)  # a fresh run per pass
        after, wrap = bound.after_model_request, bound.wrap_tool_execute
        handlers = [_answer(turn.result) for turn in turns]
        start = time.perf_counter()
        for turn, handler in zip(turns, handlers, strict=True):
            await after(turn.ctx, request_context=turn.request_context, response=turn.response)
            await wrap(
                turn.tool_ctx,
                call=turn.call,
                tool_def=turn.tool_def,
                args=turn.args,
                handler=handler,
            )
        return time.perf_counter() - start

    return lambda turns: loop.run_until_complete(replay(turns))


def _answer(result: Any) -> Callable[[Any], Any]:
    async def handler(args: Any) -> Any:
        return result

    return handler


def engine_case(loop: asyncio.AbstractEventLoop) -> Callable[[list[Turn]], float]:
    """The guard alone on the same calls: what any adapter has to pay."""
    guard = lw.LoopGuard(CONFIG)

    async def replay(turns: list[Turn]) -> float:
        calls = [(t.call.args, t.call.tool_call_id, t.result) for t in turns]
        start = time.perf_counter()
        run = guard.run()
        for args, call_id, result in calls:
            await run.abefore_call("poll_status", args, call_id)
            await run.aafter_call("poll_status", args, call_id, result=result)
        elapsed = time.perf_counter() - start
        run.end()
        return elapsed

    return lambda turns: loop.run_until_complete(replay(turns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="tool calls per run")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--hook-calls", type=int, default=300)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    try:
        calls = list(range(args.calls))  # measure() divides each pass by len(calls)
        e2e = measure(
            {
                "bare": (agent_case(loop, args.calls, []), calls),
                "bare2": (agent_case(loop, args.calls, []), calls),
                "noop": (agent_case(loop, args.calls, [NoopCapability()]), calls),
                "guarded": (agent_case(loop, args.calls, [LoopGuardCapability(CONFIG)]), calls),
            },
            args.rounds,
        )
        run_ctx, turns = capture(loop, args.hook_calls)
        hook = measure(
            {
                "noop": (hook_case(loop, run_ctx, NoopCapability), turns),
                "guarded": (hook_case(loop, run_ctx, lambda: LoopGuardCapability(CONFIG)), turns),
                "engine": (engine_case(loop), turns),
            },
            args.rounds,
        )
    finally:
        loop.close()

    print_hook_report(
        title="Pydantic AI agent",
        unit="run",
        calls=args.calls,
        rounds=args.rounds,
        e2e=e2e,
        hook=hook,
        names={
            "adapter": "LoopGuardCapability",
            "noop": "no-op capability",
            "framework": "Pydantic AI's",
            "hook": f"the hooks alone, {len(turns)} real turns "
            "(after_model_request + wrap_tool_execute)",
            "hook_noop": "no-op capability",
            "hook_guarded": "LoopGuardCapability",
            "engine": "abefore_call + aafter_call",
        },
    )
    gc.collect()


if __name__ == "__main__":
    main()
