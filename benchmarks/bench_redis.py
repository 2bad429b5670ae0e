"""Per-call cost of the runtime guard on ``redis://`` against the round trips it needs.

Prints microseconds per tool call (``before_call`` + ``after_call``) at steady
state (the run's window full) for:

* the guard on the memory store;
* the guard on ``redis://`` on loopback (one compare-and-set round trip per step
  when this process wrote the run last, the common case), and with the local
  cache off (two round trips: another worker wrote the run last);
* the floor: the same number of bare ``SET`` round trips, each with a payload of
  the run state's size, on the same connection settings, nothing else;
* for the choice of protocol: one update done with optimistic ``WATCH``/``MULTI``
  (``WATCH``, ``HGET``, ``MULTI``/``HSET``/``PEXPIRE``/``EXEC``) instead.

Each figure is given as wall-clock time and as CPU time (this process and the
server together, which on a loaded VM is far steadier than the wall clock); the
wall-clock ratio is the median of the ratios within each round.

Then the stored state size per run at historySize 30 and 1000 (plain and zlib).

Starts its own ``redis-server`` on a free loopback port unless ``--url`` is given.
Run: ``python benchmarks/bench_redis.py`` (a benchmark, not a test). Wall-clock
figures: the best of several rounds, interleaved, to damp noise from other work.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

import loopwarden as lw
from loopwarden.engine.state import RunState
from loopwarden.stores.redis import RedisStore

TARGET = 1.3  # the cached store's wall-clock cost over its round-trip floor (issue 22)
CACHED = "redis:// (1 round trip/step)"
UNCACHED = "redis:// no cache (2/step)"


def call(i: int) -> tuple[dict[str, object], dict[str, object]]:
    params = {"path": f"/workspace/src/module_{i}.py", "options": {"depth": 3}}
    result = {"content": [{"type": "text", "text": f"read 120 lines from module_{i}.py"}]}
    return params, result


@contextmanager
def server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.02)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


def guard_case(store: object, history: int, n: int) -> Callable[[], float]:
    config = {"tools": {"loopDetection": {"enabled": True, "historySize": history}}}
    guard = lw.LoopGuard(config, store=store)  # type: ignore[arg-type]
    run = guard.run("bench", session_id="s")
    counter = iter(range(10**9))

    def one() -> None:
        i = next(counter)
        params, result = call(i)
        run.before_call("read", params, call_id=f"c{i}")
        run.after_call("read", params, call_id=f"c{i}", result=result)

    for _ in range(history + 10):  # steady state: the window is full
        one()

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(n):
            one()
        return (time.perf_counter() - start) / n * 1e6

    return timed


def state_size(history: int) -> tuple[int, int]:
    store = lw.stores.MemoryStore()
    timed = guard_case(store, history, 1)
    timed()
    state = next(iter(store._states.values()))
    data = state.to_bytes()
    return len(data), len(zlib.compress(data, 1))


def floor_case(url: str, payload: int, trips: int, n: int) -> Callable[[], float]:
    client = RedisStore(url)._sync_client()
    blob = b"x" * payload

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(n * trips):
            pipe = client.pipeline(transaction=False)
            pipe.set("lw-bench:floor", blob)
            pipe.execute()
        return (time.perf_counter() - start) / n * 1e6

    return timed


def watch_case(url: str, history: int, n: int) -> Callable[[], float]:
    """One step per call half done with WATCH/MULTI on the same state (for comparison)."""
    client = RedisStore(url)._sync_client()
    config = lw.LoopGuard(
        {"tools": {"loopDetection": {"enabled": True, "historySize": history}}}
    ).config_for()
    store = lw.stores.MemoryStore()
    guard_case(store, history, 1)()
    state = next(iter(store._states.values()))  # a full window, like the guarded run's
    client.hset("lw-bench:watch", mapping={"t": b"0", "d": state.to_bytes()})

    def step() -> None:
        with client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch("lw-bench:watch")
                    data = pipe.hget("lw-bench:watch", "d")
                    st = RunState.from_bytes(data, config)
                    st.miss_count += 1
                    pipe.multi()
                    pipe.hset("lw-bench:watch", "d", st.to_bytes())
                    pipe.pexpire("lw-bench:watch", 86_400_000)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(n * 2):
            step()
        return (time.perf_counter() - start) / n * 1e6

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing Redis (default: start one)")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with server() if args.url is None else _given(args.url) as url:
        probe = redis.Redis.from_url(url)
        for history in (30, 1000):
            n = args.calls if history == 30 else max(20, args.calls // 10)
            plain, _ = state_size(history)
            cases = {
                "memory store": guard_case("memory://", history, n),
                CACHED: guard_case(f"{url}?prefix=bench{history}:", history, n),
                UNCACHED: guard_case(f"{url}?prefix=bench{history}n:&cache=0", history, n),
                "floor: 2 SET pipelines": floor_case(url, plain, 2, n),
                "floor: 4 SET pipelines": floor_case(url, plain, 4, n),
                "WATCH/MULTI protocol (2 steps)": watch_case(url, history, n),
            }
            best = dict.fromkeys(cases, float("inf"))
            cpu: dict[str, float] = {}
            ratios: list[float] = []
            ratios_nc: list[float] = []
            for _ in range(args.rounds):  # interleaved, so that load from others hits all alike
                seen = {}
                for name, case in cases.items():
                    before = _cpu(probe)
                    seen[name] = case()
                    spent = (_cpu(probe) - before) / n * 1e6
                    cpu[name] = min(cpu.get(name, float("inf")), spent)
                    best[name] = min(best[name], seen[name])
                # This VM's loopback latency drifts between rounds: the ratio is taken
                # within each round, where the cases ran back to back.
                ratios.append(seen[CACHED] / seen["floor: 2 SET pipelines"])
                ratios_nc.append(seen[UNCACHED] / seen["floor: 4 SET pipelines"])
            print(
                f"historySize {history}: state {plain} bytes; us per call (before+after): "
                "wall clock, and CPU of this process and the server together"
            )
            for name, value in best.items():
                print(f"  {name:34s} {value:9.1f} {cpu[name]:9.1f}")
            cached = statistics.median(ratios)
            verdict = "met" if cached <= TARGET else "NOT met"
            print(
                f"  redis / floor, wall clock, median of {args.rounds} rounds: "
                f"{cached:.2f}x (cached; target <= {TARGET:.2f}x: {verdict}), "
                f"{statistics.median(ratios_nc):.2f}x (no cache)"
            )
            print(
                "  redis / floor, CPU: "
                f"{cpu[CACHED] / cpu['floor: 2 SET pipelines']:.2f}x (cached), "
                f"{cpu[UNCACHED] / cpu['floor: 4 SET pipelines']:.2f}x (no cache)"
            )
        print("state size per run (bytes): historySize, plain, zlib level 1")
        for history in (30, 1000):
            print(f"  {history:5d} {state_size(history)[0]:9d} {state_size(history)[1]:9d}")


def _cpu(probe: redis.Redis) -> float:
    """CPU seconds used so far by this process and by the Redis server."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    info = probe.info("cpu")
    return (
        usage.ru_utime + usage.ru_stime + float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    )


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()
