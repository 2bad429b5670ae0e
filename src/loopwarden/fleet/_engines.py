"""Running shards: in this process, on local worker processes, or on Ray.

Every engine yields the results in shard order, whatever order the workers
finish in, and keeps at most a few shards per worker in flight, so the parent's
memory does not grow with the number of inputs. A worker that dies (killed,
out of memory, a crash in native code) costs only its shard, which comes back
as a failed result; the job goes on.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, Literal, Protocol, TypeVar

from ..errors import LoopwardenError
from ._inputs import Shard

__all__ = [
    "ENGINES",
    "IN_PROCESS_BYTES",
    "EngineUnavailable",
    "ShardTask",
    "choose_workers",
    "default_workers",
    "in_process",
    "run_shards",
]


class EngineUnavailable(LoopwardenError, RuntimeError):
    """The chosen engine cannot run here (Ray missing, or a Ray that would not start)."""


R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

ENGINES = ("local", "ray")
Engine = Literal["local", "ray"]

IN_PROCESS_BYTES = 16 << 20
"""Without a worker count, inputs smaller than this in all are read in this process:
starting worker processes would cost more than they save."""

# Shards in flight per worker: enough to keep workers busy while the parent
# consumes results in order, few enough that waiting results stay small.
_IN_FLIGHT = 2


class ShardTask(Protocol[R_co]):
    """What a worker does with one shard. Must be picklable (it travels to the workers)."""

    def run(self, shard: Shard) -> R_co:
        """The shard's result; never raises for bad input (it reports problems instead)."""
        ...

    def failed(self, shard: Shard, reason: str) -> R_co:
        """The result of a shard whose worker died."""
        ...


def default_workers() -> int:
    """The number of cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def choose_workers(shards: Sequence[Shard], workers: int | None, engine: str) -> int:
    """``workers`` as given; by default one per core, or 1 for small local inputs."""
    if workers is not None:
        return workers
    if engine == "local" and sum(s.size for s in shards) < IN_PROCESS_BYTES:
        return 1
    return default_workers()


def in_process(shards: Sequence[Shard], workers: int | None, engine: str) -> bool:
    """Whether :func:`run_shards` runs every shard in this process."""
    if engine != "local":
        return False
    if any(s.path is None and s.url is None for s in shards):
        return True  # stdin can only be read by this process
    return choose_workers(shards, workers, engine) <= 1 or len(shards) <= 1


def _run_task(task: ShardTask[R], shard: Shard) -> R:
    return task.run(shard)


def run_shards(
    task: ShardTask[R],
    shards: Sequence[Shard],
    *,
    workers: int | None = None,
    engine: Engine = "local",
    ray_address: str | None = None,
) -> Iterator[R]:
    """Run ``task`` on every shard; yields the results in shard order.

    ``engine="local"`` uses ``workers`` processes (the number of cores by
    default, but 1 for inputs under :data:`IN_PROCESS_BYTES` in all; 1 runs in this
    process). ``engine="ray"`` submits the shards as
    Ray tasks: to the cluster at ``ray_address``, to a Ray already initialised
    in this process, or to a local Ray started (and stopped) here with
    ``workers`` CPUs.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    count = choose_workers(shards, workers, engine)
    if engine == "ray":
        return _ray(task, shards, count, ray_address)
    if in_process(shards, workers, engine):
        return (task.run(shard) for shard in shards)
    return _processes(task, shards, min(count, len(shards)))


class _Pool(Generic[R]):
    def __init__(self, task: ShardTask[R], workers: int) -> None:
        self.task = task
        self.workers = workers
        self.executor = self._new()

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, mp_context=_context(self.task))

    def submit(self, shard: Shard) -> Future[R]:
        return self.executor.submit(_run_task, self.task, shard)

    def renew(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self._new()

    def alone(self, shard: Shard) -> R:
        """Run one shard with no other in flight: a second death is its own."""
        try:
            return self.submit(shard).result()
        except BrokenProcessPool:
            self.renew()
            return self.task.failed(shard, "the worker process died while reading this input")

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def _context(task: Any) -> Any:
    """How to start workers: fork while this process runs no other thread, else forkserver.

    Forked workers start at once with every module already imported (a
    forkserver costs about half a second before the first result); forking
    with other threads running could copy a held lock, so then workers come
    from a forkserver that imports the task's module once for all of them.
    """
    import multiprocessing
    import threading

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", type(task).__module__])
    return context


def _processes(task: ShardTask[R], shards: Sequence[Shard], workers: int) -> Iterator[R]:
    pool = _Pool(task, workers)
    todo = iter(shards)
    flight: deque[tuple[Shard, Future[R]]] = deque()
    limit = workers * _IN_FLIGHT
    try:
        for shard in todo:
            flight.append((shard, pool.submit(shard)))
            if len(flight) >= limit:
                break
        while flight:
            shard, future = flight.popleft()
            try:
                result = future.result()
            except BrokenProcessPool:
                # Every shard in flight died with the pool; find the culprit by
                # running this one alone, then resubmit the others.
                pool.renew()
                result = pool.alone(shard)
                flight = deque((s, pool.submit(s)) for s, _ in flight)
            except Exception as exc:  # an unpicklable result, a bug in a task
                result = task.failed(shard, f"worker error: {type(exc).__name__}: {exc}")
            yield result
            for shard in todo:
                flight.append((shard, pool.submit(shard)))
                break
    finally:
        pool.close()


def _ray(
    task: ShardTask[R], shards: Sequence[Shard], workers: int, address: str | None
) -> Iterator[R]:
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise EngineUnavailable("--engine ray needs Ray: pip install 'loopwarden[ray]'") from None
    started = False
    if not ray.is_initialized():
        import logging

        # Ray's own start-up chatter would mix with the report's messages on stderr.
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if address is None:
            options["num_cpus"] = workers
        try:
            ray.init(address=address, **options)
        except Exception as exc:  # Ray raises bare Exception/ConnectionError/RuntimeError here
            with contextlib.suppress(Exception):  # a half-started Ray leaves processes behind
                ray.shutdown()
            where = f"connect to Ray at {address}" if address else "start a local Ray"
            raise EngineUnavailable(
                f"could not {where}: {str(exc).strip() or type(exc).__name__} "
                "(on a busy machine, start one with `ray start --head` and pass "
                "--ray-address; or use the local engine with --workers N)"
            ) from exc
        started = True
    try:
        remote: Any = ray.remote(num_cpus=1, max_retries=0)(_run_task)
        task_ref = ray.put(task)
        flight: deque[tuple[Shard, Any]] = deque()
        todo = iter(shards)
        limit = max(1, workers) * _IN_FLIGHT
        for shard in todo:
            flight.append((shard, remote.remote(task_ref, shard)))
            if len(flight) >= limit:
                break
        while flight:
            shard, ref = flight.popleft()
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                reason = (
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                )
                result = task.failed(shard, f"the Ray worker failed on this input: {reason}")
            yield result
            for shard in todo:
                flight.append((shard, remote.remote(task_ref, shard)))
                break
    finally:
        if started:
            ray.shutdown()
