"""Added latency per tool call of the AG2 integration.

An AG2 ``Agent`` driven by AG2's own scripted model (``ag2.testing.TestConfig``)
calls ``poll_status`` with a new job id every time (so nothing is ever warned
or blocked), ``--per-turn`` calls per model response.

1. End to end: ``agent.ask`` bare; with a middleware that has the same hooks
   as :class:`LoopGuardMiddleware` but does nothing (what AG2 itself charges
   for them); and with :class:`LoopGuardMiddleware`. Process CPU time of whole
   turns. AG2 spends about a millisecond per tool call and its runs vary by
   more than the middleware costs, so these figures only bound it (the bare
   agent is measured twice to show the noise).
2. The middleware alone: the real ``Context``, model responses, tool calls and
   tool results of such a turn, replayed through ``on_turn`` (its per-turn
   stream subscriptions included), ``on_llm_call`` and ``on_tool_execution``
   of LoopGuardMiddleware and of the no-op middleware; and the engine's own
   cost (``RunGuard.before_call`` + ``after_call`` on the same params and
   results). Target: LoopGuardMiddleware - no-op <= engine + 20 us.

Cases alternate within each round and the best round is kept
(``bench_engine.measure``).

Run: ``python benchmarks/bench_ag2.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ag2 import Agent, tool
from ag2.events import BaseEvent, ModelResponse, ToolCallEvent
from ag2.middleware import BaseMiddleware
from ag2.testing import TestConfig

import loopwarden as lw
from loopwarden.integrations.ag2 import LoopGuardMiddleware

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import CONFIG, print_hook_report  # sibling scripts, not a package
from bench_engine import measure

PROMPT = "Are the jobs done?"


@tool
async def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


def script(calls: int, per_turn: int) -> TestConfig:
    """``per_turn`` new ``poll_status`` calls per model response, ``calls`` in all, then text."""
    steps: list[Any] = []
    for first in range(0, calls, per_turn):
        steps.append(
            [
                ToolCallEvent(
                    name="poll_status", arguments=json.dumps({"job": f"job-{n}"}), id=f"c{n}"
                )
                for n in range(first, min(first + per_turn, calls))
            ]
        )
    steps.append("done")
    return TestConfig(*steps, raise_tool_errors=False)


class Noop(BaseMiddleware):
    """The hooks LoopGuardMiddleware uses, doing nothing: AG2's own cost of them."""

    async def on_turn(self, call_next: Any, event: BaseEvent, context: Any) -> Any:
        return await call_next(event, context)

    async def on_llm_call(self, call_next: Any, events: Any, context: Any) -> Any:
        return await call_next(events, context)

    async def on_tool_execution(self, call_next: Any, event: Any, context: Any) -> Any:
        return await call_next(event, context)


def agent_case(
    loop: asyncio.AbstractEventLoop, calls: int, per_turn: int, middleware: list[Any]
) -> Callable[[list[int]], float]:
    agent = Agent(
        "poller", config=script(calls, per_turn), tools=[poll_status], middleware=middleware
    )

    def one_turn(_: list[int]) -> float:
        start = time.process_time()
        loop.run_until_complete(agent.ask(PROMPT))
        return time.process_time() - start

    one_turn([])  # warm up: imports, caches
    return one_turn


class Recorder(BaseMiddleware):
    """Keeps what the hooks saw in a real turn: the model responses and the tool calls."""

    seen: ClassVar[dict[str, Any]] = {}

    async def on_turn(self, call_next: Any, event: BaseEvent, context: Any) -> Any:
        self.seen.update(event=event, context=context, steps=[])
        return await call_next(event, context)

    async def on_llm_call(self, call_next: Any, events: Any, context: Any) -> Any:
        response = await call_next(events, context)
        self.seen["steps"].append((events, response, []))
        return response

    async def on_tool_execution(self, call_next: Any, event: Any, context: Any) -> Any:
        result = await call_next(event, context)
        self.seen["steps"][-1][2].append((event, result))
        return result


