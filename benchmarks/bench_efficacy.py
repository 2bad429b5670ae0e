"""How well the runtime guard catches real loops: a replay of real recorded runs.

Every run of ``../shared/realdata`` (see its README) is replayed through
:class:`loopwarden.LoopGuard` as a live agent would meet it: each recorded call
is asked with ``before_call``; a blocked call is not run (its recorded result is
never seen) and the run goes on with the next recorded call, as a model that
ignores the block would; after a stop nothing more is asked.

Setups, each over the same runs:

* ``today``: the guard with ``enabled: true`` and the rules of issue 9 off
  (``volatileCounters``, ``consecutiveRepeat``, ``cycle``, ``failureStreak``: false),
  OpenClaw's rules alone;
* ``defaults``: ``enabled: true`` and nothing else, so the issue 9 rules are on
  (volatile-counter masking, consecutive repeats, cycles, failure streaks);
* the defaults with each new rule switched off in turn;
* ``plain 5``: only the rule "stop the run at the 5th identical call in a row".

Every guard setup is the real :class:`loopwarden.LoopGuard` driven through
``before_call`` / ``after_call`` with the recorded params and results (a
:class:`~loopwarden.testing.FakeClock` pins time: the recordings hold no
durations, so no call looks like a wait).

Printed: visible loops (>= 10 identical calls in a row or an A,B alternation
>= 10), cycles (period 2-5, >= 10 calls) and failure streaks (>= 10 failures of
one tool in a row): flagged / blocked / stopped, the first action's call number
inside the loop, and the share of the loop calls past each loop's 10th that were
prevented (blocked, or never asked after a stop); healthy runs flagged and
blocked, each listed with the call and why; per-call cost with the new rules
on and off (``--cost``; ``--callgrind`` for instruction counts).

Run: ``python benchmarks/bench_efficacy.py [--data DIR] [--prefix dev] [--cost]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from _callgrind import collected
from _realdata import (
    Call,
    Run,
    Span,
    cycle_spans,
    failure_spans,
    load_runs,
    overlaps,
    visible_loops,
)

import loopwarden as lw
from loopwarden.testing import FakeClock

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
RULES = {
    "masking": "volatileCounters",
    "repeat": "consecutiveRepeat",
    "cycle": "cycle",
    "failure": "failureStreak",
}
"""Each new rule and its switch in the ``loopwarden`` block."""


@dataclass(frozen=True)
class Setup:
    name: str
    rules: frozenset[str] = frozenset()
    plain: int = 0
    """``plain`` > 0: only the rule "stop at the N-th identical call in a row", no guard."""

    def config(self) -> dict[str, Any]:
        """The guard's config: ``enabled: true``, the rules not in ``rules`` switched off."""
        off = {RULES[rule]: False for rule in RULES if rule not in self.rules}
        return {**CONFIG, "loopwarden": off} if off else CONFIG

    def guard(self) -> lw.LoopGuard:
        return lw.LoopGuard(self.config(), clock=FakeClock(), run_record=False, telemetry=False)


ALL = frozenset(RULES)


def setups() -> list[Setup]:
    out = [Setup("today (issue 9 rules off)"), Setup("defaults (issue 9 rules on)", ALL)]
    out += [Setup(f"defaults without {rule}", ALL - {rule}) for rule in sorted(RULES)]
    out.append(Setup("plain: stop at 5 identical in a row", plain=5))
    return out


@dataclass
class Act:
    """What the guard did with one recorded call."""

    action: str
    """``allow``, ``warn``, ``block``, ``stop`` (blocked and stopped here) or ``unasked``."""
    detector: str = ""
    message: str = ""


