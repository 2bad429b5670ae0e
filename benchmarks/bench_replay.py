"""Throughput and memory of ``loopwarden replay --format json`` on a large run record.

Generates loopwarden JSONL run records (the format the runtime guard writes)
of 100,000 and 1,000,000 tool calls (1,000 and 10,000 runs of 100 calls;
every fifth run holds a stuck loop, so warnings, blocks and stops happen), then
replays each in a fresh subprocess on one core and prints:

* calls per second of the replay itself (reading, parsing, the runtime guard,
  the JSON report), and the wall time including interpreter start-up;
* peak memory (max RSS) of the replaying process, for both sizes: it must not
  grow with the length of the trace;
* real data (``../shared/realdata``, written as Anthropic Messages JSONL with
  raw params and results): replay CPU per call against the floor (reading,
  ``orjson`` parsing and ``digest`` of the same params and results), in one
  process, beside its target (at most twice the floor) and the replay's decisions
  (warnings, blocks, stops: a faster replay decides the same); with
  ``--callgrind N`` also as instruction counts on the first N runs (stable on a
  loaded machine);
* the wall-clock speed-up of ``replay --workers 2`` over ``--workers 1`` on
  ``--copies`` copies of the real data, with the load average around it.

The cases are interleaved over ``--rounds`` rounds and the best round is kept
(this machine is shared and noisy). Run: ``python benchmarks/bench_replay.py``
(a benchmark, not a test; ``--calls`` changes the large size, ``--no-synthetic``
and ``--no-real`` leave cases out).
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
from _replaydata import DATA, convert

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
code = main([sys.argv[1], "--format", "json", "-o", os.devnull, "--no-progress", "--workers", "1"])
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


# Real data, inside the child: floor or replay after a warm-up replay of a small
# file (imports and first-use costs), timed as CPU of this process; "none" only
# warms up (the callgrind baseline).
REAL_CHILD = """
import os, resource, sys
from pathlib import Path
os.sched_setaffinity(0, {0}) if hasattr(os, "sched_setaffinity") else None
mode, path, warm = sys.argv[1], sys.argv[2], sys.argv[3]
from loopwarden.cli.replay import main
from _replaydata import floor
args = ["--format", "json", "-o", os.devnull, "--no-progress", "--workers", "1"]
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
main([warm, *args])
floor(Path(warm))
start = cpu()
if mode == "floor":
    floor(Path(path))
elif mode == "hashes":
    floor(Path(path), guard_hashes=True)
elif mode == "replay":
    assert main([path, *args]) == 0
print(cpu() - start)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    here = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join(
        [str(here.parent / "src"), str(here), env.get("PYTHONPATH", "")]
    )
    return env


def _child(argv: list[str], what: str) -> str:
    """Run a child with ``src`` and the benchmarks on its path; its stdout."""
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed: {done.stderr[-2000:]}")
    return done.stdout


def real_cpu(mode: str, path: Path, warm: Path) -> float:
    out = _child([sys.executable, "-c", REAL_CHILD, mode, str(path), str(warm)], mode)
    return float(out.split()[-1])


def callgrind(mode: str, path: Path, warm: Path, tmp: Path) -> int:
    """Instructions (Ir) of one child run under callgrind."""
    out = tmp / f"callgrind.{mode}.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    _child([*valgrind, sys.executable, "-c", REAL_CHILD, mode, str(path), str(warm)], mode)
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit("callgrind wrote no totals")


TARGET = 2.0
"""Replay's CPU (or instructions) per call, as a multiple of the floor's."""


def _goal(ratio: float) -> str:
    return f"<= {TARGET:.1f}x {'met' if ratio <= TARGET else 'NOT met'}"


def decisions(path: Path, tmp: Path) -> str:
    """What the replay decided on ``path`` (its JSON report's totals): a faster replay
    must decide the same."""
    report = tmp / "decisions.json"
    replay = [sys.executable, "-m", "loopwarden", "replay", str(path), "--format", "json"]
    _child([*replay, "-o", str(report), "--no-progress", "--workers", "1"], "replay")
    totals = orjson.loads(report.read_bytes())["totals"]
    return (
        f"{totals['runs']:,} runs, {totals['calls']:,} calls: {totals['warnings']} warnings, "
        f"{totals['blocks']} blocks, {totals['runs_stopped']} runs stopped, "
        f"{totals['runs_aborted']} aborted"
    )


