"""The rolling history of one run, with the counts the detectors need kept up to date.

Detection must not cost more as the window grows (``historySize`` may be 1000),
so every quantity the rolling detectors read is maintained incrementally as records are
added, completed and evicted; only rare events (an outcome that arrives out of
order) fall back to a bounded walk. Detectors read these quantities as plain
attributes, because a method call costs more than the read itself on a path
that runs before every tool call:

* ``records``: the records, oldest first;
* ``sigs[args_hash]``: a :class:`SigStats` per call signature in the window
  (records, records with an outcome, the no-progress streak and its outcome);
* ``pp_last``, ``pp_last_tool``, ``pp_other``, ``pp_tail``: the alternating
  tail (ping-pong): the newest signature and its tool, the newest earlier
  different signature, and how many records from the end alternate;
* ``Record.ustreak``: trailing records of one tool failing with one
  unknown-tool name, ending at that record.

A quantity for a new detector is kept the same way: updated in :meth:`add`,
:meth:`complete_pending` and :meth:`evict_oldest` in constant time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from .._util import json_bytes

__all__ = ["Record", "RunWindow", "SigStats"]

# Records and signature counters are created for every call: built with
# object.__new__ and slot stores, which skips one Python frame per object.
_new = object.__new__
RECENT_CALLS = 5
"""How far back a call may repeat another and still count as repeating a recent one."""


class Record:
    """One call in the history (tool, args hash, outcome hash); made by :meth:`RunWindow.add`."""

    __slots__ = (
        "args_hash",
        "call_id",
        "result_hash",
        "run_id",
        "seq",
        "timestamp",
        "tool_name",
        "unknown_tool_name",
        "ustreak",
        "veto",
    )

    tool_name: str
    args_hash: str
    call_id: str | None
    run_id: str | None
    result_hash: str | None
    """The outcome hash; ``None`` while the call is pending."""
    unknown_tool_name: str | None
    """The missing tool the outcome's error names, if any."""
    timestamp: float
    veto: bool
    """A blocked call: its outcome repeats the pattern it was blocked for."""
    seq: int
    """Position in the window's order of additions."""
    ustreak: int
    """Trailing records of this tool failing with this unknown-tool name, ending here."""

    @property
    def pending(self) -> bool:
        """True while the call has no recorded outcome."""
        return self.result_hash is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_name": self.tool_name,
            "args_hash": self.args_hash,
            "call_id": self.call_id,
            "run_id": self.run_id,
            "result_hash": self.result_hash,
            "unknown_tool_name": self.unknown_tool_name,
            "timestamp": self.timestamp,
            "veto": self.veto,
        }

    def __repr__(self) -> str:
        return (
            f"Record(tool_name={self.tool_name!r}, args_hash={self.args_hash[:24]!r}…, "
            f"call_id={self.call_id!r}, run_id={self.run_id!r}, "
            f"result_hash={(self.result_hash or '')[:16]!r}, veto={self.veto})"
        )


class SigStats:
    """Counts of one call signature in the window.

    ``count`` records, ``hashed`` of them with an outcome; ``streak`` newest
    outcomes in a row equal to ``latest``, whose record has ``newest_seq``.
    """

    __slots__ = ("count", "hashed", "latest", "newest_seq", "streak")

    count: int
    hashed: int
    streak: int
    latest: str | None
    newest_seq: int


def _ustreak(rec: Record, prev: Record | None) -> int:
    name = rec.unknown_tool_name
    if name is None:
        return 0
    if prev is not None and prev.unknown_tool_name == name and prev.tool_name == rec.tool_name:
        return prev.ustreak + 1
    return 1


def _row(r: Record) -> list[Any]:
    return [
        r.tool_name,
        r.args_hash,
        r.call_id,
        r.result_hash,
        r.unknown_tool_name,
        r.timestamp,
        int(r.veto),
    ]


def _encode_row(r: Record) -> bytes:
    return json_bytes(_row(r))


