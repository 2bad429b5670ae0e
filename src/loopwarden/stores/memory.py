"""In-process stores: state objects in a dict.

:class:`MemoryStore` is thread-safe (one lock, LRU bound, expiry); :class:`LocalStore`
is a plain dict for one thread that deletes each run when it ends (trace replay).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..engine.state import RunState
from .base import BaseStore, InProcess, Inspectable

__all__ = ["LocalStore", "MemoryStore"]

T = TypeVar("T")


class MemoryStore(BaseStore, InProcess, Inspectable):
    """Keeps run states in memory; least recently used runs beyond ``max_runs`` are dropped.

    Thread-safe: one lock serialises updates. The update functions are pure CPU
    work of a few microseconds, so the lock is never held across I/O. Runs idle
    for ``ttl_seconds`` by ``clock`` are dropped as the store is used.
    """

    def __init__(
        self,
        *,
        ttl_seconds: float | None = None,
        max_runs: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else DEFAULT_STATE_TTL_SECONDS
        self.max_runs = max_runs
        self.clock = clock
        self._states: OrderedDict[str, RunState] = OrderedDict()
        # Reentrant: a state's lock is this lock, and transact may run under it.
        self._lock = threading.RLock()
        self._ops = 0

    @classmethod
    def from_url(cls, url: str, *, ttl_seconds: float | None = None) -> MemoryStore:
        return cls(ttl_seconds=ttl_seconds)

    def __len__(self) -> int:
        return len(self._states)

    def _get(self, key: str, config: LoopDetectionConfig) -> RunState:
        states = self._states
        state = states.get(key)
        if state is None:
            state = states[key] = RunState.new(config)
            state.lock = self._lock
            if len(states) > self.max_runs:
                states.popitem(last=False)[1].detached = True
        else:
            states.move_to_end(key)
        now = self.clock()
        state.updated = now
        self._ops += 1
        if self._ops & 255 == 0:
            self._expire(now)
        return state

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        with self._lock:
            return fn(self._get(key, config))

    def attach(self, key: str, config: LoopDetectionConfig) -> RunState:
        """The live state of ``key`` for a caller that applies updates under ``state.lock``.

        The store marks the state ``detached`` when it drops it (expiry, eviction,
        delete); callers then attach again.
        """
        with self._lock:
            return self._get(key, config)

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        return self.transact(key, config, fn)

    def _expire(self, now: float) -> None:
        # Least recently used first, so expired runs sit at the front.
        limit = now - self.ttl_seconds
        states = self._states
        while states:
            key, state = next(iter(states.items()))
            if state.updated >= limit:
                break
            del states[key]
            state.detached = True

    def get(self, key: str) -> RunState | None:
        """The live state of ``key``, or ``None``."""
        with self._lock:
            return self._states.get(key)

    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The live state of ``key``, or ``None`` (``config`` is not needed in memory)."""
        return self.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._states)

    def expire(self, now: float | None = None) -> None:
        """Drop runs idle for longer than the TTL now (normally done on the side)."""
        with self._lock:
            self._expire(self.clock() if now is None else now)

    def check(self) -> None:
        """Nothing to check: memory is always usable."""

    def delete(self, key: str) -> None:
        with self._lock:
            state = self._states.pop(key, None)
            if state is not None:
                state.detached = True

    def clear(self) -> None:
        with self._lock:
            for state in self._states.values():
                state.detached = True
            self._states.clear()

    def close(self) -> None:
        self.clear()


class LocalStore(BaseStore, InProcess):
    """A store for one thread: a plain dict, no lock, no LRU, no expiry.

    For callers that end every run they start (trace replay), where the
    bookkeeping of :class:`MemoryStore` is pure overhead.
    """

    def __init__(self) -> None:
        self._states: dict[str, RunState] = {}

    @classmethod
    def from_url(cls, url: str, *, ttl_seconds: float | None = None) -> LocalStore:
        return cls()

    def attach(self, key: str, config: LoopDetectionConfig) -> RunState:
        """The live state of ``key`` (the guard then skips the per-call store lookup)."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = RunState.new(config)
        return state

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        return fn(self.attach(key, config))

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        return self.transact(key, config, fn)

    def delete(self, key: str) -> None:
        state = self._states.pop(key, None)
        if state is not None:
            state.detached = True

    def close(self) -> None:
        for state in self._states.values():
            state.detached = True
        self._states.clear()

    def __len__(self) -> int:
        return len(self._states)
