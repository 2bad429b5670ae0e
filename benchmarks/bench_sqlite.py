"""Cost and throughput of the runtime guard on ``sqlite://``, beside the memory store.

Prints, measured side by side in one run, each figure beside its target:

* one process: CPU microseconds per guarded call (``before_call`` + ``after_call``)
  at steady state (the run's window full), on the memory store and on SQLite, and
  their ratio (target: SQLite at most 3x memory). Beside it, the floor SQLite itself
  sets here: two minimal write transactions per call (``BEGIN IMMEDIATE``, one
  ``UPDATE`` of one row, ``COMMIT``, the file in WAL mode as the store keeps it),
  and SQLite's cost of the store's own statements: per step, ``BEGIN IMMEDIATE``, the
  run's head ``UPDATE`` and one window row ``INSERT OR REPLACE`` (sizes as the store
  wrote them), ``COMMIT`` — what is left above it is loopwarden's Python;
* calls per second from one process;
* 4 processes on one shared run, and 4 processes on four runs (one each): calls
  per second of the machine (target: at least 10,000) and CPU microseconds per call
  (every process's CPU over every call); the memory store alongside (4 processes,
  each with its own runs: the machine without a shared store);
* the cold path of a hook process, which makes one call and exits: a new process
  opens the file and makes one guarded call on a run whose window is full
  (historySize 30 and 1000); CPU microseconds of that call, the file's opening
  included (interpreter start and imports are ``bench_hook.py``'s part).

``--instructions`` adds user-space instructions per call in one process (valgrind),
steady under the noise of a shared machine (system calls are not counted).

Only the public API is used, so the same file measures an older checkout
(``PYTHONPATH=old/src python benchmarks/bench_sqlite.py``).

Run: ``python benchmarks/bench_sqlite.py [--rounds 3] [--calls 3000]`` (a benchmark,
not a test).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import loopwarden as lw

PROCESSES = 4
HISTORY = 30
SPAWN = multiprocessing.get_context("spawn")


def config(history: int) -> dict[str, Any]:
    return {"tools": {"loopDetection": {"enabled": True, "historySize": history}}}


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one(run: lw.RunGuard, prefix: str, i: int) -> None:
    """One guarded call with distinct params (no rule acts on it)."""
    params = {"path": f"/workspace/src/{prefix}/module_{i}.py", "options": {"depth": 3}}
    result = {"content": [{"type": "text", "text": f"read 120 lines from module_{i}.py"}]}
    run.before_call("read", params, call_id=f"{prefix}-{i}")
    run.after_call("read", params, call_id=f"{prefix}-{i}", result=result)


# -- one process -------------------------------------------------------------------
def per_call_cpu(url: str, calls: int) -> float:
    """CPU microseconds per guarded call at steady state, in this process."""
    guard = lw.LoopGuard(config(HISTORY), store=url)
    run = guard.run("one", session_id="bench")
    for i in range(HISTORY + 10):  # the window full
        one(run, "warm", i)
    start = cpu()
    for i in range(calls):
        one(run, "p", i)
    spent = cpu() - start
    guard.close()
    return spent / calls * 1e6


def sqlite_floor(path: Path, calls: int) -> float:
    """CPU microseconds of two minimal write transactions (one guarded call's worth)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER)")
    conn.execute("INSERT OR REPLACE INTO t VALUES ('run', 0)")
    start = cpu()
    for i in range(2 * calls):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE t SET v = ? WHERE k = 'run'", (i,))
        conn.execute("COMMIT")
    spent = cpu() - start
    conn.close()
    return spent / calls * 1e6


def statements_floor(path: Path, calls: int, sizes: tuple[int, int]) -> float:
    """CPU microseconds of the store's statements for one guarded call (two steps), on
    tables of the store's shape, with a head and row of the sizes it wrote."""
    rest, row = b"r" * sizes[0], b"w" * sizes[1]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE runs (key TEXT PRIMARY KEY, gen INTEGER NOT NULL, ver INTEGER NOT NULL,"
        " seq INTEGER NOT NULL, lo INTEGER NOT NULL, cap INTEGER NOT NULL,"
        " rest BLOB NOT NULL, updated REAL NOT NULL)"
    )
    conn.execute("CREATE INDEX runs_updated ON runs(updated)")
    conn.execute(
        "CREATE TABLE run_rows (key TEXT NOT NULL, slot INTEGER NOT NULL, ver INTEGER NOT NULL,"
        " seq INTEGER NOT NULL, row BLOB NOT NULL, PRIMARY KEY (key, slot)) WITHOUT ROWID"
    )
    key = "default\x1frun"
    conn.execute("INSERT INTO runs VALUES (?, 1, 0, 0, 0, ?, ?, 0)", (key, HISTORY, rest))
    start = cpu()
    for i in range(2 * calls):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE runs SET ver = ?, seq = ?, lo = ?, rest = ? WHERE key = ? AND gen = 1"
            " AND ver = ?",
            (i + 1, i, max(0, i - HISTORY), rest, key, i),
        )
        conn.execute(
            "INSERT OR REPLACE INTO run_rows (key, slot, ver, seq, row) VALUES (?, ?, ?, ?, ?)",
            (key, i % HISTORY, i + 1, i, row),
        )
        conn.execute("COMMIT")
    spent = cpu() - start
    conn.close()
    return spent / calls * 1e6


