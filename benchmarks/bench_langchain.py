"""Added latency per tool call of the LangChain middleware.

A ``create_agent`` agent whose scripted chat model calls one tool per turn,
with different arguments every time (so nothing is ever warned or blocked).

1. End to end: the agent runs bare; with a middleware that has the same hooks
   as :class:`LoopGuardMiddleware` but does nothing (what LangChain itself
   charges for those interception points: every ``wrap_*`` hook runs inside a
   LangSmith ``traceable`` span, ``wrap_model_call`` (the last answer after a
   stop) once per model call, and ``before_agent``/``after_agent`` are graph
   nodes); and with :class:`LoopGuardMiddleware`. Process CPU time (all
   threads: LangGraph runs tools in a thread pool), whole invocations, so the
   once-per-invocation work is spread over the calls (``--calls 1`` shows it
   undivided). A graph step costs milliseconds, so these figures are only good
   to a few percent; the bare agent is measured twice to show the noise.
2. The hook alone: the real ``ToolCallRequest`` objects of such a run, replayed
   through ``LoopGuardMiddleware.wrap_tool_call`` and through the no-op hook,
   the handler returning the tool's real ``ToolMessage``; and the engine's own
   cost (``RunGuard.before_call`` + ``after_call`` on the same params and
   results). Target: LoopGuardMiddleware - no-op <= engine + 20 us.

Cases alternate within each round and the best round is kept
(``bench_engine.measure``).

``--frames`` instead counts the loopwarden frames (Python functions entered in
the package) and store transactions of one allowed and one blocked tool call
through ``LoopGuardMiddleware.wrap_tool_call``, on the memory and the SQLite
store (``bench_engine.count_frames``).

Run: ``python benchmarks/bench_langchain.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt.tool_node import ToolCallRequest

import loopwarden as lw
from loopwarden.integrations.langchain import RUN_KEY, LoopGuardMiddleware, LoopGuardState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_bench import print_hook_report  # sibling scripts, not a package
from bench_engine import count_frames, measure

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}


class ScriptedChatModel(BaseChatModel):
    """Calls ``poll_status`` with a new job id each turn, ``calls`` times, then answers."""

    calls: int

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done >= self.calls:
            reply = AIMessage("done")
        else:
            call = {"name": "poll_status", "args": {"job": f"job-{done}"}, "id": f"c{done}"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self


@tool
def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


class NoopMiddleware(AgentMiddleware[LoopGuardState, Any, Any]):
    """The hooks LoopGuardMiddleware uses, doing nothing: LangChain's own cost of them."""

    state_schema = LoopGuardState

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def agent_case(calls: int, middleware: list[Any]) -> Callable[[list[int]], float]:
    agent = create_agent(ScriptedChatModel(calls=calls), [poll_status], middleware=middleware)
    inputs = {"messages": [{"role": "user", "content": "Are the jobs done?"}]}
    agent.invoke(inputs)  # warm up: compiled graph, imports, caches

    def one_invocation(_: list[int]) -> float:
        start = time.process_time()
        agent.invoke(inputs)
        return time.process_time() - start

    return one_invocation


Captured = list[tuple[ToolCallRequest, ToolMessage]]


class Recorder(AgentMiddleware[LoopGuardState, Any, Any]):
    """Keeps every tool call's request and answer of a real run."""

    state_schema = LoopGuardState

    def __init__(self) -> None:
        self.calls: Captured = []

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        # A run id in the state, as LoopGuardMiddleware.before_agent would have put there.
        self.calls.append((request.override(state={**request.state, RUN_KEY: "bench"}), result))
        return result


def capture(calls: int) -> Captured:
    recorder = Recorder()
    agent = create_agent(ScriptedChatModel(calls=calls), [poll_status], middleware=[recorder])
    agent.invoke({"messages": [{"role": "user", "content": "Are the jobs done?"}]})
    return recorder.calls


