"""Per-call cost of telemetry through the wired guard: off, and on with the real OpenTelemetry SDK.

Cases, each over the same tool calls (``--calls`` per pass, best of ``--rounds``):

* ``off`` — ``LoopGuard(config)``: telemetry unset, runs are plain ``RunGuard``s;
* ``on``  — ``LoopGuard(config, telemetry=Telemetry(meter_provider=...))``: the
  driver's ``TracedRun`` counts and times every call and puts each event on
  the current span, with an SDK ``TracerProvider`` whose exporter drops
  everything and an SDK ``MeterProvider`` whose reader is never collected.

Every case runs each call inside a recording tool span (as an instrumented
framework does), so the difference is loopwarden's own work.

Two workloads: ``progress`` (distinct calls, every decision is ``allow``) and
``stuck`` (the same call over and over: warnings, blocks and a stop every 8
calls, each with a span event and detection counters).

Run: ``python benchmarks/bench_telemetry.py [--instructions]`` (needs the
OpenTelemetry SDK; ``--instructions`` counts instructions with valgrind).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import context, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import loopwarden as lw
from loopwarden.telemetry import Telemetry
from loopwarden.testing import SMALL_THRESHOLDS

CONFIG = SMALL_THRESHOLDS  # warn at 3, block at 5, stop at 7
CASES = ("off", "on")
WORKLOADS = ("progress", "stuck")


class DropExporter(SpanExporter):
    """The no-op exporter: spans are built and handed over, then dropped."""

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def calls_for(workload: str, n: int) -> list[tuple[str, dict[str, Any], Any]]:
    if workload == "progress":
        return [
            ("read", {"path": f"/src/m{i}.py", "lines": 120}, {"text": f"ok {i}"}) for i in range(n)
        ]
    return [("poll_status", {"job": "42"}, {"status": "pending"}) for _ in range(n)]


def make_case(case: str, workload: str, n: int) -> Callable[[], float]:
    """One timed pass over ``n`` calls through fresh runs; returns the seconds spent."""
    calls = calls_for(workload, n)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    tracer = provider.get_tracer("bench")
    telemetry = None
    if case == "on":
        telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
    guard = lw.LoopGuard(CONFIG, agent_id="bench", telemetry=telemetry)
    clock = time.perf_counter

    def one_pass() -> float:
        run = guard.run()
        spent = 0.0
        for i, (tool, params, result) in enumerate(calls):
            span = tracer.start_span("execute_tool")
            ctx = context.attach(trace.set_span_in_context(span))
            start = clock()
            try:
                decision = run.before_call(tool, params, f"c{i}")
            except lw.LoopAbort:
                run = guard.run()
            else:
                if not decision.blocked:
                    run.after_call(tool, params, f"c{i}", result=result)
            spent += clock() - start
            context.detach(ctx)
            span.end()
        return spent

    return one_pass


def measure(rounds: int, n: int) -> dict[tuple[str, str], float]:
    """Best microseconds per call of each case, rounds interleaved so drift hits all alike."""
    table = {(w, c): make_case(c, w, n) for w in WORKLOADS for c in CASES}
    best = dict.fromkeys(table, float("inf"))
    for fn in table.values():
        fn()  # warm-up
    for _ in range(rounds):
        for key, fn in table.items():
            gc.collect()
            best[key] = min(best[key], fn() / n * 1e6)
    return best


def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


def count_child(n: int) -> None:
    """Under callgrind: per case one pass, then two passes, each dumped apart."""
    table = {(w, c): make_case(c, w, n) for w in WORKLOADS for c in CASES}
    for fn in table.values():
        fn()
    _callgrind("-i", "on")
    for fn in table.values():
        for passes in (1, 2):
            for _ in range(passes):
                fn()
            _callgrind("-d")
    _callgrind("-i", "off")


def instructions(n: int) -> dict[tuple[str, str], float]:
    keys = [(w, c) for w in WORKLOADS for c in CASES]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={out}", sys.executable, __file__,
                "--count-child", "--calls", str(n),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        totals = []
        for i in range(1, 2 * len(keys) + 1):
            text = Path(f"{out}.{i}").read_text()
            line = next(x for x in text.splitlines() if x.startswith("summary:"))
            totals.append(int(line.split()[1]))
    return {key: (totals[2 * i + 1] - totals[2 * i]) / n for i, key in enumerate(keys)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_child:
        count_child(args.calls)
        return
    best = measure(args.rounds, args.calls)
    print(f"per tool call (before_call + after_call), best of {args.rounds} x {args.calls} calls")
    print(f"{'workload':<10} {'off':>9} {'on':>9} {'on - off':>9}")
    for w in WORKLOADS:
        off, on = (best[(w, c)] for c in CASES)
        print(f"{w:<10} {off:8.2f}us {on:8.2f}us {on - off:+8.2f}us")
    if args.instructions:
        counts = instructions(min(args.calls, 200))
        print("\ninstructions per tool call (valgrind callgrind)")
        for w in WORKLOADS:
            off, on = (counts[(w, c)] for c in CASES)
            print(f"{w:<10} off {off:9.0f}  on {on:9.0f} ({on - off:+.0f})")


if __name__ == "__main__":
    main()
