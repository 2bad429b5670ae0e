"""How well the runtime guard catches real loops: a replay of real recorded runs.

Every run of ``../shared/realdata`` (see its README) is replayed through
:class:`loopwarden.LoopGuard` as a live agent would meet it: each recorded call
is asked with ``before_call``; a blocked call is not run (its recorded result is
never seen) and the run goes on with the next recorded call, as a model that
ignores the block would; after a stop nothing more is asked.

Setups, each over the same runs:

* ``today``: the guard with ``enabled: true`` and OpenClaw's semantics;
* ``defaults``: the rules of issue 9 on (volatile-counter masking, consecutive
  repeats, cycles, failure streaks), as the guard will run them by default;
* the defaults with each new rule switched off in turn;
* ``plain 5``: only the rule "stop the run at the 5th identical call in a row".

Until those rules are wired into the guard, ``defaults`` runs them beside it
(:class:`Projected`): the prototypes in ``loopwarden._extra_detectors`` and
``loopwarden._volatile`` see every call first, and the guard gets the masked
outcome hashes through its hashed API (``before_call_hashed`` /
``after_call_hashed``), so its own rules see what they will see once wired.

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
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
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
from loopwarden._extra_detectors import (
    ExtraConfig,
    ExtraDetectors,
    Finding,
)
from loopwarden._volatile import error_excerpt, mask_volatile
from loopwarden.hashing import digest, is_known_poll

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
RULES = frozenset({"masking", "repeat", "cycle", "failure"})
TARGETS = {
    "loops acted on": 0.90,
    "late loop calls prevented": 0.75,
    "failure streaks blocked": 0.60,
    "failure calls past the 10th prevented": 0.40,
    "healthy flagged": 0.003,
}


@dataclass(frozen=True)
class Setup:
    name: str
    rules: frozenset[str] = frozenset()
    plain: int = 0
    """``plain`` > 0: only the rule "stop at the N-th identical call in a row", no guard."""


def setups() -> list[Setup]:
    out = [Setup("today (OpenClaw semantics)"), Setup("defaults (issue 9 rules on)", RULES)]
    out += [Setup(f"defaults without {rule}", RULES - {rule}) for rule in sorted(RULES)]
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


class Today(Agent):
    """Today's runtime guard through its raw API."""

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
            return Act("block", name, decision.message or "")
        return Act("warn" if decision.warned else "allow", name, decision.message or "")

    def after(self, call: Call) -> None:
        result, error = result_and_error(call)
        with contextlib.suppress(lw.LoopAbort):  # the stop shows at the next before_call
            self.guard.after_call(
                call.tool, call.args, call_id=str(call.index), result=result, error=error
            )

    def compaction(self) -> None:
        self.guard.on_compaction()