def hook_case(guarded: bool) -> Callable[[Captured], float]:
    def one_run(captured: Captured) -> float:
        # A fresh guard per pass: every pass is a new run.
        middleware = LoopGuardMiddleware(CONFIG) if guarded else NoopMiddleware()
        hook = middleware.wrap_tool_call
        handlers = [lambda _, answer=answer: answer for _, answer in captured]
        start = time.perf_counter()
        for (request, _), handler in zip(captured, handlers, strict=True):
            hook(request, handler)
        return time.perf_counter() - start

    return one_run


def engine_case(captured: Captured) -> float:
    """The guard alone on the same calls: what any adapter has to pay."""
    guard = lw.LoopGuard(CONFIG)
    calls = [(r.tool_call["args"], r.tool_call["id"], a.content) for r, a in captured]
    start = time.perf_counter()
    run = guard.run()
    for args, call_id, content in calls:
        run.before_call("poll_status", args, call_id)
        run.after_call("poll_status", args, call_id, result=content)
    elapsed = time.perf_counter() - start
    run.end()
    return elapsed


def _frames_on(url: str, captured: Captured) -> tuple[tuple[int, int], tuple[int, int]]:
    small = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 3,
                "criticalThreshold": 5,
                "globalCircuitBreakerThreshold": 50,
            }
        }
    }
    middleware = LoopGuardMiddleware(small, store=url)
    hook = middleware.wrap_tool_call
    for request, answer in captured[:10]:  # a run in progress, not a fresh one
        hook(request, lambda _, answer=answer: answer)
    request, answer = captured[11]
    ok = count_frames(lambda: hook(request, lambda _: answer))
    same = captured[10][0]
    repeats = [
        same.override(tool_call={**same.tool_call, "id": f"same{n}"})  # type: ignore[typeddict-item]
        for n in range(7)
    ]
    for repeat in repeats[:6]:  # the same call and result until it is blocked
        hook(repeat, lambda _: answer)
    blocked: list[Any] = []
    no = count_frames(lambda: blocked.append(hook(repeats[6], lambda _: answer)))
    assert isinstance(blocked[0], ToolMessage) and blocked[0].status == "error"
    middleware.guard.close()
    return ok, no


def frames() -> None:
    """Frames and store transactions of one allowed and one blocked guarded tool call."""
    logging.disable(logging.CRITICAL)  # the blocked call logs; that is not what is counted
    captured = capture(20)
    print(f"{'store':8} {'allowed call':>22} {'blocked call':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (("memory", "memory://"), ("sqlite", f"sqlite://{tmp}/lw.db")):
            ok, no = _frames_on(url, captured)
            row = "{:8} {:>7} frames, {} tx {:>10} frames, {} tx"
            print(row.format(name, ok[0], ok[1], no[0], no[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="tool calls per invocation")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--hook-calls", type=int, default=300)
    parser.add_argument(
        "--frames", action="store_true", help="count loopwarden frames per call instead"
    )
    args = parser.parse_args()
    if args.frames:
        frames()
        return

    calls = list(range(args.calls))  # measure() divides each pass by len(calls)
    e2e = measure(
        {
            "bare": (agent_case(args.calls, []), calls),
            "bare2": (agent_case(args.calls, []), calls),
            "noop": (agent_case(args.calls, [NoopMiddleware()]), calls),
            "guarded": (agent_case(args.calls, [LoopGuardMiddleware(CONFIG)]), calls),
        },
        args.rounds,
    )
    captured = capture(args.hook_calls)
    hook = measure(
        {
            "noop": (hook_case(guarded=False), captured),
            "guarded": (hook_case(guarded=True), captured),
            "engine": (engine_case, captured),
        },
        args.rounds,
    )

    print_hook_report(
        title="LangChain create_agent",
        unit="invocation",
        calls=args.calls,
        rounds=args.rounds,
        e2e=e2e,
        hook=hook,
        names={
            "adapter": "LoopGuardMiddleware",
            "noop": "no-op middleware",
            "framework": "LangChain's",
            "hook": f"the wrap_tool_call hook alone, {len(captured)} real requests",
            "hook_noop": "no-op hook",
            "hook_guarded": "LoopGuardMiddleware.wrap_tool_call",
            "engine": "before_call + after_call",
        },
    )
    gc.collect()


if __name__ == "__main__":
    main()
