"""loopwarden's own JSONL run record (written by ``LoopGuard(run_record=...)``).

The line schema is defined in :mod:`loopwarden.runrecord`: a ``type`` of
``run_start``, ``call``, ``outcome``, ``compaction``, ``event`` or ``run_end``
and a ``run_id`` on every line; calls and outcomes carry the hashes
the live guard computed, so replay feeds them to ``before_call_hashed``/
``after_call_hashed`` and never needs the raw params.

A run is one ``run_id``. Several processes may append to one file, so runs
interleave; a run is closed at its ``run_end`` line, at the end of the file,
when a new ``run_start`` reuses its id, or when more than ``max_open_runs``
runs are open at once (the least recently active half is closed; a later line
of a closed run starts a new run with the same id). That bound keeps memory
constant on huge files. Within a run, outcome lines are paired with their
calls here (see :class:`_Run`), so an outcome written before its call is
replayed after it, and one whose call never comes is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..runrecord import CALL, COMPACTION, EVENT, LINE_TYPES, OUTCOME, RUN_END, RUN_START
from ._common import ReadContext
from ._runbook import MAX_PENDING
from ._sink import Loc, TraceSink

__all__ = ["MAX_OPEN_RUNS", "read"]

MAX_OPEN_RUNS = 256
_UNSET = object()


class _Run:
    """What the reader keeps of an open run to pair its calls and outcomes.

    Several writers append to one record, so an outcome line may come before its
    call's line: it waits (``early``) and is fed right after that call, or is
    reported when the run closes without it. A call without a call id gets the id
    replay gives it (``#N``, its number in the run), and an outcome without one is
    paired with the newest waiting call of the same args hash, as the live guard
    pairs them. Each table holds at most ``MAX_PENDING`` entries.
    """

    __slots__ = ("calls", "early", "pending", "unnamed")

    def __init__(self) -> None:
        self.calls = 0
        self.pending: dict[str, None] = {}
        """Ids of calls whose outcome line has not come yet."""
        self.unnamed: dict[str, list[str]] = {}
        """Args hash -> the ``#N`` ids of calls without an id that wait for their outcome."""
        self.early: dict[str, list[tuple[Loc, tuple[Any, ...]]]] = {}
        """Call id (or ``\\x1f`` + args hash) -> outcome lines that came before their call."""


def read(
    records: Iterable[tuple[Loc, Any]],
    sink: TraceSink,
    ctx: ReadContext,
    *,
    max_open_runs: int = MAX_OPEN_RUNS,
) -> None:
    """Replay a run record. ``records`` may hold raw JSONL lines (bytes) or parsed values."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    call_hashed = sink.call_hashed
    outcome_hashed = sink.outcome_hashed
    prefix = f"{ctx.index}\x1f"
    # run id -> its _Run; insertion order is recency (a run is re-inserted when it
    # becomes active again), so the front holds the least recently active runs.
    active: dict[str, _Run] = {}
    prev_run: object = _UNSET
    key = ""
    run = _Run()
    for loc, raw in records:
        if raw.__class__ is bytes:
            try:
                rec = loads(raw)
            except decode_error as exc:
                if raw.strip():
                    sink.problem(loc, f"not valid JSON ({exc})")
                continue
        else:
            rec = raw
        if rec.__class__ is not dict:
            sink.problem(loc, "expected a JSON object with a 'type'")
            continue
        kind = rec.get("type")
        run_id = rec.get("run_id")
        if kind == RUN_END:
            if run_id.__class__ is str and run_id in active:
                _close(sink, prefix, run_id, active.pop(run_id))
            prev_run = _UNSET
            continue
        if run_id != prev_run or kind == RUN_START:
            if run_id.__class__ is not str or not run_id:
                sink.problem(loc, f"{kind or 'record'} without a run_id")
                continue
            key = prefix + run_id
            found = active.get(run_id)
            if kind == RUN_START or found is None or not sink.has_run(key):
                if kind.__class__ is not str or kind not in LINE_TYPES:
                    sink.problem(loc, f"unknown record type {kind!r}")
                    continue
                if len(active) >= max_open_runs:
                    _close_oldest(active, sink, prefix)
                if found is not None:
                    del active[run_id]
                    _report_early(sink, found)  # begin_run ends the old run
                session = rec.get("session_id") if kind == RUN_START else None
                agent = rec.get("agent_id") if kind == RUN_START else None
                sink.begin_run(
                    key,
                    label=run_id,
                    line=loc,
                    session=session if isinstance(session, str) else None,
                    agent=agent if isinstance(agent, str) else None,
                )
                found = _Run()
            else:
                del active[run_id]  # re-inserted below as the most recently active
            active[run_id] = run = found
            prev_run = run_id
        if kind == CALL:
            tool = rec.get("tool")
            sig = rec.get("args_hash")
            if tool.__class__ is not str or sig.__class__ is not str:
                sink.problem(loc, "call without a tool name or args_hash")
                continue
            run.calls += 1
            given: Any = rec.get("call_id")
            named = given.__class__ is str
            # Without an id, the one replay gives the call: its number in the run.
            call_id: str = given if named else f"#{run.calls}"
            poll = rec.get("poll")
            call_hashed(
                key,
                call_id,
                tool,
                sig,
                loc,
                rec.get("params"),
                poll if poll.__class__ is bool else None,
            )
            if rec.get("decision") in ("block", "stop"):  # a tuple: the value may be unhashable
                continue  # not run: no outcome line follows
            slot = call_id if named else "\x1f" + sig
            waiting = run.early.get(slot) if run.early else None
            if waiting:  # its outcome line came first: fed now, after the call
                early_loc, args = waiting.pop(0)
                if not waiting:
                    del run.early[slot]
                outcome_hashed(key, call_id, args[0], sig, args[2], early_loc, args[3], args[4])
            else:
                _wait(run, call_id, sig, named)
        elif kind == OUTCOME:
            tool = rec.get("tool")
            sig = rec.get("args_hash")
            out = rec.get("outcome_hash")
            if tool.__class__ is not str or sig.__class__ is not str:
                sink.problem(loc, "outcome without a tool name or args_hash")
                continue
            if out is not None and out.__class__ is not str:
                sink.problem(loc, "outcome_hash must be a string or null")
                continue
            given = rec.get("call_id")
            unknown = rec.get("unknown_tool")
            args = (
                tool,
                sig,
                out,
                rec.get("is_error") is True,
                unknown if unknown.__class__ is str else None,
            )
            if given.__class__ is str:
                call_id = given
                if call_id in run.pending:
                    del run.pending[call_id]
                else:  # its call line has not come (yet)
                    _hold(sink, run, call_id, loc, args)
                    continue
            else:
                ids = run.unnamed.get(sig)
                if not ids:
                    _hold(sink, run, "\x1f" + sig, loc, args)
                    continue
                call_id = ids.pop()  # the newest waiting call of this args hash
                if not ids:
                    del run.unnamed[sig]
            outcome_hashed(key, call_id, tool, sig, out, loc, args[3], args[4])
        elif kind == COMPACTION:
            sink.compaction(key, loc)
        elif kind == EVENT:
            sink.live_event(key)

        elif kind != RUN_START:
            sink.problem(loc, f"unknown record type {kind!r}")
    for run_id, open_run in active.items():
        _close(sink, prefix, run_id, open_run)


def _close_oldest(active: dict[str, _Run], sink: TraceSink, prefix: str) -> None:
    """Close the least recently active half of the open runs."""
    for run_id in list(active)[: max(1, len(active) // 2)]:
        _close(sink, prefix, run_id, active.pop(run_id))


def _close(sink: TraceSink, prefix: str, run_id: str, run: _Run) -> None:
    _report_early(sink, run)
    sink.end_run(prefix + run_id)


def _wait(run: _Run, call_id: str, sig: str, named: bool) -> None:
    """The call ran: its outcome line is expected (the oldest waiting call is forgotten
    past the bound: it was never answered)."""
    if named:
        pending = run.pending
        pending[call_id] = None
        if len(pending) > MAX_PENDING:
            del pending[next(iter(pending))]
        return
    unnamed = run.unnamed
    ids = unnamed.get(sig)
    if ids is None:
        ids = unnamed[sig] = []
        if len(unnamed) > MAX_PENDING:
            del unnamed[next(iter(unnamed))]
    ids.append(call_id)
    if len(ids) > MAX_PENDING:
        del ids[0]


def _hold(sink: TraceSink, run: _Run, slot: str, loc: Loc, args: tuple[Any, ...]) -> None:
    """An outcome line before its call's: kept until that call comes (bounded)."""
    early = run.early
    waiting = early.get(slot)
    if waiting is None:
        waiting = early[slot] = []
        if len(early) > MAX_PENDING:
            for old_loc, old in early.pop(next(iter(early))):
                _report(sink, old_loc, old)
    waiting.append((loc, args))
    if len(waiting) > MAX_PENDING:
        _report(sink, *waiting.pop(0))


def _report(sink: TraceSink, loc: Loc, args: tuple[Any, ...]) -> None:
    sink.problem(loc, f"outcome of a {args[0]!r} call whose call line never came in its run")


def _report_early(sink: TraceSink, run: _Run) -> None:
    """Outcome lines whose call never came, each reported where it is."""
    for waiting in run.early.values():
        for loc, args in waiting:
            _report(sink, loc, args)
    run.early.clear()
