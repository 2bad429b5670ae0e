"""Fleet replay and tune throughput on real recorded runs, against the floor.

Converts ``../shared/realdata/dev-calls.jsonl.gz`` (real agent runs; never
shipped) into an Anthropic Messages conversation per line in a temporary
folder — one of the formats replay reads, with raw params and results — then
prints, in one run:

* the floor per call: reading the file, ``orjson`` parsing of every line, and
  the hashing floor (``digest`` of the same params and results);
* ``replay`` per call on one process (``replay_fleet``, the real runtime guard,
  the Chat reader with its unknown-tool wording check), as CPU time;
* ``tune`` per call with the default grid (every config side by side);
* the speed-up of ``--workers 2`` over one worker (wall time, plus the CPU time
  of the parent and of the workers' shards, since this machine is shared);
* with ``--profile``, the top functions of a cProfile of the one-process replay.

Run: ``python benchmarks/bench_fleet.py [--rounds 3] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _replaydata import DATA, convert, floor

from loopwarden.config import load_config
from loopwarden.fleet import plan_shards
from loopwarden.fleet.replay import replay_fleet
from loopwarden.tune import build_candidates, default_changes, tune

CONFIG = load_config({"tools": {"loopDetection": {"enabled": True}}})
SPLIT = 2 << 20  # ranges of the converted file, so two workers share one file


def cpu_self() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    cpu0, wall0 = cpu_self(), time.perf_counter()
    fn()
    return time.perf_counter() - wall0, cpu_self() - cpu0


WORKER_CPU: list[float] = []
"""CPU seconds the workers spent on their shards, per case (what each result reports)."""


def replay(shards: Any, workers: int) -> int:
    results = list(replay_fleet(shards, CONFIG, workers=workers))
    WORKER_CPU.append(sum(r.cpu for r in results) if workers > 1 else 0.0)
    return sum(len(r.payload.reports) for r in results)


def tune_all(shards: Any, candidates: Any, workers: int) -> None:
    cpu: list[float] = []
    tune(shards, candidates, workers=workers, on_shard=lambda r: cpu.append(r.cpu))
    WORKER_CPU.append(sum(cpu) if workers > 1 else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"real data not found at {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dev-calls.chat.jsonl"
        calls = convert(DATA, path)
        shards = plan_shards([str(path)], split_bytes=SPLIT)
        candidates = build_candidates(CONFIG, default_changes())
        print(
            f"real data: {calls:,} calls, {path.stat().st_size / 1e6:.1f} MB as Anthropic "
            f"Messages JSONL, {len(shards)} shards; tune grid: {len(candidates)} configs"
        )
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            cases: dict[str, Callable[[], Any]] = {
                "floor (read+parse+hash)": lambda: floor(path),
                "replay, 1 worker": lambda: replay(shards, 1),
                "replay, 2 workers": lambda: replay(shards, 2),
                "tune, 1 worker": lambda: tune_all(shards, candidates, 1),
                "tune, 2 workers": lambda: tune_all(shards, candidates, 2),
            }
            for name, fn in cases.items():
                WORKER_CPU.clear()
                wall, cpu = timed(fn)
                cpu += sum(WORKER_CPU)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu)
        base = best["floor (read+parse+hash)"][1]
        print(f"{'case':<26}{'wall s':>8}{'CPU s':>8}{'µs/call CPU':>13}{'x floor':>9}")
        for name, (wall, cpu) in best.items():
            print(f"{name:<26}{wall:8.2f}{cpu:8.2f}{1e6 * cpu / calls:13.1f}{cpu / base:9.2f}")
        for what in ("replay", "tune"):
            one, two = best[f"{what}, 1 worker"][0], best[f"{what}, 2 workers"][0]
            print(f"{what}: --workers 2 speed-up {one / two:.2f}x (wall; best of {args.rounds})")
        per_config = (best["tune, 1 worker"][1] - base) / len(candidates)
        print(f"tune: {1e6 * per_config / calls:.1f} µs CPU per call per config above the floor")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(replay, shards, 1)
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
            print(text.getvalue())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
