"""Added latency per tool call of the CrewAI integration.

A CrewAI ``Agent`` with its real OpenAI client, against a scripted
chat-completions model on loopback (``tests/integrations/_chat_server.py``),
calls ``poll_status`` with a new job id every time (so nothing is ever warned
or blocked), one call per model response.

1. End to end: ``agent.kickoff`` bare; with hooks that are registered where
   :class:`LoopGuardHooks` registers them but do nothing (what CrewAI itself
   charges for them); and with :class:`LoopGuardHooks`. Process CPU time of
   whole kickoffs, the loopback server's thread included: CrewAI spends
   milliseconds per tool call, so these figures only bound the integration
   (the bare agent is measured twice to show the noise).
2. The hooks alone: the real ``LLMCallHookContext`` and ``ToolCallHookContext``
   objects of such a kickoff (each model call's context with the agent's
   messages as they were when its tool ran), replayed through
   ``before_llm_call`` + ``before_tool_call`` + ``after_tool_call`` of
   LoopGuardHooks and of no-op hooks; and the engine's own cost
   (``RunGuard.before_call`` + ``after_call`` on the same params and results).
   Target: LoopGuardHooks - no-op <= engine + 20 us.

Cases alternate within each round and the best round is kept
(``bench_engine.measure``). CrewAI's console panels are turned off for all
cases. Needs the ``crewai`` extra in an environment of
its own (see docs/integrations-crewai.md).

Run: ``python benchmarks/bench_crewai.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
for key, value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}.items():
    os.environ.setdefault(key, value)
# Set before CrewAI is imported: no telemetry attempts; its own deprecation warnings hidden.
warnings.simplefilter("ignore")

from _adapter_bench import CONFIG, print_hook_report  # noqa: E402 - sibling scripts, not a package
from bench_engine import measure  # noqa: E402
from crewai import LLM, Agent  # noqa: E402
from crewai.events.event_listener import EventListener  # noqa: E402
from crewai.hooks import (  # noqa: E402
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.tools import tool  # noqa: E402
from tests.integrations._chat_server import ChatServer  # noqa: E402

import loopwarden as lw  # noqa: E402
from loopwarden.integrations.crewai import LoopGuardHooks  # noqa: E402

PROMPT = "Are the jobs done?"


def poll_status(job: str) -> str:
    """Check whether a job has finished."""
    return "pending"


def scripted(calls: int) -> Callable[[dict[str, Any]], Any]:
    """One new ``poll_status`` call per model response, ``calls`` in all, then text."""

    def reply(body: dict[str, Any]) -> Any:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return "done" if done >= calls else [("poll_status", {"job": f"job-{done}"}, f"c{done}")]

    return reply


class Noop:
    """The hooks LoopGuardHooks registers, doing nothing: CrewAI's own cost of them."""

    def before_llm_call(self, context: Any) -> None:
        return None

    def before_tool_call(self, context: Any) -> bool | None:
        return None

    def after_tool_call(self, context: Any) -> str | None:
        return None

    def install(self) -> Noop:
        register_before_llm_call_hook(self.before_llm_call)
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        return self

    def uninstall(self) -> None:
        unregister_before_llm_call_hook(self.before_llm_call)
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)


def agent_case(server: ChatServer, hooks: Any) -> Callable[[list[int]], float]:
    agent = Agent(
        role="poller",
        goal="Find out whether the jobs are done",
        backstory="You check jobs.",
        tools=[tool(poll_status)],
        llm=LLM(model="openai/gpt-4o-mini", base_url=server.url, api_key="test"),
        max_iter=1000,
    )

    def one_kickoff(_: list[int]) -> float:
        if hooks is not None:
            hooks.install()
        try:
            start = time.process_time()
            agent.kickoff(PROMPT)
            return time.process_time() - start
        finally:
            if hooks is not None:
                hooks.uninstall()

    one_kickoff([])  # warm up: imports, caches
    return one_kickoff