def stored_sizes(path: Path) -> tuple[int, int]:
    """Bytes of a run's head state and of a window row as the store wrote them (typical
    sizes when the file has another layout, e.g. an older checkout's)."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            rest = conn.execute("SELECT max(length(rest)) FROM runs").fetchone()[0]
            row = conn.execute("SELECT avg(length(row)) FROM run_rows").fetchone()[0]
        return int(rest), int(row)
    except (sqlite3.Error, TypeError):
        return 600, 220


# -- several processes ---------------------------------------------------------------
def worker(
    url: str, run_name: str, prefix: str, calls: int, ready: Any, start: Any, out: Any
) -> None:
    guard = lw.LoopGuard(config(HISTORY), store=url)
    run = guard.run(run_name, session_id="bench")
    for i in range(HISTORY + 10):
        one(run, f"{prefix}-warm", i)
    ready.put(prefix)
    start.wait()
    began, used = time.monotonic(), cpu()
    for i in range(calls):
        one(run, prefix, i)
    out.put((cpu() - used, began, time.monotonic()))
    guard.close()


def processes(url: str, shared: bool, calls: int) -> tuple[float, float]:
    """(calls per second of the machine, CPU microseconds per call) of PROCESSES workers."""
    ready, out, start = SPAWN.Queue(), SPAWN.Queue(), SPAWN.Event()
    procs = [
        SPAWN.Process(
            target=worker,
            args=(url, "shared" if shared else f"own-{n}", f"w{n}", calls, ready, start, out),
        )
        for n in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)
    start.set()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(60)
    total = calls * len(procs)
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    return total / wall, sum(r[0] for r in results) / total * 1e6


# -- the cold path -------------------------------------------------------------------
COLD = """
import sys, time
import loopwarden as lw
url, history, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = {"tools": {"loopDetection": {"enabled": True, "historySize": history}}}
params = {"path": f"/workspace/src/cold_{n}.py", "options": {"depth": 3}}
# Imports and first-use set-up outside the measurement (bench_hook.py's part).
warm = lw.LoopGuard(config).run("warm")
warm.before_call("read", params, call_id="warm")
warm.after_call("read", params, call_id="warm", result="text")
guard = lw.LoopGuard(config, store=url)
started = time.thread_time()
run = guard.run("cold", session_id="bench")
run.before_call("read", params, call_id=f"cold-{n}")
run.after_call("read", params, call_id=f"cold-{n}", result="text")
print((time.thread_time() - started) * 1e6)
guard.close()
"""


def cold(url: str, history: int, samples: int) -> float:
    """Median CPU microseconds of a new process's first guarded call on a full run."""
    guard = lw.LoopGuard(config(history), store=url)
    run = guard.run("cold", session_id="bench")
    for i in range(history):
        one(run, "fill", i)
    guard.close()
    found = []
    for n in range(samples):
        done = subprocess.run(
            [sys.executable, "-c", COLD, url, str(history), str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        found.append(float(done.stdout.strip()))
    return statistics.median(found)


# -- instructions ----------------------------------------------------------------------
COUNTED = """
import sys
sys.path.insert(0, {here!r})
from bench_sqlite import config, one, HISTORY
import loopwarden as lw
guard = lw.LoopGuard(config(HISTORY), store=sys.argv[1])
run = guard.run("one", session_id="bench")
for i in range(int(sys.argv[2])):
    one(run, "p", i)
guard.close()
"""


def instructions(url: str) -> float:
    """User-space instructions per guarded call (valgrind; the difference of two runs)."""
    counts = []
    for calls in (100, 1100):
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                "-c",
                COUNTED.format(here=str(Path(__file__).parent)),
                url,
                str(calls),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        match = re.search(r"Collected : (\d+)", done.stderr)
        if match is None:
            raise SystemExit(f"callgrind failed (is valgrind installed?): {done.stderr[-800:]}")
        counts.append(int(match.group(1)))
    return (counts[1] - counts[0]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3000, help="per process and round")
    parser.add_argument("--cold-samples", type=int, default=15)
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    print(
        f"loopwarden {lw.__version__} from {Path(lw.__file__).parent}; SQLite "
        f"{sqlite3.sqlite_version}; {os.cpu_count()} CPUs; historySize {HISTORY}; "
        f"best of {args.rounds} rounds, cases interleaved"
    )
    with tempfile.TemporaryDirectory(prefix="lw-bench-sqlite-") as tmp:
        root = Path(tmp)
        best: dict[str, float] = {}
        rates: dict[str, tuple[float, float]] = {}

        def keep_low(name: str, value: float) -> None:
            best[name] = min(value, best.get(name, value))

        def keep_fast(name: str, found: tuple[float, float]) -> None:
            if name not in rates or found[0] > rates[name][0]:
                rates[name] = found

        for r in range(args.rounds):
            url = f"sqlite://{root}/round-{r}.db"
            keep_low("memory", per_call_cpu("memory://", args.calls))
            keep_low("sqlite", per_call_cpu(url, args.calls))
            keep_low("floor", sqlite_floor(root / f"floor-{r}.db", args.calls))
            sizes = stored_sizes(root / f"round-{r}.db")
            statements = statements_floor(root / f"stmts-{r}.db", args.calls, sizes)
            keep_low("statements", statements)
            start = time.monotonic()
            per_call_cpu(url, args.calls // 3)
            keep_fast("sqlite, 1 process", (args.calls // 3 / (time.monotonic() - start), 0.0))
            start = time.monotonic()
            per_call_cpu("memory://", args.calls)
            keep_fast("memory, 1 process", (args.calls / (time.monotonic() - start), 0.0))
            keep_fast("memory, 4 processes", processes("memory://", False, args.calls))
            keep_fast("sqlite, 4 processes, four runs", processes(url, False, args.calls))
            keep_fast("sqlite, 4 processes, one shared run", processes(url, True, args.calls))

        memory, on_sqlite, floor = best["memory"], best["sqlite"], best["floor"]
        statements = best["statements"]
        print()
        print("One process, CPU per guarded call (before_call + after_call):")
        print(f"  {'memory://':44} {memory:8.1f} µs")
        print(
            f"  {'sqlite://':44} {on_sqlite:8.1f} µs  {on_sqlite / memory:5.1f}x memory"
            "   (target: <= 3.0x)"
        )
        print(
            f"  {'SQLite floor: 2 minimal write transactions':44} {floor:8.1f} µs  "
            f"{floor / memory:5.1f}x memory   (SQLite alone, no loopwarden)"
        )
        print(
            f"  {'SQLite floor: the store statements, 2 steps':44} {statements:8.1f} µs  "
            f"{statements / memory:5.1f}x memory   (SQLite alone, the store's own writes;"
            f" head {sizes[0]} B, row {sizes[1]} B)"
        )
        print()
        print("Calls per second of the machine, and CPU per call (all processes):")
        for name, (rate, per_call) in rates.items():
            target = "   (target: >= 10,000 calls/s)" if "sqlite, 4" in name else ""
            cpu_text = f"{per_call:8.1f} µs/call" if per_call else " " * 15
            print(f"  {name:44} {rate:9,.0f} calls/s {cpu_text}{target}")

        print()
        print("Cold path: a new process's first guarded call on a full run (opening included):")
        for history in (30, 1000):
            url = f"sqlite://{root}/cold-{history}.db"
            found = cold(url, history, args.cold_samples)
            print(f"  historySize {history:<5} {'':26} {found:8.0f} µs CPU (median)")

        if args.instructions:
            print()
            print("User-space instructions per guarded call (valgrind):")
            counted = {
                "memory://": instructions("memory://"),
                "sqlite://": instructions(f"sqlite://{root}/counted.db"),
            }
            for name, value in counted.items():
                print(f"  {name:44} {value:10,.0f}")
            ratio = counted["sqlite://"] / counted["memory://"]
            print(f"  sqlite / memory {ratio:.1f}x")


if __name__ == "__main__":
    main()
