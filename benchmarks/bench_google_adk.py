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

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.genai import types

import loopwarden as lw
from loopwarden.integrations.google_adk import LoopGuardPlugin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import measure  # a sibling script, not a package

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
CASES = ("bare", "guarded", "engine")

Case = Callable[[list[int]], float]


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


def engine_case(calls: int) -> Case:
    """The guard alone on the same calls: what any adapter has to pay."""
    guard = lw.LoopGuard(CONFIG)
    params = [{"job": f"job-{n}"} for n in range(calls)]
    ids = [f"c{n}" for n in range(calls)]

    def one_run(_: list[int]) -> float:
        start = time.process_time()
        run = guard.run()
        for call_id, args in zip(ids, params, strict=True):
            run.before_call("poll_status", args, call_id)
            run.after_call("poll_status", args, call_id, result="pending")
        run.end()
        return time.process_time() - start

    one_run([])
    return one_run


def cases(loop: asyncio.AbstractEventLoop, calls: int, per_turn: int) -> dict[str, Case]:
    return {
        "bare": agent_case(loop, calls, per_turn, guarded=False),
        "guarded": agent_case(loop, calls, per_turn, guarded=True),
        "engine": engine_case(calls),
    }


# -- instruction counts ---------------------------------------------------------------
def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


def count_child(calls: int, per_turn: int) -> None:
    """Under callgrind: for each case, one run then two more, each stretch dumped apart.

    Both stretches hold the same control overhead, so their difference is one run.
    """
    loop = asyncio.new_event_loop()
    table = cases(loop, calls, per_turn)
    _callgrind("-i", "on")
    for name in CASES:
        for runs in (1, 2):
            for _ in range(runs):
                table[name]([])
            _callgrind("-d")
    _callgrind("-i", "off")
    loop.close()


def instructions(calls: int, per_turn: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--count-child",
                "--calls",
                str(calls),
                "--per-turn",
                str(per_turn),
            ],
            check=True,
            capture_output=True,
        )
        totals = []
        for n in range(1, 2 * len(CASES) + 1):
            text = Path(f"{out}.{n}").read_text()
            line = next(x for x in text.splitlines() if x.startswith("summary:"))
            totals.append(int(line.split()[1]))
    return {name: (totals[2 * i + 1] - totals[2 * i]) / calls for i, name in enumerate(CASES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="tool calls per invocation")
    parser.add_argument("--per-turn", type=int, default=10, help="parallel tool calls per turn")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions with valgrind"
    )
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # ADK warns about experimental features it uses internally; not our concern here.
    warnings.simplefilter("ignore")
    if args.count_child:
        count_child(args.calls, args.per_turn)
        return

    calls = list(range(args.calls))  # measure() divides each pass by len(calls)
    loop = asyncio.new_event_loop()
    try:
        table = cases(loop, args.calls, args.per_turn)
        results = measure({name: (fn, calls) for name, fn in table.items()}, args.rounds)
    finally:
        loop.close()
    bare, guarded, engine = results["bare"], results["guarded"], results["engine"]
    added = guarded - bare
    print(
        f"Google ADK InMemoryRunner.run_async, {args.calls} tool calls per invocation, "
        f"{args.per_turn} per turn, best of {args.rounds} (CPU time)"
    )
    print(f"{'case':40} {'us/call':>10}")
    print(f"{'bare agent':40} {bare:10.1f}")
    print(f"{'agent + LoopGuardPlugin':40} {guarded:10.1f}")
    print(f"{'added by the plugin':40} {added:10.1f}")
    print(f"{'engine alone (before+after_call)':40} {engine:10.1f}")
    verdict = "met" if added <= engine + 20 else "MISSED"
    print(f"target: added <= engine + 20 = {engine + 20:.1f} us -> {verdict}")

    if args.instructions:
        counts = instructions(args.calls, args.per_turn)
        per_us = counts["engine"] / engine  # this machine's rate, from the timed engine case
        added_i = counts["guarded"] - counts["bare"]
        budget = counts["engine"] + 20 * per_us
        print(f"\ninstructions per call (valgrind), {per_us:.0f} instructions ~ 1 us here")
        print(f"{'bare agent':40} {counts['bare']:12,.0f}")
        print(f"{'agent + LoopGuardPlugin':40} {counts['guarded']:12,.0f}")
        print(f"{'added by the plugin':40} {added_i:12,.0f}  (~{added_i / per_us:.1f} us)")
        print(f"{'engine alone (before+after_call)':40} {counts['engine']:12,.0f}")
        verdict = "met" if added_i <= budget else "MISSED"
        print(f"target: added <= engine + 20 us = {budget:,.0f} instructions -> {verdict}")


if __name__ == "__main__":
    main()
