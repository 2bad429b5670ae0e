"""In-process store: state objects in a dict, guarded by one lock."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..state import RunState

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore:
    """Keeps run states in memory; least recently used runs beyond ``max_runs`` are dropped.

    Thread-safe: one lock serialises updates. The update functions are pure CPU
    work of a few microseconds, so the lock is never held across I/O.
    """

    def __init__(self, *, ttl_seconds: float | None = None, max_runs: int = 10_000) -> None:
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else DEFAULT_STATE_TTL_SECONDS
        self.max_runs = max_runs
        self._states: OrderedDict[str, RunState] = OrderedDict()
        self._lock = threading.Lock()
        self._ops = 0

    @classmethod
    def from_url(cls, url: str, *, ttl_seconds: float | None = None) -> MemoryStore:
        return cls(ttl_seconds=ttl_seconds)

    def __len__(self) -> int:
        return len(self._states)

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        with self._lock:
            states = self._states
            state = states.get(key)
            if state is None:
                state = states[key] = RunState.new(config)
                if len(states) > self.max_runs:
                    states.popitem(last=False)
            else:
                states.move_to_end(key)
            now = time.time()
            state.updated = now
            self._ops += 1
            if self._ops & 255 == 0:
                self._expire(now)
            return fn(state)

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

    def get(self, key: str) -> RunState | None:
        with self._lock:
            return self._states.get(key)

    def delete(self, key: str) -> None:
        with self._lock:
            self._states.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()

    def close(self) -> None:
        self.clear()
