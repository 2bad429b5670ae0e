"""Shared driver of the adapter benchmarks that time whole framework runs.

A benchmark script supplies ``agent_case(loop, calls, per_turn, guarded)``: one
timed framework run of ``calls`` tool calls (CPU seconds), with or without
loopwarden. This module adds the engine-alone case, interleaves the cases,
prints microseconds per tool call against the target (added <= engine + 20 us),
and with ``--instructions`` counts instructions per call under valgrind.
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
from collections.abc import Callable
from pathlib import Path

import loopwarden as lw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import measure  # a sibling script, not a package

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
CASES = ("bare", "guarded", "engine")

Case = Callable[[list[int]], float]
AgentCase = Callable[[asyncio.AbstractEventLoop, int, int, bool], Case]


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


def _cases(
    agent_case: AgentCase, loop: asyncio.AbstractEventLoop, calls: int, per_turn: int
) -> dict[str, Case]:
    return {
        "bare": agent_case(loop, calls, per_turn, False),
        "guarded": agent_case(loop, calls, per_turn, True),
        "engine": engine_case(calls),
    }


def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


def _count_child(agent_case: AgentCase, calls: int, per_turn: int) -> None:
    """Under callgrind: for each case, one run then two more, each stretch dumped apart.

    Both stretches hold the same control overhead, so their difference is one run.
    """
    loop = asyncio.new_event_loop()
    table = _cases(agent_case, loop, calls, per_turn)
    _callgrind("-i", "on")
    for name in CASES:
        for runs in (1, 2):
            for _ in range(runs):
                table[name]([])
            _callgrind("-d")
    _callgrind("-i", "off")
    loop.close()


def _instructions(script: str, calls: int, per_turn: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                script,
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


def run_benchmark(
    *, script: str, title: str, unit: str, guarded: str, agent_case: AgentCase
) -> None:
    """Parse the command line, run the cases and print the report."""
    parser = argparse.ArgumentParser(description=title)
    parser.add_argument("--calls", type=int, default=50, help=f"tool calls per {unit}")
    parser.add_argument("--per-turn", type=int, default=10, help="parallel tool calls per turn")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions with valgrind"
    )
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Frameworks warn about experimental features they use internally; not our concern here.
    warnings.simplefilter("ignore")
    if args.count_child:
        _count_child(agent_case, args.calls, args.per_turn)
        return

    calls = list(range(args.calls))  # measure() divides each pass by len(calls)
    loop = asyncio.new_event_loop()
    try:
        table = _cases(agent_case, loop, args.calls, args.per_turn)
        results = measure({name: (fn, calls) for name, fn in table.items()}, args.rounds)
    finally:
        loop.close()
    bare, with_guard, engine = results["bare"], results["guarded"], results["engine"]
    added = with_guard - bare
    print(
        f"{title}, {args.calls} tool calls per {unit}, "
        f"{args.per_turn} per turn, best of {args.rounds} (CPU time)"
    )
    print(f"{'case':40} {'us/call':>10}")
    print(f"{'bare agent':40} {bare:10.1f}")
    print(f"{'agent + ' + guarded:40} {with_guard:10.1f}")
    print(f"{'added by the integration':40} {added:10.1f}")
    print(f"{'engine alone (before+after_call)':40} {engine:10.1f}")
    verdict = "met" if added <= engine + 20 else "MISSED"
    print(f"target: added <= engine + 20 = {engine + 20:.1f} us -> {verdict}")

    if args.instructions:
        counts = _instructions(script, args.calls, args.per_turn)
        per_us = counts["engine"] / engine  # this machine's rate, from the timed engine case
        added_i = counts["guarded"] - counts["bare"]
        budget = counts["engine"] + 20 * per_us
        print(f"\ninstructions per call (valgrind), {per_us:.0f} instructions ~ 1 us here")
        print(f"{'bare agent':40} {counts['bare']:12,.0f}")
        print(f"{'agent + ' + guarded:40} {counts['guarded']:12,.0f}")
        print(f"{'added by the integration':40} {added_i:12,.0f}  (~{added_i / per_us:.1f} us)")
        print(f"{'engine alone (before+after_call)':40} {counts['engine']:12,.0f}")
        verdict = "met" if added_i <= budget else "MISSED"
        print(f"target: added <= engine + 20 us = {budget:,.0f} instructions -> {verdict}")


def print_hook_report(
    *,
    title: str,
    unit: str,
    calls: int,
    rounds: int,
    e2e: dict[str, float],
    hook: dict[str, float],
    names: dict[str, str],
) -> None:
    """The two-part report of the benchmarks that also time the hook on its own.

    ``e2e`` holds whole runs (bare, bare2, noop, guarded); ``hook`` the hook
    alone on captured requests (noop, guarded, engine). ``names`` labels the
    rows: ``adapter``, ``noop``, ``framework``, ``hook``, ``hook_noop``,
    ``hook_guarded`` and ``engine``.
    """
    row = "{:48} {:10.1f}"
    print(f"{title}, best of {rounds} rounds, us per tool call")
    print(f"1. end to end, CPU time, {calls} tool call(s) per {unit}")
    print(row.format("bare agent", e2e["bare"]))
    print(row.format("bare agent again (noise)", e2e["bare2"]))
    print(row.format(f"agent + {names['noop']} (same hooks)", e2e["noop"]))
    print(row.format(f"agent + {names['adapter']}", e2e["guarded"]))
    print(row.format("added vs bare agent", e2e["guarded"] - e2e["bare"]))
    print(
        row.format(f"  of which {names['framework']} own hook machinery", e2e["noop"] - e2e["bare"])
    )
    print(f"2. {names['hook']}")
    print(row.format(names["hook_noop"], hook["noop"]))
    print(row.format(names["hook_guarded"], hook["guarded"]))
    own = hook["guarded"] - hook["noop"]
    print(row.format(f"added by {names['adapter']}", own))
    print(row.format(f"engine alone ({names['engine']})", hook["engine"]))
    verdict = "met" if own <= hook["engine"] + 20 else "MISSED"
    print(f"target: added <= engine + 20 = {hook['engine'] + 20:.1f} us -> {verdict}")