class Projected(Agent):
    """The guard as issue 9 will run it: masking and the new detectors beside today's rules."""

    def __init__(
        self, run: Run, guard: lw.LoopGuard, rules: frozenset[str], history_size: int
    ) -> None:
        super().__init__(run)
        self.guard = guard.run(run.name)
        base = ExtraConfig()
        cfg = replace(
            base,
            repeat=replace(base.repeat, enabled="repeat" in rules),
            cycle=replace(base.cycle, enabled="cycle" in rules),
            failure=replace(base.failure, enabled="failure" in rules),
        )
        self.extra = ExtraDetectors(cfg)
        self.masking = "masking" in rules
        self.window: deque[str] = deque()
        self.seen: Counter[str] = Counter()
        self.history_size = history_size
        self.delivered: set[str] = set()
        self.pending: tuple[str, bool, bool] | None = None
        self.last_outcome: dict[str, str] = {}
        self.last_raw: dict[str, str] = {}

    def _remember(self, sig: str) -> bool:
        """Add ``sig`` to the window; True when it was already there."""
        repeated = self.seen[sig] > 0
        self.window.append(sig)
        self.seen[sig] += 1
        if len(self.window) > self.history_size:
            old = self.window.popleft()
            self.seen[old] -= 1
        return repeated

    def before(self, call: Call) -> Act:
        tool, params = call.tool, call.args
        sig = lw.args_hash(tool, params)
        poll = is_known_poll(tool, params)
        finding = self.extra.check(tool, sig, poll)
        if finding is not None and finding.critical:
            return self._vetoed(call, sig, poll, finding)
        try:
            decision = self.guard.before_call_hashed(tool, sig, call_id=str(call.index), poll=poll)
        except lw.LoopAbort as abort:
            return Act("stop", abort.detector, abort.message)
        if decision.blocked:
            det = decision.detection
            self.extra.veto(tool, sig, None)
            self._remember(sig)
            return Act("block", det.detector if det else "", decision.message or "")
        repeated = self._remember(sig)
        self.pending = (sig, poll, repeated)
        if finding is not None and finding.warning_key not in self.delivered:
            self.delivered.add(finding.warning_key)
            return Act("warn", finding.detector, finding.log_message)
        if decision.warned:
            det = decision.detection
            return Act("warn", det.detector if det else "", decision.message or "")
        return Act("allow")

    def _vetoed(self, call: Call, sig: str, poll: bool, finding: Finding) -> Act:
        """A block by a new rule: recorded as a veto in the guard's window too (SPEC 6.2)."""
        tool = call.tool
        try:
            decision = self.guard.before_call_hashed(tool, sig, call_id=str(call.index), poll=poll)
            if not decision.blocked:
                repeat = finding.repeat_outcome or self.last_outcome.get(sig) or "veto"
                self.guard.after_call_hashed(
                    tool, sig, repeat, call_id=str(call.index), is_error=True
                )
        except lw.LoopAbort as abort:
            return Act("stop", abort.detector, abort.message)
        self.extra.veto(tool, sig, finding)
        self._remember(sig)
        return Act("stop" if finding.stop else "block", finding.detector, finding.log_message)

    def after(self, call: Call) -> None:
        assert self.pending is not None
        sig, poll, repeated = self.pending
        self.pending = None
        tool, params = call.tool, call.args
        result, error = result_and_error(call)
        text = call.text() if (call.result is not None or call.error) else ""
        outcome = lw.hash_outcome(tool, params, result=result, error=error)
        raw = outcome.hash
        # Masked only when the same call already ran in the window: only then is there
        # an earlier outcome to compare it with (masking costs several times the hash).
        # The same raw outcome as last time keeps last time's hash, masked or not.
        if self.masking and repeated and raw is not None:
            if self.last_raw.get(sig) == raw:
                outcome = outcome._replace(hash=self.last_outcome[sig])
            else:
                masked = mask_volatile(text)
                if masked is not text:
                    # Hashed as hash_outcome hashes a string result or an error message
                    # (the unknown-tool name was read from the raw text already).
                    if call.error:
                        outcome = outcome._replace(hash="error:" + digest(masked or "error"))
                    elif isinstance(result, str):
                        outcome = outcome._replace(hash=digest(masked))
        if raw is not None:
            self.last_raw[sig] = raw
        with contextlib.suppress(lw.LoopAbort):  # the stop shows at the next before_call
            self.guard.after_call_hashed(
                tool,
                sig,
                outcome.hash,
                call_id=str(call.index),
                unknown_tool_name=outcome.unknown_tool_name,
                is_error=outcome.is_error,
            )
        if outcome.hash is not None:
            self.last_outcome[sig] = outcome.hash
        self.extra.record(
            tool,
            sig,
            outcome.hash,
            is_error=outcome.is_error,
            error=error_excerpt(text) if outcome.is_error else None,
            duration=None,  # the recordings hold no durations
            params=params,
            poll=poll,
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
    if not setup.rules:
        return Today(run, guard)
    return Projected(run, guard, setup.rules, guard.config_for().history_size)


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

    def add(self, span: Span, acts: list[Act]) -> None:
        seg = acts[span.start : span.end]
        self.loops += 1
        self.flagged += any(a.action in ("warn", *ACTED) for a in seg)
        self.blocked += any(a.action in ACTED for a in seg) or seg[0].action == "unasked"
        self.stopped += any(a.action in ("stop", "unasked") for a in seg)
        first = next((i + 1 for i, a in enumerate(seg) if a.action in PREVENTED), None)
        if first is not None:
            self.first.append(first)
        late = seg[10:]
        self.late += len(late)
        self.late_prevented += sum(a.action in PREVENTED for a in late)

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


def evaluate(setup: Setup, runs: list[Run]) -> Result:
    guard = lw.LoopGuard(CONFIG)
    loops, cycles, failures, alone = Tally(), Tally(), Tally(), Tally()
    flagged: list[tuple[Run, int, Act]] = []
    blocked: list[tuple[Run, int, Act]] = []
    healthy = asked = 0
    for run in runs:
        acts = replay(run, make_agent(setup, run, guard))
        asked += sum(a.action != "unasked" for a in acts)
        visible = visible_loops(run.calls)
        for span in visible:
            loops.add(span, acts)
        for span in cycle_spans(run.calls):
            cycles.add(span, acts)
        for span in failure_spans(run.calls):
            failures.add(span, acts)
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
    return Result(setup, loops, cycles, failures, alone, healthy, flagged, blocked, asked)


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
    "today": Setup("today"),
    "rules off": Setup("projected, new rules off", frozenset({"none"})),
    "rules on": Setup("projected, new rules on", RULES),
}
"""``rules off`` runs the projection harness with every new rule off: the cost of
the new rules is ``rules on`` against it (``today`` shows the harness's own cost)."""


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
            guard = lw.LoopGuard(CONFIG)
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
            "import loopwarden as lw\n"
            "g = lw.LoopGuard(b.CONFIG)\n"
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
    targets(results[1])
    if args.cost:
        cost(runs, args.rounds)
    if args.callgrind:
        callgrind(args.data, args.prefix)


if __name__ == "__main__":
    main()