def workers_wall(path: Path, workers: int) -> float:
    replay = [sys.executable, "-m", "loopwarden", "replay", str(path), "--format", "json"]
    options = ["-o", os.devnull, "--no-progress", "--workers", str(workers)]
    start = time.perf_counter()
    _child([*replay, *options], f"replay --workers {workers}")
    return time.perf_counter() - start


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def real_data(args: argparse.Namespace, tmp: Path) -> None:
    if not DATA.exists():
        print(f"real data not found at {DATA}; real-data cases skipped")
        return
    path, warm = tmp / "real.jsonl", tmp / "warm.jsonl"
    calls = convert(DATA, path)
    convert(DATA, warm, limit=5)
    size = path.stat().st_size / 1e6
    print(f"real data: {calls:,} calls, {size:.1f} MB as Anthropic Messages JSONL")
    best = {"floor": float("inf"), "hashes": float("inf"), "replay": float("inf")}
    for _ in range(args.rounds):
        for mode in best:
            best[mode] = min(best[mode], real_cpu(mode, path, warm))
    per = {mode: 1e6 * cpu / calls for mode, cpu in best.items()}
    print(
        f"{'case':26}{'CPU s':>8}{'µs/call':>9}{'calls/CPU-s':>13}{'x floor':>9}  target "
        f"(replay <= {TARGET:.1f}x floor)"
    )
    labels = {
        "floor": "floor (read+parse+digest)",
        "hashes": "read+parse+guard hashes",
        "replay": "replay (1 process)",
    }
    for mode, cpu in best.items():
        label = labels[mode]
        ratio = cpu / best["floor"]
        goal = _goal(ratio) if mode == "replay" else ""
        print(f"{label:26}{cpu:8.2f}{per[mode]:9.1f}{calls / cpu:13,.0f}{ratio:9.2f}  {goal}")
    print(
        "'guard hashes' hashes params and results the way the guard must (args_hash, "
        "hash_outcome: profiles, error wordings)"
    )
    print(f"decisions of the replay: {decisions(path, tmp)}")
    if args.callgrind:
        subset = tmp / "subset.jsonl"
        sub_calls = convert(DATA, subset, limit=args.callgrind)
        modes = ("none", "floor", "hashes", "replay")
        counts = {mode: callgrind(mode, subset, warm, tmp) for mode in modes}
        ir = {mode: (counts[mode] - counts["none"]) / sub_calls for mode in modes[1:]}
        ratio = ir["replay"] / ir["floor"]
        print(
            f"callgrind, first {args.callgrind} runs ({sub_calls:,} calls), Ir/call (start-up "
            f"and warm-up subtracted): floor {ir['floor']:,.0f}, guard hashes "
            f"{ir['hashes']:,.0f} ({ir['hashes'] / ir['floor']:.2f}x), replay "
            f"{ir['replay']:,.0f} ({ratio:.2f}x floor; {_goal(ratio)})"
        )
        print(f"decisions of that replay: {decisions(subset, tmp)}")
    if args.copies:
        big = tmp / "real-copies.jsonl"
        big_calls = convert(DATA, big, copies=args.copies)
        walls: dict[int, float] = {1: float("inf"), 2: float("inf")}
        loads = [_load()]
        for _ in range(args.rounds):
            for workers in walls:  # interleaved, so load changes hit both alike
                walls[workers] = min(walls[workers], workers_wall(big, workers))
                loads.append(_load())
        print(
            f"replay of {big_calls:,} calls ({big.stat().st_size / 1e6:.0f} MB), wall, best of "
            f"{args.rounds}: --workers 1 {walls[1]:.2f} s, --workers 2 {walls[2]:.2f} s: "
            f"speed-up {walls[1] / walls[2]:.2f}x (target >= 1.8x); load average "
            f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-synthetic", dest="synthetic", action="store_false")
    parser.add_argument("--no-real", dest="real", action="store_false")
    parser.add_argument(
        "--callgrind", type=int, default=0, metavar="RUNS", help="also count instructions"
    )
    parser.add_argument("--copies", type=int, default=8, help="real data copies for --workers 2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.synthetic:
            synthetic(args, Path(tmp))
        if args.real:
            real_data(args, Path(tmp))


def synthetic(args: argparse.Namespace, tmp: Path) -> None:
    sizes = {"small": args.small, "large": args.calls}
    files = {}
    for name, calls in sizes.items():
        files[name] = tmp / f"{name}.jsonl"
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
