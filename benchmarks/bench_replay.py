"""Throughput and memory of ``loopwarden replay --format json`` on a large run record.

Generates loopwarden JSONL run records (the format the runtime guard writes)
of 100,000 and 1,000,000 tool calls (1,000 and 10,000 runs of 100 calls;
every fifth run holds a stuck loop, so warnings, blocks and stops happen), then
replays each in a fresh subprocess on one core and prints:

* calls per second of the replay itself (reading, parsing, the runtime guard,
  the JSON report), and the wall time including interpreter start-up;
* peak memory (max RSS) of the replaying process, for both sizes: it must not
  grow with the length of the trace.

The cases are interleaved over ``--rounds`` rounds and the best round is kept
(this machine is shared and noisy). Run: ``python benchmarks/bench_replay.py``
(a benchmark, not a test; ``--calls`` changes the large size).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

CALLS_PER_RUN = 100
TOOLS = ("read_file", "grep", "exec", "edit_file", "list_dir", "web_fetch")

# Runs inside the child: replay in-process, report its own time and peak RSS.
CHILD = """
import os, resource, sys, time
os.sched_setaffinity(0, {0}) if hasattr(os, "sched_setaffinity") else None
from loopwarden.cli.replay import main
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start, start_cpu = time.perf_counter(), cpu()
code = main([sys.argv[1], "--format", "json", "-o", os.devnull, "--no-progress"])
elapsed, cpu_seconds = time.perf_counter() - start, cpu() - start_cpu
rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(code, elapsed, cpu_seconds, rss_kib)
"""


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def generate(path: Path, calls: int) -> None:
    """Write a run record of ``calls`` calls in runs of ``CALLS_PER_RUN``."""
    args = {tool: [f"{tool}:{_hash(f'{tool}-{i}')}" for i in range(40)] for tool in TOOLS}
    outcomes = [_hash(f"out-{i}") for i in range(64)]
    dumps = orjson.dumps
    ts = 1_790_000_000.0
    with path.open("wb", buffering=1 << 20) as handle:
        write = handle.write
        for run in range(calls // CALLS_PER_RUN):
            run_id = f"run-{run:06d}"
            write(
                dumps(
                    {
                        "type": "run_start",
                        "ts": ts,
                        "run_id": run_id,
                        "session_id": f"sess-{run // 10}",
                        "agent_id": None,
                        "config": None,
                    }
                )
                + b"\n"
            )
            stuck = run % 5 == 0
            for i in range(CALLS_PER_RUN):
                ts += 0.5
                if stuck and i >= 40:
                    tool, sig, out = "exec", args["exec"][0], outcomes[0]
                else:
                    tool = TOOLS[(run + i) % len(TOOLS)]
                    sig = args[tool][(run * 7 + i * 3) % 40]
                    out = outcomes[(run + i * 5) % 64]
                call_id = f"call_{i:03d}"
                write(
                    dumps(
                        {
                            "type": "call",
                            "ts": ts,
                            "run_id": run_id,
                            "call_id": call_id,
                            "tool": tool,
                            "args_hash": sig,
                            "params": None,
                            "decision": "allow",
                        }
                    )
                    + b"\n"
                )
                write(
                    dumps(
                        {
                            "type": "outcome",
                            "ts": ts + 0.2,
                            "run_id": run_id,
                            "call_id": call_id,
                            "tool": tool,
                            "args_hash": sig,
                            "outcome_hash": out,
                            "is_error": False,
                            "unknown_tool": None,
                            "result": None,
                        }
                    )
                    + b"\n"
                )


def replay_once(path: Path) -> tuple[float, float, float, int]:
    """(replay seconds, its CPU seconds, wall seconds incl. start-up, peak RSS MiB)."""
    env = dict(os.environ)
    src = Path(__file__).resolve().parent.parent / "src"
    env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"replay failed: {done.stderr}")
    code, elapsed, cpu_seconds, rss_kib = done.stdout.split()
    if code != "0":
        raise SystemExit(f"replay exited with {code}: {done.stderr}")
    return float(elapsed), float(cpu_seconds), wall, int(rss_kib) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        sizes = {"small": args.small, "large": args.calls}
        files = {}
        for name, calls in sizes.items():
            files[name] = Path(tmp) / f"{name}.jsonl"
            start = time.perf_counter()
            generate(files[name], calls)
            size_mb = files[name].stat().st_size / 1e6
            print(
                f"generated {calls:,} calls in {calls // CALLS_PER_RUN:,} runs: "
                f"{size_mb:,.0f} MB in {time.perf_counter() - start:.1f} s"
            )
        best: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name in sizes:  # interleaved, so noise hits both alike
                elapsed, cpu_seconds, wall, rss = replay_once(files[name])
                previous = best.get(name)
                if previous is None:
                    best[name] = [elapsed, cpu_seconds, wall, rss]
                else:
                    best[name] = [
                        min(previous[0], elapsed),
                        min(previous[1], cpu_seconds),
                        min(previous[2], wall),
                        min(previous[3], rss),
                    ]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"best of {args.rounds} rounds; load average {load:.1f} on {os.cpu_count()} cores")
        print(
            f"{'case':8} {'calls':>10} {'replay s':>9} {'calls/s':>9} {'CPU s':>7} "
            f"{'calls/CPU-s':>12} {'wall s':>7} {'peak MiB':>9}"
        )
        for name, calls in sizes.items():
            elapsed, cpu_seconds, wall, rss = best[name]
            print(
                f"{name:8} {calls:>10,} {elapsed:>9.2f} {calls / elapsed:>9,.0f} "
                f"{cpu_seconds:>7.2f} {calls / cpu_seconds:>12,.0f} {wall:>7.2f} {int(rss):>9}"
            )
        print("target: >= 100,000 calls/s on one core; peak memory independent of trace length")


if __name__ == "__main__":
    main()