class Recorder(Noop):
    """Keeps the hook contexts of a real kickoff."""

    def __init__(self) -> None:
        self.llm: Any = None
        self.turns: list[tuple[Any, Any, Any]] = []  # (llm context, before, after)

    def before_llm_call(self, context: Any) -> None:
        if context.executor is not None:
            self.llm = context

    def before_tool_call(self, context: Any) -> None:
        llm = copy.copy(self.llm)
        llm.messages = list(self.llm.messages)  # the history as this call saw it
        self.turns.append((llm, context, None))

    def after_tool_call(self, context: Any) -> None:
        llm, before, _ = self.turns[-1]
        self.turns[-1] = (llm, before, context)


def capture(calls: int) -> list[tuple[Any, Any, Any]]:
    recorder = Recorder()
    with ChatServer(scripted(calls)) as server:
        kickoff = agent_case(server, recorder)  # installs around each kickoff, warms up once
        recorder.turns.clear()
        kickoff([])
    return recorder.turns


def hook_case(make: Callable[[], Any]) -> Callable[[list[tuple[Any, Any, Any]]], float]:
    def replay(turns: list[tuple[Any, Any, Any]]) -> float:
        hooks = make()  # fresh runs per pass
        start = time.perf_counter()
        for llm, before, after in turns:
            hooks.before_llm_call(llm)
            hooks.before_tool_call(before)
            hooks.after_tool_call(after)
        elapsed = time.perf_counter() - start
        if isinstance(hooks, LoopGuardHooks):
            hooks.uninstall()  # ends the runs (not installed: nothing else to remove)
        return elapsed

    return replay


def engine_case() -> Callable[[list[tuple[Any, Any, Any]]], float]:
    """The guard alone on the same calls: what any adapter has to pay."""
    guard = lw.LoopGuard(CONFIG)

    def replay(turns: list[tuple[Any, Any, Any]]) -> float:
        calls = [
            (dict(b.tool_input), f"c{n}", a.raw_tool_result) for n, (_, b, a) in enumerate(turns)
        ]
        start = time.perf_counter()
        run = guard.run()
        for args, call_id, result in calls:
            run.before_call("poll_status", args, call_id)
            run.after_call("poll_status", args, call_id, result=result)
        run.end()
        return time.perf_counter() - start

    return replay


def main() -> None:
    # CrewAI's console panels (printed on its event threads whatever the agent's verbose
    # says) cost every case the same: off, they no longer swamp the figures and the output.
    EventListener().formatter.verbose = False
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="tool calls per kickoff")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hook-rounds", type=int, default=30)
    parser.add_argument("--hook-calls", type=int, default=200)
    args = parser.parse_args()
    calls = list(range(args.calls))  # measure() divides each pass by len(calls)
    with ChatServer(scripted(args.calls)) as server:
        e2e = measure(
            {
                "bare": (agent_case(server, None), calls),
                "bare2": (agent_case(server, None), calls),
                "noop": (agent_case(server, Noop()), calls),
                "guarded": (agent_case(server, LoopGuardHooks(CONFIG)), calls),
            },
            args.rounds,
        )
    turns = capture(args.hook_calls)
    hook = measure(
        {
            "noop": (hook_case(Noop), turns),
            "guarded": (hook_case(lambda: LoopGuardHooks(CONFIG)), turns),
            "engine": (engine_case(), turns),
        },
        args.hook_rounds,
    )
    print_hook_report(
        title="CrewAI Agent.kickoff",
        unit="kickoff",
        calls=args.calls,
        rounds=args.rounds,
        e2e=e2e,
        hook=hook,
        names={
            "adapter": "LoopGuardHooks",
            "noop": "no-op hooks",
            "framework": "CrewAI's",
            "hook": f"the hooks alone, {len(turns)} real tool calls "
            "(before_llm_call + before_tool_call + after_tool_call)",
            "hook_noop": "no-op hooks",
            "hook_guarded": "LoopGuardHooks",
            "engine": "before_call + after_call",
        },
    )


if __name__ == "__main__":
    main()
