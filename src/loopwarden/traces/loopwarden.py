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
constant on huge files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..runrecord import CALL, COMPACTION, EVENT, LINE_TYPES, OUTCOME, RUN_END, RUN_START
from ._common import ReadContext
from ._sink import Loc, TraceSink

__all__ = ["MAX_OPEN_RUNS", "read"]

MAX_OPEN_RUNS = 256
_UNSET = object()


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
    # run id -> None; insertion order is recency (a run is re-inserted when it
    # becomes active again), so the front holds the least recently active runs.
    active: dict[str, None] = {}
    prev_run: object = _UNSET
    key = ""
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
                del active[run_id]
                sink.end_run(prefix + run_id)
            prev_run = _UNSET
            continue
        if run_id != prev_run or kind == RUN_START:
            if run_id.__class__ is not str or not run_id:
                sink.problem(loc, f"{kind or 'record'} without a run_id")
                continue
            key = prefix + run_id
            if kind == RUN_START or run_id not in active or not sink.has_run(key):
                if kind.__class__ is not str or kind not in LINE_TYPES:
                    sink.problem(loc, f"unknown record type {kind!r}")
                    continue
                if len(active) >= max_open_runs:
                    _close_oldest(active, sink, prefix)
                active.pop(run_id, None)
                session = rec.get("session_id") if kind == RUN_START else None
                agent = rec.get("agent_id") if kind == RUN_START else None
                sink.begin_run(
                    key,
                    label=run_id,
                    line=loc,
                    session=session if isinstance(session, str) else None,
                    agent=agent if isinstance(agent, str) else None,
                )
            else:
                del active[run_id]  # re-inserted below as the most recently active
            active[run_id] = None
            prev_run = run_id
        if kind == CALL:
            tool = rec.get("tool")
            sig = rec.get("args_hash")
            if tool.__class__ is not str or sig.__class__ is not str:
                sink.problem(loc, "call without a tool name or args_hash")
                continue
            call_id = rec.get("call_id")
            poll = rec.get("poll")
            call_hashed(
                key,
                call_id if call_id.__class__ is str else None,
                tool,
                sig,
                loc,
                rec.get("params"),
                poll if poll.__class__ is bool else None,
            )
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
            call_id = rec.get("call_id")
            unknown = rec.get("unknown_tool")
            outcome_hashed(
                key,
                call_id if call_id.__class__ is str else None,
                tool,
                sig,
                out,
                loc,
                rec.get("is_error") is True,
                unknown if unknown.__class__ is str else None,
            )
        elif kind == COMPACTION:
            sink.compaction(key, loc)
        elif kind == EVENT:
            sink.live_event(key)

        elif kind != RUN_START:
            sink.problem(loc, f"unknown record type {kind!r}")
    for run_id in active:
        sink.end_run(prefix + run_id)


def _close_oldest(active: dict[str, None], sink: TraceSink, prefix: str) -> None:
    """Close the least recently active half of the open runs."""
    for run_id in list(active)[: max(1, len(active) // 2)]:
        del active[run_id]
        sink.end_run(prefix + run_id)