class Agent:
    """One run replayed through a guard."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def before(self, call: Call) -> Act:
        raise NotImplementedError

    def after(self, call: Call) -> None:
        raise NotImplementedError

    def compaction(self) -> None:
        return None


def result_and_error(call: Call) -> tuple[Any, Any]:
    """The recorded answer as ``after_call`` takes it (``None``: no answer recorded)."""
    if call.result is None and not call.error:
        return lw.hashing.MISSING, lw.hashing.MISSING
    if call.error:
        return lw.hashing.MISSING, call.text() or "error"
    return call.result, lw.hashing.MISSING


class Guarded(Agent):
    """The runtime guard through its public API, as a live agent meets it."""

    def __init__(self, run: Run, guard: lw.LoopGuard) -> None:
        super().__init__(run)
        self.guard = guard.run(run.name)

    def before(self, call: Call) -> Act:
        try:
            decision = self.guard.before_call(call.tool, call.args, call_id=str(call.index))
        except lw.LoopAbort as abort:
            return Act("stop", abort.detector, abort.message)
        det = decision.detection
        name = det.detector if det is not None else ""
        if decision.blocked:
            return Act("block", name, det.message if det is not None else "")
        return Act("warn" if decision.warned else "allow", name, det.message if det else "")

    def after(self, call: Call) -> None:
        result, error = result_and_error(call)
        with contextlib.suppress(lw.LoopAbort):  # the stop shows at the next before_call
            self.guard.after_call(
                call.tool, call.args, call_id=str(call.index), result=result, error=error
            )

    def compaction(self) -> None:
        self.guard.on_compaction()


class Plain(Agent):
    """Only "stop the run at the N-th identical call in a row"."""

    def __init__(self, run: Run, limit: int) -> None:
        super().__init__(run)
        self.limit = limit
        self.key = ""
        self.count = 0

    def before(self, call: Call) -> Act:
        self.count = self.count + 1 if call.key == self.key else 1
        self.key = call.key
        if self.count >= self.limit:
            return Act("stop", "plain_repeat", f"{call.tool} called {self.count} times in a row")
        return Act("allow")

    def after(self, call: Call) -> None:
        return None


def make_agent(setup: Setup, run: Run, guard: lw.LoopGuard) -> Agent:
    if setup.plain:
        return Plain(run, setup.plain)
    return Guarded(run, guard)


def replay(run: Run, agent: Agent) -> list[Act]:
    acts: list[Act] = []
    for call in run.calls:
        if acts and acts[-1].action in ("stop", "unasked"):
            acts.append(Act("unasked"))
            continue
        if call.index in run.compactions:
            agent.compaction()
        act = agent.before(call)
        acts.append(act)
        if act.action in ("allow", "warn"):
            agent.after(call)
    return acts


# -- figures ------------------------------------------------------------------------------------

PREVENTED = ("block", "stop", "unasked")
ACTED = ("block", "stop")


@dataclass
class Tally:
    loops: int = 0
    flagged: int = 0
    blocked: int = 0
    stopped: int = 0
    first: list[int] = field(default_factory=list)
    late: int = 0
    late_prevented: int = 0

    def add(self, span: Span, acts: list[Act]) -> bool:
        """Count one loop; True when it was blocked or stopped."""
        seg = acts[span.start : span.end]
        self.loops += 1
        self.flagged += any(a.action in ("warn", *ACTED) for a in seg)
        acted = any(a.action in ACTED for a in seg) or seg[0].action == "unasked"
        self.blocked += acted
        self.stopped += any(a.action in ("stop", "unasked") for a in seg)
        first = next((i + 1 for i, a in enumerate(seg) if a.action in PREVENTED), None)
        if first is not None:
            self.first.append(first)
        late = seg[10:]
        self.late += len(late)
        self.late_prevented += sum(a.action in PREVENTED for a in late)
        return acted

    def line(self) -> str:
        n = max(self.loops, 1)
        first = statistics.median(self.first) if self.first else "-"
        late = self.late_prevented / self.late if self.late else 0.0
        return (
            f"{self.loops:3d} | flagged {self.flagged / n:4.0%} | blocked or stopped "
            f"{self.blocked / n:4.0%} | stopped {self.stopped / n:4.0%} | first action at call "
            f"{first} (median) | late calls prevented {late:4.0%}"
        )


@dataclass
class Result:
    setup: Setup
    loops: Tally
    cycles: Tally
    failures: Tally
    failures_alone: Tally
    healthy: int
    healthy_flagged: list[tuple[Run, int, Act]]
    healthy_blocked: list[tuple[Run, int, Act]]
    calls_asked: int
    missed: list[tuple[str, Run, Span]] = field(default_factory=list)
    """Visible loops and failure streaks that were neither blocked nor stopped."""


def evaluate(setup: Setup, runs: list[Run]) -> Result:
    guard = setup.guard()
    loops, cycles, failures, alone = Tally(), Tally(), Tally(), Tally()
    flagged: list[tuple[Run, int, Act]] = []
    blocked: list[tuple[Run, int, Act]] = []
    missed: list[tuple[str, Run, Span]] = []
    healthy = asked = 0
    for run in runs:
        acts = replay(run, make_agent(setup, run, guard))
        asked += sum(a.action != "unasked" for a in acts)
        visible = visible_loops(run.calls)
        for span in visible:
            if not loops.add(span, acts):
                missed.append(("visible loop", run, span))
        for span in cycle_spans(run.calls):
            cycles.add(span, acts)
        for span in failure_spans(run.calls):
            if not failures.add(span, acts):
                missed.append(("failure streak", run, span))
            if not overlaps(span, visible):
                alone.add(span, acts)
        if run.label == "healthy":
            healthy += 1
            hit = next(((i, a) for i, a in enumerate(acts) if a.action != "allow"), None)
            if hit is not None:
                flagged.append((run, *hit))
            hit = next(((i, a) for i, a in enumerate(acts) if a.action in PREVENTED), None)
            if hit is not None:
                blocked.append((run, *hit))
    return Result(setup, loops, cycles, failures, alone, healthy, flagged, blocked, asked, missed)


def report(result: Result) -> None:
    print(f"\n### {result.setup.name}")
    print(f"visible loops    {result.loops.line()}")
    print(f"cycles (2-5)     {result.cycles.line()}")
    print(f"failure streaks  {result.failures.line()}")
    print(f"  outside loops  {result.failures_alone.line()}")
    n = max(result.healthy, 1)
    print(
        f"healthy runs     {result.healthy:3d} | flagged {len(result.healthy_flagged)} "
        f"({len(result.healthy_flagged) / n:.1%}) | blocked {len(result.healthy_blocked)}"
    )
    for kind, items in (("flagged", result.healthy_flagged), ("blocked", result.healthy_blocked)):
        for run, index, act in items:
            call = run.calls[index]
            args = str(call.args)[:60]
            print(
                f"  {kind}: {run.name} call {index + 1} {call.tool} {args!r}: "
                f"{act.action} by {act.detector}: {act.message[:110]}"
            )


def missed(result: Result) -> None:
    """The loops the setup neither blocked nor stopped, with their shape."""
    print(f"\nnot blocked or stopped ({result.setup.name}):")
    for kind, run, span in result.missed:
        calls = run.calls[span.start : span.end]
        tools = Counter(c.tool for c in calls)
        errors = sum(bool(c.error) for c in calls)
        print(
            f"  {kind}: {run.name} calls {span.start + 1}-{span.end} ({span.end - span.start} "
            f"calls, tools {dict(tools)}, {errors} failed, {len({c.key for c in calls})} "
            f"distinct calls, {len({c.text() for c in calls})} distinct results)"
        )


def targets(result: Result) -> None:
    loops, fail = result.loops, result.failures
    checks = [
        ("visible loops blocked or stopped", loops.blocked / max(loops.loops, 1), ">=", 0.90),
        ("late loop calls prevented", loops.late_prevented / max(loops.late, 1), ">=", 0.75),
        ("failure streaks blocked", fail.blocked / max(fail.loops, 1), ">=", 0.60),
        (
            "failure calls past the 10th prevented",
            fail.late_prevented / max(fail.late, 1),
            ">=",
            0.40,
        ),
        ("healthy runs blocked", float(len(result.healthy_blocked)), "<=", 0.0),
        ("healthy runs flagged", len(result.healthy_flagged) / max(result.healthy, 1), "<=", 0.003),
    ]
    print(f"\ntargets of issue 9 ({result.setup.name}):")
    for name, value, op, goal in checks:
        ok = value >= goal if op == ">=" else value <= goal
        shown = f"{value:.0f}" if name == "healthy runs blocked" else f"{value:.1%}"
        print(f"  {'met ' if ok else 'MISS'} {name}: {shown} (target {op} {goal:.1%})")


# -- cost ---------------------------------------------------------------------------------------


COST_SETUPS = {
    "rules off": Setup("today: the issue 9 rules off"),
    "rules on": Setup("defaults: the issue 9 rules on", ALL),
}


def cost(runs: list[Run], rounds: int) -> None:
    """Microseconds per asked call (best of ``rounds``, interleaved)."""
    print(f"\n## Per-call cost (wall clock, best of {rounds} rounds; this machine is shared)")
    subset = [r for r in runs if r.calls]
    # The loaded runs are a heap no agent has: keep the collector from walking it, or
    # every allocation a rule makes is charged for scanning the whole data set.
    gc.freeze()
    best: dict[str, float] = {}
    asked: dict[str, int] = {}
    for _ in range(rounds):
        for name, setup in COST_SETUPS.items():
            guard = setup.guard()
            start = time.perf_counter()
            total = 0
            for run in subset:
                acts = replay(run, make_agent(setup, run, guard))
                total += sum(a.action != "unasked" for a in acts)
            elapsed = time.perf_counter() - start
            best[name] = min(best.get(name, elapsed), elapsed)
            asked[name] = total
    per = {name: best[name] / asked[name] * 1e6 for name in COST_SETUPS}
    for name in COST_SETUPS:
        print(f"  {name:9s} {per[name]:7.1f} us per asked call ({asked[name]} calls)")
    print(f"  new rules on / off: {per['rules on'] / per['rules off']:.3f}x")


def callgrind(data: str | None, prefix: str) -> None:
    """Instruction counts per asked call under callgrind (stable on a busy machine)."""
    print("\n## Per-call cost (callgrind instructions)")
    counted: dict[str, float] = {}
    for name in COST_SETUPS:
        code = (
            "import sys; sys.path.insert(0, %r)\n"
            "import bench_efficacy as b\n"
            "runs = b.load_runs(%r, %r)[:%d]\n"
            "import gc; gc.freeze()\n"
            "setup = b.COST_SETUPS[%r]\n"
            "g = setup.guard()\n"
            "n = 0\n"
            "for r in runs:\n"
            "    n += sum(a.action != 'unasked' for a in b.replay(r, b.make_agent(setup, r, g)))\n"
            "print('ASKED', n)\n"
        )
        counts = []
        for limit in (0, 120):
            ir, out = collected(code % (sys.path[0], data, prefix, limit, name))
            counts.append((ir, int(out.split("ASKED ")[1].split()[0])))
        (ir0, _), (ir1, n1) = counts
        counted[name] = (ir1 - ir0) / max(n1, 1)
        print(f"  {name:9s} {counted[name]:10.0f} instructions per asked call ({n1} calls)")
    print(f"  new rules on / off: {counted['rules on'] / counted['rules off']:.3f}x")


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="folder of the real runs")
    parser.add_argument("--prefix", default="dev", help="file prefix (dev-calls.jsonl.gz...)")
    parser.add_argument("--cost", action="store_true", help="also time today vs defaults")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true", help="instruction counts")
    args = parser.parse_args(list(argv) if argv is not None else None)
    runs = load_runs(args.data, args.prefix)
    print(
        f"# Efficacy on {args.prefix}: {len(runs)} runs, "
        f"{sum(len(r.calls) for r in runs)} calls, "
        f"{sum(r.label == 'healthy' for r in runs)} healthy"
    )
    results = []
    for setup in setups():
        result = evaluate(setup, runs)
        results.append(result)
        report(result)
    missed(results[1])
    targets(results[1])
    if args.cost:
        cost(runs, args.rounds)
    if args.callgrind:
        callgrind(args.data, args.prefix)


if __name__ == "__main__":
    main()
