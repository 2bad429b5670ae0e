"""A store that runs every transaction twice, as an optimistic backend may.

Redis ``WATCH``/``MULTI`` runs the update function, finds that another client
changed the key, and runs it again on the fresh value. This double does that
every time: the first run works on a copy that is thrown away, the second on
another copy that is kept. Whatever the function does besides changing its
state therefore happens twice, which is what the guard must never rely on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from loopwarden.config import LoopDetectionConfig
from loopwarden.engine.state import RunState
from loopwarden.stores import BaseStore

T = TypeVar("T")


class TwiceStore(BaseStore):
    """Run states as bytes; each transaction runs its function twice and keeps the second."""

    def __init__(self) -> None:
        self._rows: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.runs = 0
        """How many times update functions ran."""

    def _fresh(self, key: str, config: LoopDetectionConfig) -> RunState:
        row = self._rows.get(key)
        return RunState.new(config) if row is None else RunState.from_bytes(row, config)

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        with self._lock:
            fn(self._fresh(key, config))  # the attempt that lost the race
            state = self._fresh(key, config)
            result = fn(state)
            self.runs += 2
            self._rows[key] = state.to_bytes()
            return result

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        return self.transact(key, config, fn)

    def delete(self, key: str) -> None:
        with self._lock:
            self._rows.pop(key, None)

    def close(self) -> None:
        with self._lock:
            self._rows.clear()
