"""Per-run guard state, and its compact serialised form for persistent stores.

Everything the runtime guard knows about one run lives in a :class:`RunState`:
the rolling window, delivered-warning buckets, pending notes, the
post-compaction guard, the unknown-tool streak and whether the run was stopped.
Stores keep these objects (memory) or their bytes (SQLite, Redis).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ._window import RunWindow
from .compaction import PostCompactionGuard
from .config import LoopDetectionConfig

__all__ = ["RunState"]

STATE_VERSION = 1
# Bounded per-run tables: they must not grow with a long run.
MAX_WARNING_KEYS = 256
MAX_CALL_KEYS = 64


def _bounded_set(table: dict[str, Any], key: str, value: Any, limit: int) -> None:
    """Insert, dropping the oldest key past ``limit`` (insertion order is age)."""
    table[key] = value
    if len(table) > limit:
        del table[next(iter(table))]


class RunState:
    """The guard's memory of one run."""

    __slots__ = (
        "blocked",
        "buckets",
        "detached",
        "guard",
        "lock",
        "miss_count",
        "miss_name",
        "notes",
        "started",
        "stopped",
        "updated",
        "window",
    )

    def __init__(self, window: RunWindow, guard: PostCompactionGuard) -> None:
        self.window = window
        self.guard = guard
        self.buckets: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        self.blocked: dict[str, bool] = {}
        self.miss_name: str | None = None
        self.miss_count = 0
        self.stopped: dict[str, Any] | None = None
        self.started = False
        self.updated = time.time()
        # Set by in-process stores: a store that hands out live state objects
        # shares its lock through them (None: single-threaded) and marks states
        # it has dropped.
        self.lock: AbstractContextManager[Any] | None = None
        self.detached = False

    @classmethod
    def new(cls, config: LoopDetectionConfig) -> RunState:
        return cls(
            RunWindow(capacity=config.history_size),
            PostCompactionGuard(
                config.post_compaction_guard.window_size, enabled=config.enabled is not False
            ),
        )

    def should_deliver(self, key: str, count: int, every: int) -> bool:
        """Bucketed warning delivery: at ``every``, ``2*every``, ... per key (SPEC 6.3)."""
        bucket = count // every
        if bucket <= self.buckets.get(key, 0):
            return False
        self.buckets.pop(key, None)
        _bounded_set(self.buckets, key, bucket, MAX_WARNING_KEYS)
        return True

    def add_note(self, call_key: str, note: str) -> None:
        _bounded_set(self.notes, call_key, note, MAX_CALL_KEYS)

    def mark_blocked(self, call_key: str) -> None:
        _bounded_set(self.blocked, call_key, True, MAX_CALL_KEYS)

    # -- serialisation -----------------------------------------------------
    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": STATE_VERSION,
                "h": self.window.dump(),
                "g": self.guard.dump(),
                "b": list(self.buckets.items()),
                "n": list(self.notes.items()),
                "x": list(self.blocked),
                "m": [self.miss_name, self.miss_count],
                "s": self.stopped,
                "st": self.started,
                "u": self.updated,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, config: LoopDetectionConfig) -> RunState:
        """Rebuild a state; the current config decides window size and guard settings."""
        raw = orjson.loads(data)
        if not isinstance(raw, dict) or raw.get("v") != STATE_VERSION:
            raise ValueError(
                f"unsupported run state version {raw.get('v') if isinstance(raw, dict) else raw!r}"
            )
        state = cls.new(config)
        state.window = RunWindow.load(raw["h"], config.history_size, None)
        state.guard.load(raw["g"])
        state.buckets = {str(k): int(v) for k, v in raw["b"]}
        state.notes = {str(k): str(v) for k, v in raw["n"]}
        state.blocked = {str(k): True for k in raw["x"]}
        state.miss_name, state.miss_count = raw["m"][0], int(raw["m"][1])
        state.stopped = raw["s"]
        state.started = bool(raw.get("st", False))
        state.updated = float(raw["u"])
        return state
