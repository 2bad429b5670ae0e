"""What a huge tool name costs: one run's state on disk, peak RSS and time.

A model that calls a tool with a 1 MB name again and again (issue 24, item 14):
each case runs in a fresh process that makes ``--calls`` calls (check and
outcome; distinct arguments, so no rule acts) of one tool through
``LoopGuard`` on a SQLite store in a temporary directory, then prints:

* the size of the state files (``state.db`` with its WAL) after the calls,
* the process's peak resident set size (the kernel's figure),
* the seconds the calls took (wall clock: a benchmark figure, never a test).

Cases: a short name, and names of 1 KB and 1 MB.

Run: ``python benchmarks/bench_long_names.py [--calls 35]`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, resource, sys, tempfile, time
    from pathlib import Path
    import loopwarden as lw

    size, calls = int(sys.argv[1]), int(sys.argv[2])
    tool = "t" * size
    folder = Path(tempfile.mkdtemp(prefix="lw-longname-"))
    config = {"tools": {"loopDetection": {"enabled": True}}}
    guard = lw.LoopGuard(config, store=f"sqlite://{folder / 'state.db'}")
    run = guard.run("run")
    start = time.perf_counter()
    for n in range(calls):
        decision = run.before_call(tool, {"job": n}, call_id=f"c{n}")
        if not decision.blocked:
            run.after_call(tool, {"job": n}, call_id=f"c{n}", result=f"done {n}")
    seconds = time.perf_counter() - start
    on_disk = sum(p.stat().st_size for p in folder.glob("state.db*"))
    guard.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"disk": on_disk, "rss": peak, "seconds": seconds}))
    """
)


def case(size: int, calls: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(size), str(calls)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=35)
    args = parser.parse_args()
    mib = 1024 * 1024
    print(f"{args.calls} calls of one tool per case, SQLite store, a fresh process each")
    print(f"{'tool name':<12} {'state on disk':>14} {'peak RSS':>10} {'time':>9}")
    for label, size in (("16 B", 16), ("1 KB", 1024), ("1 MB", mib)):
        got = case(size, args.calls)
        print(
            f"{label:<12} {got['disk'] / mib:>10.2f} MiB {got['rss'] / mib:>6.0f} MiB"
            f" {got['seconds']:>7.2f} s"
        )


if __name__ == "__main__":
    main()
