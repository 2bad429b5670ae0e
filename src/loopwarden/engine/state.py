"""Per-run guard state, and its compact serialised form for persistent stores.

Everything the runtime guard knows about one run lives in a :class:`RunState`:
the rolling window, delivered-warning buckets, pending notes, the
post-compaction guard, the unknown-tool streak and whether the run was stopped.
Stores keep these objects (memory) or their bytes (SQLite, Redis).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .._util import bounded_set
from ..errors import CircuitBreakerTripped, CompactionLoopPersisted, LoopAbort
from .compaction import PostCompactionGuard
from .extras import ExtraDetectors
from .window import RunWindow

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig

__all__ = ["RunState", "Stop"]

STATE_VERSION = 1
# Bounded per-run tables: they must not grow with a long run.
MAX_WARNING_KEYS = 256
MAX_CALL_KEYS = 64
MAX_MASKED = 64
"""Raw outcome hashes whose masked hash is remembered (in memory only, a cache)."""


@dataclass(frozen=True)
class Stop:
    """Why a run was ended; every later call of the run is refused with it."""

    tool: str
    count: int
    detector: str
    """``global_circuit_breaker``, ``unknown_tool_repeat`` or ``compaction_loop_persisted``."""
    message: str

    def error(self) -> LoopAbort:
        """The exception that ends the run."""
        cls = (
            CompactionLoopPersisted
            if self.detector == CompactionLoopPersisted.code
            else CircuitBreakerTripped
        )
        return cls(self.message, tool_name=self.tool, count=self.count, detector=self.detector)

    def to_json(self) -> dict[str, Any]:
        """The mapping form run states store (and older versions wrote)."""
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> Stop:
        return cls(str(raw["tool"]), int(raw["count"]), str(raw["detector"]), str(raw["message"]))


class RunState:
    """The guard's memory of one run."""

    __slots__ = (
        "blocked",
        "blocks",
        "buckets",
        "detached",
        "extra",
        "guard",
        "lock",
        "masked",
        "miss_count",
        "miss_name",
        "notes",
        "started",
        "stopped",
        "updated",
        "window",
    )

    def __init__(self, window: RunWindow, guard: PostCompactionGuard, updated: float = 0.0) -> None:
        self.window = window
        self.guard = guard
        """The post-compaction guard of the run."""
        self.buckets: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        self.blocked: dict[str, bool] = {}
        self.miss_name: str | None = None
        self.miss_count = 0
        self.stopped: Stop | None = None
        self.started = False
        self.blocks = 0
        """Calls blocked in a row (unknown-tool blocks aside): enough of them stop the run."""
        self.extra: ExtraDetectors | None = None
        """The runtime guard's extra detectors (issue 9), when the config has them on."""
        self.masked: dict[tuple[str, str], str] = {}
        """(tool, raw outcome hash) -> masked hash; a cache, rebuilt after a reload."""
        self.updated = updated
        """When the run was last used (the store's or the guard's clock), for expiry."""
        # Set by in-process stores: a store that hands out live state objects
        # shares its lock through them (None: single-threaded) and marks states
        # it has dropped.
        self.lock: AbstractContextManager[Any] | None = None
        self.detached = False

    @classmethod
    def new(cls, config: LoopDetectionConfig, window: RunWindow | None = None) -> RunState:
        state = cls(
            window if window is not None else RunWindow(capacity=config.history_size),
            PostCompactionGuard(
                config.post_compaction_guard.window_size, enabled=config.enabled is not False
            ),
        )
        extras = config.extras
        if extras is not None and config.enabled is True and extras.active:
            state.extra = ExtraDetectors(extras)
        return state

    def should_deliver(self, key: str, count: int, every: int) -> bool:
        """Bucketed warning delivery: at ``every``, ``2*every``, ... per key (SPEC 6.3)."""
        bucket = count // every
        if bucket <= self.buckets.get(key, 0):
            return False
        self.buckets.pop(key, None)
        bounded_set(self.buckets, key, bucket, MAX_WARNING_KEYS)
        return True

    def add_note(self, call_key: str, note: str) -> None:
        bounded_set(self.notes, call_key, note, MAX_CALL_KEYS)

    def mark_blocked(self, call_key: str) -> None:
        bounded_set(self.blocked, call_key, True, MAX_CALL_KEYS)

    # -- serialisation -----------------------------------------------------
    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list[bytes]:
        """:meth:`to_bytes` in pieces: a large window is copied once, by whoever joins them."""
        stopped = self.stopped
        rest = orjson.dumps(
            {
                "v": STATE_VERSION,
                "g": self.guard.dump(),
                "b": list(self.buckets.items()),
                "n": list(self.notes.items()),
                "x": list(self.blocked),
                "m": [self.miss_name, self.miss_count],
                "s": None if stopped is None else stopped.to_json(),
                "st": self.started,
                "u": self.updated,
                "k": self.blocks,
                "e": None if self.extra is None else self.extra.dump(),
            }
        )
        # The window is most of the state: spliced in from its incrementally kept rows.
        return [b'{"h":', *self.window.dump_parts(), b",", rest[1:]]

    @classmethod
    def from_bytes(cls, data: bytes, config: LoopDetectionConfig) -> RunState:
        """Rebuild a state; the current config decides window size and guard settings."""
        raw = orjson.loads(data)
        if not isinstance(raw, dict) or raw.get("v") != STATE_VERSION:
            raise ValueError(
                f"unsupported run state version {raw.get('v') if isinstance(raw, dict) else raw!r}"
            )
        state = cls.new(config, RunWindow.load(raw["h"], config.history_size))
        state.guard.load(raw["g"])
        state.buckets = dict(raw["b"])
        state.notes = dict(raw["n"])
        state.blocked = dict.fromkeys(raw["x"], True)
        state.miss_name, state.miss_count = raw["m"][0], int(raw["m"][1])
        stopped = raw["s"]
        state.stopped = None if stopped is None else Stop.from_json(stopped)
        state.started = bool(raw.get("st", False))
        state.updated = float(raw["u"])
        state.blocks = int(raw.get("k", 0))
        extra = raw.get("e")
        if state.extra is not None and extra is not None:
            state.extra.load(extra)
        return state
