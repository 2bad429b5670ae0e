"""Per-run guard state, and its compact serialised form for persistent stores.

Everything the runtime guard knows about one run lives in a :class:`RunState`:
the rolling window, delivered-warning buckets, pending notes, the
post-compaction guard, the state of each rule that keeps one, and whether the run
was stopped. Stores keep these objects (memory) or their bytes (Redis: :meth:`RunState.to_parts` /
:meth:`RunState.from_bytes`; SQLite: the window's rows one by one, and the rest as
:meth:`RunState.rest_bytes` / :meth:`RunState.from_parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .._util import bounded_set, json_bytes, json_value
from ..errors import CircuitBreakerTripped, CompactionLoopPersisted, LoopAbort
from .compaction import PostCompactionGuard
from .detectors import Detection, Observed, Plan, plan_for
from .window import RunWindow

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig

__all__ = ["RunState", "Stop"]

STATE_VERSION = 2
# Bounded per-run tables: they must not grow with a long run.
MAX_WARNING_KEYS = 256
MAX_CALL_KEYS = 64
MAX_MASKED = 64
"""Raw outcome hashes whose masked hash is remembered (in memory only, a cache)."""
MAX_POLL_SIGS = 16
"""Poll call signatures remembered per run."""
MAX_WAITS = 16
"""Polls of a running job whose timing is kept per run."""


@dataclass(frozen=True)
class Stop:
    """Why a run was ended; every later call of the run is refused with it."""

    tool: str
    count: int
    code: str
    """The rule that ended the run (its name): ``consecutive_repeat``, ``cycle``,
    ``failure_streak``, ``blocks_in_a_row``, ``unknown_tool_repeat``,
    ``global_circuit_breaker`` or ``compaction_loop_persisted``."""
    message: str

    def error(self) -> LoopAbort:
        """The exception that ends the run."""
        if self.code == CompactionLoopPersisted.code:
            return CompactionLoopPersisted(self.message, tool_name=self.tool, count=self.count)
        return CircuitBreakerTripped(
            self.message, tool_name=self.tool, count=self.count, detector=self.code
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> Stop:
        return cls(str(raw["tool"]), int(raw["count"]), str(raw["code"]), str(raw["message"]))


class RunState:
    """The guard's memory of one run.

    Besides the window and the post-compaction guard, the engine keeps a few facts every
    rule may read: the unknown-tool miss streak, blocked calls in a row, the tool whose
    newest outcome failed and the run's recent poll signatures. Each rule that keeps state
    of its own has its object in ``detectors`` (in the order of ``plan.detectors``).
    """

    __slots__ = (
        "blocked",
        "blocks",
        "buckets",
        "calls",
        "checks",
        "detached",
        "detectors",
        "dumpers",
        "ev",
        "failed_tool",
        "failure_observers",
        "guard",
        "lock",
        "masked",
        "miss_count",
        "miss_name",
        "notes",
        "observers",
        "plan",
        "polls",
        "refused",
        "started",
        "stopped",
        "updated",
        "waits",
        "window",
    )

    def __init__(
        self, window: RunWindow, guard: PostCompactionGuard, plan: Plan, updated: float = 0.0
    ) -> None:
        self.window = window
        self.guard = guard
        """The post-compaction guard of the run."""
        self.plan = plan
        """The rules of the run's config."""
        self.detectors = dets = plan.fresh()
        """The run's rule objects, in the order of ``plan.detectors``."""
        # Bound hooks, made once per run: a loop over rules of different classes calling
        # ``det.observe`` looks the method up generically on every call.
        self.observers = tuple(dets[i].observe for i in plan.observers)
        self.failure_observers = tuple(dets[i].observe for i in plan.failure_observers)
        self.ev = Observed("", "", None)
        """The run's outcome as the rules observe it (refilled for each outcome)."""
        self.dumpers: tuple[tuple[str, Callable[[], Any]], ...] | None = None
        """(name, bound ``dump``) of the rules that keep state, made on first encoding."""
        self.checks: dict[int, tuple[tuple[bool, Callable[..., Detection | None]], ...]] = {}
        """Facts -> (OpenClaw's rule, bound ``check``) of the rules to ask, filled on use."""
        self.buckets: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        self.blocked: dict[str, bool] = {}
        self.miss_name: str | None = None
        self.miss_count = 0
        """Consecutive calls of ``miss_name``, a tool the run's registered tools do not name."""
        self.stopped: Stop | None = None
        self.started = False
        self.blocks = 0
        """Calls blocked in a row (unknown-tool blocks aside)."""
        self.failed_tool: str | None = None
        """The tool whose outcome, the newest of the run, was a failure (vetoes of a failing
        tool keep it)."""
        self.polls: list[str] = []
        """Signatures of the run's recent known-poll calls (waits, not spins)."""
        self.calls = 0
        """Calls the run asked for (blocked and refused ones included)."""
        self.refused = 0
        """Calls the guard did not let run: blocks, and calls of a stopped run."""
        self.waits: dict[str, list[float]] = {}
        """Poll signature -> [first, newest, polls] while its result says the job still runs
        (at most ``MAX_WAITS``): for the wait-specific wording of a poll's warning and block."""
        self.masked: dict[tuple[str, str], str] = {}
        """(tool, raw outcome hash) -> masked hash; a cache, rebuilt after a reload."""
        self.updated = updated
        """When the run was last used (the store's or the guard's clock), for expiry."""
        # Set by in-process stores: a store that hands out live state objects
        # shares its lock through them (None: single-threaded) and marks states
        # it has dropped.
        self.lock: AbstractContextManager[Any] | None = None
        self.detached = False

    def checks_for(self, facts: int) -> tuple[tuple[bool, Callable[..., Detection | None]], ...]:
        """The rules to ask about a call for which ``facts`` hold, in precedence order."""
        plan, dets = self.plan, self.detectors
        found = self.checks[facts] = tuple(
            (plan.openclaw[i], dets[i].check) for i in plan.checkers(facts)
        )
        return found

    @classmethod
    def new(cls, config: LoopDetectionConfig, window: RunWindow | None = None) -> RunState:
        return cls(
            window if window is not None else RunWindow(capacity=config.history_size),
            PostCompactionGuard(
                config.post_compaction_guard.window_size, enabled=config.enabled is not False
            ),
            plan_for(config),
        )

    def should_deliver(self, key: str, count: int, every: int) -> bool:
        """Bucketed warning delivery: at ``every``, ``2*every``, ... per key."""
        bucket = count // every if every > 0 else count
        if bucket <= self.buckets.get(key, 0):
            return False
        self.buckets.pop(key, None)
        bounded_set(self.buckets, key, bucket, MAX_WARNING_KEYS)
        return True

    def add_note(self, call_key: str, note: str) -> None:
        bounded_set(self.notes, call_key, note, MAX_CALL_KEYS)

    def mark_blocked(self, call_key: str) -> None:
        bounded_set(self.blocked, call_key, True, MAX_CALL_KEYS)

    def note_poll(self, sig: str) -> None:
        polls = self.polls
        if sig not in polls:
            polls.append(sig)
            if len(polls) > MAX_POLL_SIGS:
                del polls[0]

    def veto_outcome(self, sig: str, det: Detection) -> str:
        """The outcome a block of ``sig`` for ``det`` records: the one the pattern repeats."""
        return det.latest_result_hash or self.window.no_progress(sig)[1] or "veto"

    # -- serialisation -----------------------------------------------------
    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list[bytes]:
        """:meth:`to_bytes` in pieces: a large window is copied once, by whoever joins them."""
        rest = self._rest()
        rest["u"] = self.updated
        data = json_bytes(rest)
        # The window is most of the state: spliced in from its incrementally kept rows.
        return [b'{"h":', *self.window.dump_parts(), b",", data[1:]]

    def rest_bytes(self) -> bytes:
        """Everything but the window and the time of last use, encoded (read back by
        :meth:`from_parts`): what a store that keeps the window's rows apart writes."""
        return json_bytes(self._rest())

    def _rest(self) -> dict[str, Any]:
        stopped = self.stopped
        dumpers = self.dumpers
        if dumpers is None:
            dumpers = self.dumpers = tuple(
                (det.name, det.dump) for det in self.detectors if det.stateful
            )
        return {
            "v": STATE_VERSION,
            "g": self.guard.dump(),
            "b": list(self.buckets.items()),
            "n": list(self.notes.items()),
            "x": list(self.blocked),
            "m": [self.miss_name, self.miss_count],
            "s": None if stopped is None else stopped.to_json(),
            "st": self.started,
            "k": self.blocks,
            "f": self.failed_tool,
            "p": self.polls,
            "c": [self.calls, self.refused],
            "w": list(self.waits.items()),
            "d": {name: dump() for name, dump in dumpers},
        }

    @classmethod
    def from_bytes(cls, data: bytes, config: LoopDetectionConfig) -> RunState:
        """Rebuild a state; the current config decides window size and the rules."""
        raw = _versioned(json_value(data))
        state = cls.new(config, RunWindow.load(raw["h"], config.history_size))
        state._load_rest(raw)
        state.updated = float(raw["u"])
        return state

    @classmethod
    def from_parts(
        cls, window: RunWindow, rest: bytes, config: LoopDetectionConfig, updated: float = 0.0
    ) -> RunState:
        """A state of ``window`` and the rest as :meth:`rest_bytes` encoded it."""
        raw = _versioned(json_value(rest))
        state = cls.new(config, window)
        state._load_rest(raw)
        state.updated = updated
        return state

    def _load_rest(self, raw: dict[str, Any]) -> None:
        self.guard.load(raw["g"])
        self.buckets = dict(raw["b"])
        self.notes = dict(raw["n"])
        self.blocked = dict.fromkeys(raw["x"], True)
        self.miss_name, self.miss_count = raw["m"][0], int(raw["m"][1])
        stopped = raw["s"]
        self.stopped = None if stopped is None else Stop.from_json(stopped)
        self.started = bool(raw["st"])
        self.blocks = int(raw["k"])
        self.failed_tool = raw["f"]
        self.polls = [str(p) for p in raw["p"]][-MAX_POLL_SIGS:]
        # Absent in states written before they were counted.
        tally = raw.get("c")
        if tally:
            self.calls, self.refused = int(tally[0]), int(tally[1])
        self.waits = {str(s): [float(x) for x in w] for s, w in raw.get("w", ())[-MAX_WAITS:]}
        kept = raw["d"]
        for det in self.detectors:
            if det.stateful and det.name in kept:
                det.load(kept[det.name])


def _versioned(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("v") != STATE_VERSION:
        raise ValueError(
            f"unsupported run state version {raw.get('v') if isinstance(raw, dict) else raw!r}"
        )
    return raw