def capture(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int) -> dict[str, Any]:
    Recorder.seen = {}
    agent = Agent(
        "poller", config=script(calls, per_turn), tools=[poll_status], middleware=[Recorder]
    )
    loop.run_until_complete(agent.ask(PROMPT))
    seen = Recorder.seen
    seen["steps"] = [step for step in seen["steps"] if step[2]]  # model turns with tool calls
    return seen


def hook_case(
    loop: asyncio.AbstractEventLoop, factory: Callable[[Any, Any], BaseMiddleware]
) -> Callable[[dict[str, Any]], float]:
    async def replay(seen: dict[str, Any]) -> float:
        event, context, steps = seen["event"], seen["context"], seen["steps"]
        start = time.perf_counter()
        middleware = factory(event, context)  # a fresh turn per pass

        async def turn(event: Any, context: Any) -> Any:
            for events, response, calls in steps:

                async def model(events: Any, context: Any, response: Any = response) -> Any:
                    return response

                await middleware.on_llm_call(model, events, context)
                for call, result in calls:

                    async def execute(call: Any, context: Any, result: Any = result) -> Any:
                        return result

                    await middleware.on_tool_execution(execute, call, context)
            return ModelResponse()

        await middleware.on_turn(turn, event, context)
        return time.perf_counter() - start

    return lambda seen: loop.run_until_complete(replay(seen))


def engine_case() -> Callable[[dict[str, Any]], float]:
    """The guard alone on the same calls: what any adapter has to pay."""
    guard = lw.LoopGuard(CONFIG)

    def replay(seen: dict[str, Any]) -> float:
        calls = [
            (json.loads(call.arguments), call.id, result.result.parts[0].content)
            for _, _, step_calls in seen["steps"]
            for call, result in step_calls
        ]
        start = time.perf_counter()
        run = guard.run()
        for args, call_id, result in calls:
            run.before_call("poll_status", args, call_id)
            run.after_call("poll_status", args, call_id, result=result)
        run.end()
        return time.perf_counter() - start

    return replay


class Sized(dict[str, Any]):
    """A captured turn that ``measure`` divides by its number of tool calls."""

    def __len__(self) -> int:
        return sum(len(step[2]) for step in self["steps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="tool calls per turn")
    parser.add_argument("--per-turn", type=int, default=10, help="tool calls per model response")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--hook-calls", type=int, default=300)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    loop = asyncio.new_event_loop()
    try:
        calls = list(range(args.calls))  # measure() divides each pass by len(calls)
        guard = LoopGuardMiddleware(CONFIG)
        e2e = measure(
            {
                "bare": (agent_case(loop, args.calls, args.per_turn, []), calls),
                "bare2": (agent_case(loop, args.calls, args.per_turn, []), calls),
                "noop": (agent_case(loop, args.calls, args.per_turn, [Noop]), calls),
                "guarded": (agent_case(loop, args.calls, args.per_turn, [guard]), calls),
            },
            args.rounds,
        )
        seen = Sized(capture(loop, args.hook_calls, args.per_turn))
        hook = measure(
            {
                "noop": (hook_case(loop, Noop), seen),
                "guarded": (hook_case(loop, LoopGuardMiddleware(CONFIG)), seen),
                "engine": (engine_case(), seen),
            },
            args.rounds,
        )
    finally:
        loop.close()

    print_hook_report(
        title="AG2 Agent.ask",
        unit="turn",
        calls=args.calls,
        rounds=args.rounds,
        e2e=e2e,
        hook=hook,
        names={
            "adapter": "LoopGuardMiddleware",
            "noop": "no-op middleware",
            "framework": "AG2's",
            "hook": f"the middleware alone, {len(seen)} real tool calls, {args.per_turn} per "
            "model response (on_turn + on_llm_call + on_tool_execution)",
            "hook_noop": "no-op middleware",
            "hook_guarded": "LoopGuardMiddleware",
            "engine": "before_call + after_call",
        },
    )


if __name__ == "__main__":
    main()