class RunWindow:
    """Records of one run in order, with incremental detector quantities.

    ``capacity`` bounds the window when the window evicts by itself (the runtime
    guard); ``ToolCallHistory`` shares one capacity across runs and evicts
    through :meth:`evict_oldest` instead (``capacity=None``).
    """

    __slots__ = (
        "_changed",
        "_dirty",
        "_enc",
        "capacity",
        "next_seq",
        "pp_last",
        "pp_last_tool",
        "pp_other",
        "pp_tail",
        "records",
        "sigs",
    )

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.records: deque[Record] = deque()
        self.sigs: dict[str, SigStats] = {}
        self.next_seq = 0
        """The ``seq`` the next added record gets."""
        self.pp_last: str | None = None
        self.pp_last_tool: str | None = None
        self.pp_other: str | None = None
        self.pp_tail = 0
        # Encoded rows for dump_parts(), kept once it is first asked for: None, or
        # one bytes per record, with records added or completed since in _dirty.
        self._enc: deque[bytes] | None = None
        self._dirty: list[Record] = []
        # Records added or completed since changed_rows() last ran (None: not tracked).
        self._changed: list[Record] | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    @property
    def last(self) -> Record | None:
        return self.records[-1] if self.records else None

    # -- adding ----------------------------------------------------------
    def add(
        self,
        tool_name: str,
        args_hash: str,
        call_id: str | None,
        result_hash: str | None,
        unknown_tool_name: str | None,
        timestamp: float,
        veto: bool = False,
        run_id: str | None = None,
    ) -> Record:
        """Append a new record (evicting the oldest when the window is full); returns it."""
        rec: Record = _new(Record)
        rec.tool_name = tool_name
        rec.args_hash = args_hash
        rec.call_id = call_id
        rec.run_id = run_id
        rec.result_hash = result_hash
        rec.unknown_tool_name = unknown_tool_name
        rec.timestamp = timestamp
        rec.veto = veto
        rec.ustreak = 0
        rec.seq = seq = self.next_seq
        self.next_seq = seq + 1
        sig = self.sigs.get(args_hash)
        if sig is None:
            sig = self.sigs[args_hash] = _new(SigStats)
            sig.count = sig.hashed = sig.streak = 0
            sig.latest = None
            sig.newest_seq = -1
        sig.count += 1
        records = self.records
        prev = records[-1] if records else None
        records.append(rec)
        enc = self._enc
        if enc is not None:
            enc.append(b"")
            self._mark_dirty(rec)
        if args_hash == self.pp_other:
            self.pp_tail += 1
            self.pp_other = self.pp_last
        elif args_hash == self.pp_last:
            self.pp_tail = 1
        else:
            self.pp_other = self.pp_last
            self.pp_tail = 2 if prev is not None else 1
        self.pp_last = args_hash
        self.pp_last_tool = tool_name
        if result_hash is not None:
            sig.hashed += 1
            # Added records are the newest of their signature.
            sig.streak = sig.streak + 1 if result_hash == sig.latest else 1
            sig.latest = result_hash
            sig.newest_seq = seq
            if unknown_tool_name is not None:
                rec.ustreak = _ustreak(rec, prev)
        capacity = self.capacity
        if capacity is not None and len(records) > capacity:
            self.evict_oldest()
        return rec

    def _recompute(self, args_hash: str, sig: SigStats) -> None:
        """Rebuild one signature's streak from the records (outcomes arrived out of order)."""
        streak, latest, newest = 0, None, -1
        for rec in reversed(self.records):
            if rec.args_hash != args_hash or rec.result_hash is None:
                continue
            if latest is None:
                latest, newest = rec.result_hash, rec.seq
            elif rec.result_hash != latest:
                break
            streak += 1
        sig.streak, sig.latest, sig.newest_seq = streak, latest, newest

    def complete_pending(
        self,
        args_hash: str,
        call_id: str | None,
        result_hash: str,
        unknown_tool_name: str | None,
    ) -> Record | None:
        """Give the newest pending record of ``args_hash`` (and ``call_id``, when given) its
        outcome; returns that record, or ``None`` when there is none."""
        sig = self.sigs.get(args_hash)
        if sig is None or sig.hashed == sig.count:
            return None
        records = self.records
        rec = records[-1]  # the common case: the newest record (this sig has one pending)
        if not (
            rec.result_hash is None
            and rec.args_hash == args_hash
            and (call_id is None or rec.call_id == call_id)
        ):
            for rec in reversed(records):
                if (
                    rec.result_hash is None
                    and rec.args_hash == args_hash
                    and (call_id is None or rec.call_id == call_id)
                ):
                    break
            else:
                return None
        rec.result_hash = result_hash
        rec.unknown_tool_name = unknown_tool_name
        if self._enc is not None:
            self._mark_dirty(rec)
        sig.hashed += 1
        if rec.seq > sig.newest_seq:
            sig.streak = sig.streak + 1 if result_hash == sig.latest else 1
            sig.latest = result_hash
            sig.newest_seq = rec.seq
        else:
            self._recompute(args_hash, sig)
        if records[-1] is rec:
            if unknown_tool_name is not None:
                rec.ustreak = _ustreak(rec, records[-2] if len(records) > 1 else None)
            return rec
        # Out of order (parallel calls): recompute unknown streaks from here on.
        start = rec.seq - records[0].seq
        prev = records[start - 1] if start > 0 else None
        for index in range(start, len(records)):
            cur = records[index]
            cur.ustreak = _ustreak(cur, prev) if cur.result_hash is not None else 0
            prev = cur
        return rec

    def evict_oldest(self) -> Record:
        rec = self.records.popleft()
        if self._enc is not None:
            self._enc.popleft()
        sig = self.sigs[rec.args_hash]
        sig.count -= 1
        if rec.result_hash is not None:
            # The streak holds the newest hashed records; if it holds all of
            # them, the oldest (this one) was part of it.
            if sig.streak == sig.hashed:
                sig.streak -= 1
            sig.hashed -= 1
            if sig.hashed == 0:
                sig.latest, sig.newest_seq, sig.streak = None, -1, 0
        if sig.count == 0:
            del self.sigs[rec.args_hash]
        return rec

    # -- queries used off the per-call path ---------------------------------
    def no_progress(self, args_hash: str) -> tuple[int, str | None]:
        """No-progress streak of ``args_hash`` and its latest outcome hash."""
        sig = self.sigs.get(args_hash)
        if sig is None:
            return 0, None
        return sig.streak, sig.latest

    def repeats_recent(self, sig: str) -> bool:
        """The signature's newest outcome is among the newest ``RECENT_CALLS`` calls before
        the current one: the call repeats a recent one (a wait or a counter may matter)."""
        stats = self.sigs.get(sig)
        return (
            stats is not None
            and stats.hashed > 0
            and self.next_seq - stats.newest_seq <= RECENT_CALLS + 1
        )

    def pp_evidence(self, tail: int) -> bool:
        """Every tail record has an outcome and each side kept one outcome hash."""
        newest = reversed(self.records)
        last_side = next(newest).result_hash
        other_side = next(newest).result_hash
        if last_side is None or other_side is None:
            return False
        expected = (last_side, other_side)
        flip = 0
        for rec in islice(newest, tail - 2):
            if rec.result_hash != expected[flip]:
                return False
            flip ^= 1
        return True

    # -- serialisation ---------------------------------------------------
    def dump(self) -> list[list[Any]]:
        return [_row(r) for r in self.records]

    def dump_parts(self) -> list[bytes]:
        """:meth:`dump` as pieces of JSON, for a writer that joins them once. Each row is
        encoded once while this window lives, so a store that keeps the state between
        writes (Redis) pays per step for the new rows only, not for the whole window."""
        enc = self._enc
        if enc is None:
            enc = self._enc = deque(map(_encode_row, self.records))
        elif self._dirty:
            self._reencode(enc)
        return [b"[", b",".join(enc), b"]"]

    def _reencode(self, enc: deque[bytes]) -> None:
        records = self.records
        first = records[0].seq if records else 0
        size = len(records)
        for rec in self._dirty:
            index = rec.seq - first
            if 0 <= index < size:  # else evicted since
                enc[index] = _encode_row(rec)
        self._dirty.clear()

    def _mark_dirty(self, rec: Record) -> None:
        dirty = self._dirty
        dirty.append(rec)
        changed = self._changed
        if changed is not None:
            changed.append(rec)
        if len(dirty) > len(self.records) + 64:
            # Nobody dumps this window any more: stop keeping rows for it.
            self._enc = None
            self._changed = None
            dirty.clear()

    def track(self, encoded: Iterable[bytes] | None = None) -> list[tuple[int, bytes]]:
        """Start logging the records added or completed, for :meth:`changed_rows`; returns
        ``(seq, encoded row)`` of every record. ``encoded``: the records' rows as a store
        already holds them (saves encoding them again)."""
        enc = self._enc = deque(map(_encode_row, self.records) if encoded is None else encoded)
        self._dirty.clear()
        self._changed = []
        return [(rec.seq, row) for rec, row in zip(self.records, enc, strict=True)]

    def changed_rows(self) -> list[tuple[int, bytes]] | None:
        """``(seq, encoded row)`` of the records added or completed since :meth:`track` or
        the last call, that are still in the window; ``None`` when the window was not
        tracked (or one step changed more than it holds): every record is to be written.

        A store that writes a run row by row (SQLite) calls it once per update, so an
        update costs the rows it changed, not the whole window."""
        changed = self._changed
        enc = self._enc
        if changed is None or enc is None:
            return None
        if self._dirty:
            self._reencode(enc)
        records = self.records
        first = records[0].seq if records else 0
        size = len(records)
        rows: dict[int, bytes] = {}
        for rec in changed:
            index = rec.seq - first
            if 0 <= index < size:  # else evicted since
                rows[rec.seq] = enc[index]
        changed.clear()
        return list(rows.items())

    @classmethod
    def load(
        cls, rows: list[list[Any]], capacity: int | None, run_id: str | None = None
    ) -> RunWindow:
        window = cls(capacity)
        add = window.add
        for tool, args, call_id, result, unknown, ts, veto in rows:
            add(tool, args, call_id, result, unknown, ts, bool(veto), run_id)
        return window
