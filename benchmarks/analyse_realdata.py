"""What the real recorded runs say about loops, and the thresholds that follow.

Reads ``../shared/realdata`` (see its README) and prints, from the call
sequences and the sources' own outcome labels only (never from a run's or a
repository's name):

1. visible loops of one repeated call, by class: identical results, results
   that differ only by volatile counters (identical once masked), results that
   keep changing;
2. cycles of 2-5 calls and their per-position evidence;
3. failure streaks (>= 10 failed calls of one tool in a row) and how often
   their errors agree once masked;
4. the healthy runs' maxima of every quantity a rule would count;
5. what ends a failure streak;
6. the thresholds of the new rules next to those maxima.

Run: ``python benchmarks/analyse_realdata.py [--data DIR] [--prefix dev]``.
``/work/coord/efficacy-analysis.md`` is this output with commentary.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

from _realdata import (
    Call,
    Run,
    cycle_spans,
    failure_spans,
    load_runs,
    overlaps,
    repeat_spans,
    visible_loops,
)

from loopwarden.engine.detectors.loopwarden import (
    ConsecutiveRepeatSettings,
    CycleSettings,
    FailureStreakSettings,
)
from loopwarden.profiles.volatile import error_excerpt, mask_volatile


def masked(call: Call) -> str:
    return mask_volatile(call.text())


def longest(values: Iterable[int]) -> int:
    return max(values, default=0)


def consecutive_identical(calls: list[Call], same_outcome: bool) -> int:
    """Longest run of identical calls in a row (with identical masked outcomes if asked)."""
    best = cur = 0
    prev: Call | None = None
    for call in calls:
        same = prev is not None and call.key == prev.key
        if same and same_outcome:
            same = masked(call) == masked(prev)  # type: ignore[arg-type]
        cur = cur + 1 if same else 1
        best = max(best, cur)
        prev = call
    return best


def failure_run(calls: list[Call], strict: bool) -> tuple[int, str]:
    """Longest streak of failures of one tool; ``strict``: any other call ends it."""
    best, tool = 0, ""
    if strict:
        cur, prev = 0, None
        for call in calls:
            if call.error:
                cur = cur + 1 if call.tool == prev and cur else 1
            else:
                cur = 0
            prev = call.tool
            if cur > best:
                best, tool = cur, call.tool
        return best, tool
    counts: Counter[str] = Counter()
    for call in calls:
        counts[call.tool] = counts[call.tool] + 1 if call.error else 0
        if counts[call.tool] > best:
            best, tool = counts[call.tool], call.tool
    return best, tool


def cycle_length(calls: list[Call], period: int, with_outcomes: bool) -> int:
    """Longest tail of calls equal (and, if asked, with equal masked outcome) to ``period`` back."""
    best = run = 0
    for j, call in enumerate(calls):
        back = calls[j - period] if j >= period else None
        ok = back is not None and back.key == call.key and calls[j - 1].key != call.key
        if ok and with_outcomes:
            ok = masked(back) == masked(call)  # type: ignore[arg-type]
        run = run + 1 if ok else 0
        best = max(best, run + period if run else 0)
    return best


def section(title: str) -> None:
    print(f"\n## {title}\n")


def describe_repeats(runs: list[Run]) -> None:
    section("1. One call repeated (>= 10 identical calls in a row)")
    classes: dict[str, list[tuple[Run, int]]] = defaultdict(list)
    for run in runs:
        for span in repeat_spans(run.calls):
            seg = run.calls[span.start : span.end]
            # The share of the loop's calls that got its most common result.
            raw = Counter(c.text() for c in seg).most_common(1)[0][1] / len(seg)
            norm = Counter(masked(c) for c in seg).most_common(1)[0][1] / len(seg)
            if raw >= 0.8:
                kind = "identical results (>= 80% of the calls)"
            elif norm >= 0.8:
                kind = "counter-only changes (identical once masked)"
            else:
                kind = "results keep changing after masking"
            classes[kind].append((run, span.length))
    for kind, items in sorted(classes.items()):
        lengths = sorted(n for _, n in items)
        labels = Counter(r.label for r, _ in items)
        print(f"- {kind}: {len(items)} loops, lengths {lengths}, labels {dict(labels)}")
    alternations = [(run, s) for run in runs for s in visible_loops(run.calls) if s.kind == "cycle"]
    print(
        f"- A,B alternations >= 10: {len(alternations)}, lengths "
        f"{sorted(s.length for _, s in alternations)}"
    )
    total = sum(len(visible_loops(r.calls)) > 0 for r in runs)
    print(
        f"- runs with a visible loop: {total} of {len(runs)}; "
        f"labels {dict(Counter(r.label for r in runs if visible_loops(r.calls)))}"
    )
    counts: Counter[str] = Counter()
    for run in runs:
        counts[run.label] += len(repeat_spans(run.calls, 5))
    print(f"- runs of >= 5 identical calls in a row, by label: {dict(counts)}")


def describe_cycles(runs: list[Run]) -> None:
    section("2. Cycles of 2-5 calls (>= 10 calls)")
    found = 0
    for run in runs:
        for span in cycle_spans(run.calls):
            found += 1
            seg = run.calls[span.start : span.end]
            p = span.period
            positions = [{masked(c) for c in seg[k::p]} for k in range(p)]
            stable = all(len(s) == 1 for s in positions)
            tools = " -> ".join(c.tool for c in seg[:p])
            print(
                f"- period {p}, {span.length} calls ({tools}), label {run.label}, "
                f"each position's result unchanged: {stable}"
            )
    if not found:
        print("- none")


def describe_failures(runs: list[Run]) -> None:
    section("3. Failure streaks (>= 10 failed calls of one tool in a row)")
    rows = []
    for run in runs:
        loops = visible_loops(run.calls)
        for span in failure_spans(run.calls):
            seg = run.calls[span.start : span.end]
            errors = Counter(error_excerpt(c.text()) for c in seg)
            top, top_n = errors.most_common(1)[0]
            rows.append(
                (
                    span.length,
                    span.tool,
                    len({c.key for c in seg}),
                    top_n / len(seg),
                    overlaps(span, loops),
                    run.label,
                    top,
                )
            )
    for length, tool, distinct, agree, loop, label, top in sorted(rows, reverse=True):
        print(
            f"- {length:3d} x {tool}: {distinct} distinct calls, {agree:.0%} share one masked "
            f"error, in a visible loop: {loop}, label {label}; top error: {top[:70]!r}"
        )
    no_loop = [r for r in rows if not r[4]]
    print(
        f"\n{len(rows)} streaks; {len(no_loop)} outside any visible loop "
        f"({sum(r[0] for r in no_loop)} calls). Lengths outside loops: "
        f"median {statistics.median([r[0] for r in no_loop]) if no_loop else 0}."
    )


def describe_healthy(runs: list[Run]) -> dict[str, int]:
    section("4. Healthy runs: the maxima a rule must stay above")
    healthy = [r for r in runs if r.label == "healthy"]
    stuck = [r for r in runs if r.label == "stuck"]
    maxima: dict[str, int] = {}

    def report(name: str, fn: object) -> None:
        values = {r.name: fn(r) for r in healthy}  # type: ignore[operator]
        worst = max(values.items(), key=lambda kv: kv[1], default=("", 0))
        stuck_values = [fn(r) for r in stuck]  # type: ignore[operator]
        dist = Counter(values.values())
        maxima[name] = worst[1]
        print(
            f"- {name}: healthy max {worst[1]} ({sum(v == worst[1] for v in values.values())} "
            f"runs); healthy distribution {dict(sorted(dist.items()))}; "
            f"stuck runs above it: {sum(v > worst[1] for v in stuck_values)} of {len(stuck)}"
        )

    report("identical calls in a row", lambda r: consecutive_identical(r.calls, False))
    report(
        "identical calls in a row with identical masked results",
        lambda r: consecutive_identical(r.calls, True),
    )
    for p in range(2, 6):
        report(
            f"cycle of {p}: calls in the cyclic tail (unchanged results per position)",
            lambda r, p=p: cycle_length(r.calls, p, True),
        )
    report(
        "failures of one tool in a row (any other call ends the streak)",
        lambda r: failure_run(r.calls, True)[0],
    )
    report(
        "failures of one tool, only its own success ends the streak",
        lambda r: failure_run(r.calls, False)[0],
    )
    by_source: dict[str, int] = defaultdict(int)
    for r in healthy:
        by_source[r.source] = max(by_source[r.source], failure_run(r.calls, True)[0])
    print(f"- strict failure streak maxima per source (healthy): {dict(by_source)}")
    print("- per-tool call durations are not in the data (the waiting rule cannot be checked here)")
    return maxima


def describe_breaks(runs: list[Run]) -> None:
    section("5. What ends a failure streak (streaks of >= 3, all labels)")
    ends: Counter[str] = Counter()
    resumed: Counter[str] = Counter()
    for run in runs:
        calls = run.calls
        for span in failure_spans(calls, 3):
            first = calls[span.start]
            nxt = calls[span.end] if span.end < len(calls) else None
            if nxt is None:
                kind = "end of run"
            elif nxt.tool == first.tool:
                kind = "a success of the same tool"
            elif nxt.error:
                kind = "a failure of another tool"
            else:
                kind = "a success of another tool"
            ends[kind] += 1
            if nxt is not None and nxt.tool != first.tool:
                after = calls[span.end + 1] if span.end + 1 < len(calls) else None
                again = after is not None and after.tool == first.tool and after.error
                resumed["same tool fails again right after" if again else "other"] += 1
    for kind, n in ends.most_common():
        print(f"- {kind}: {n}")
    print(f"- after another tool's call: {dict(resumed)}")


def describe_thresholds(maxima: dict[str, int]) -> None:
    section("6. Thresholds of the new rules (defaults) against the healthy maxima")
    rep, cyc, fail = ConsecutiveRepeatSettings(), CycleSettings(), FailureStreakSettings()
    top = maxima["identical calls in a row"]
    print(
        f"- consecutive repeat: warn at call {rep.warn_at}, block at {rep.block_at}, stop at "
        f"{rep.stop_at} (healthy max {top} identical calls in a row; "
        f"margin {rep.block_at - top} calls to the first block)"
    )
    worst_cycle = max(
        maxima[f"cycle of {p}: calls in the cyclic tail (unchanged results per position)"] / p
        for p in range(2, 6)
    )
    print(
        f"- cycle: warn at {cyc.warn_rounds} rounds, block at {cyc.block_rounds}, stop "
        f"{cyc.stop_after_blocks} calls later (healthy max {worst_cycle:.1f} rounds)"
    )
    strict = maxima["failures of one tool in a row (any other call ends the streak)"]
    print(
        f"- failure streak: warn after {fail.warn_at} failures, block after {fail.block_at}, "
        f"stop after {fail.stop_at} (healthy max {strict} here; the README reports up to 9 "
        "in the whole collection, all harness format rejections)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--prefix", default="dev")
    args = parser.parse_args()
    runs = load_runs(args.data, args.prefix)
    labels = Counter(r.label for r in runs)
    calls = sum(len(r.calls) for r in runs)
    print(f"# Real-data analysis ({args.prefix} set)\n")
    print(
        f"{len(runs)} runs, {calls} calls; labels {dict(labels)}; "
        f"sources {dict(Counter(r.source for r in runs))}"
    )
    describe_repeats(runs)
    describe_cycles(runs)
    describe_failures(runs)
    maxima = describe_healthy(runs)
    describe_breaks(runs)
    describe_thresholds(maxima)


if __name__ == "__main__":
    main()
