"""loopwarden's JSONL run record: the line schema, and the writer.

``LoopGuard(run_record=PATH)`` appends one JSON object per line; ``loopwarden
replay`` reads them back (:mod:`loopwarden.traces.loopwarden`). Every line has
a ``type`` and a ``run_id``; the fields per type are the ``*Line`` types below.
Calls and outcomes carry the hashes the live guard computed, so a replay never
needs the raw params, which are written only with ``log_params=True``.

Lines are written with one ``write`` in append mode, so several processes can
share a file; their runs interleave.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

import orjson

from ._canonical import to_plain
from ._logging import logger
from .events import LoopEvent

__all__ = [
    "CALL",
    "COMPACTION",
    "EVENT",
    "LINE_TYPES",
    "OUTCOME",
    "RUN_END",
    "RUN_START",
    "CallLine",
    "CompactionLine",
    "JsonlRunRecord",
    "OutcomeLine",
    "RunEndLine",
    "RunStartLine",
]

RUN_START = "run_start"
CALL = "call"
OUTCOME = "outcome"
COMPACTION = "compaction"
EVENT = "event"
RUN_END = "run_end"
LINE_TYPES = frozenset({RUN_START, CALL, OUTCOME, COMPACTION, EVENT, RUN_END})


class RunStartLine(TypedDict):
    """The first call of a run: who runs it, and the effective config."""

    type: Literal["run_start"]
    ts: float
    run_id: str
    session_id: str | None
    agent_id: str | None
    config: dict[str, Any]
    """The effective ``tools.loopDetection`` block (camelCase)."""


class CallLine(TypedDict):
    """A call the model made, and what the guard decided."""

    type: Literal["call"]
    ts: float
    run_id: str
    call_id: str | None
    tool: str
    args_hash: str
    poll: bool
    params: Any
    """The raw params with ``log_params``, else ``null``."""
    decision: Literal["allow", "warn", "block", "stop"]


class OutcomeLine(TypedDict):
    """The outcome of an allowed call."""

    type: Literal["outcome"]
    ts: float
    run_id: str
    call_id: str | None
    tool: str
    args_hash: str
    outcome_hash: str | None
    is_error: bool
    unknown_tool: str | None
    result: Any
    """The raw result (or error) with ``log_params``, else ``null``."""


class CompactionLine(TypedDict):
    """The runner compacted the context (the post-compaction guard was armed)."""

    type: Literal["compaction"]
    ts: float
    run_id: str


class RunEndLine(TypedDict):
    """The run ended (``RunGuard.end``)."""

    type: Literal["run_end"]
    ts: float
    run_id: str


# An ``event`` line is ``{"type": "event", **LoopEvent.to_dict()}``.


class JsonlRunRecord:
    """Appends run records (calls, outcomes, compactions, events) to a JSONL file.

    It is also an event sink: ``record(event)`` writes an ``event`` line. I/O
    errors are logged and swallowed: the agent goes on without its record.
    """

    def __init__(self, path: str | os.PathLike[str], *, log_params: bool = False) -> None:
        self.path = os.fspath(path)
        self.log_params = log_params
        self._lock = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one line."""
        try:
            line = orjson.dumps(record, default=_fallback) + b"\n"
            with self._lock:
                os.write(self._open(), line)
        except Exception:
            logger.exception("loopwarden could not write the run record %s", self.path)

    def raw(self, value: Any) -> Any:
        """``value`` as JSON data if params logging is on, else ``None``."""
        return to_plain(value) if self.log_params else None

    # -- one method per line type ----------------------------------------------
    def run_start(
        self,
        ts: float,
        run_id: str,
        session_id: str | None,
        agent_id: str | None,
        config: dict[str, Any],
    ) -> None:
        line: RunStartLine = {
            "type": "run_start",
            "ts": ts,
            "run_id": run_id,
            "session_id": session_id,
            "agent_id": agent_id,
            "config": config,
        }
        self.write(line)

    def call(
        self,
        ts: float,
        run_id: str,
        call_id: str | None,
        tool: str,
        args_hash: str,
        poll: bool,
        params: Any,
        decision: Literal["allow", "warn", "block", "stop"],
    ) -> None:
        line: CallLine = {
            "type": "call",
            "ts": ts,
            "run_id": run_id,
            "call_id": call_id,
            "tool": tool,
            "args_hash": args_hash,
            "poll": poll,
            "params": self.raw(params),
            "decision": decision,
        }
        self.write(line)

    def outcome(
        self,
        ts: float,
        run_id: str,
        call_id: str | None,
        tool: str,
        args_hash: str,
        outcome_hash: str | None,
        is_error: bool,
        unknown_tool: str | None,
        result: Any,
    ) -> None:
        line: OutcomeLine = {
            "type": "outcome",
            "ts": ts,
            "run_id": run_id,
            "call_id": call_id,
            "tool": tool,
            "args_hash": args_hash,
            "outcome_hash": outcome_hash,
            "is_error": is_error,
            "unknown_tool": unknown_tool,
            "result": self.raw(result),
        }
        self.write(line)

    def compaction(self, ts: float, run_id: str) -> None:
        line: CompactionLine = {"type": "compaction", "ts": ts, "run_id": run_id}
        self.write(line)

    def run_end(self, ts: float, run_id: str) -> None:
        line: RunEndLine = {"type": "run_end", "ts": ts, "run_id": run_id}
        self.write(line)

    def __call__(self, event: LoopEvent) -> None:
        self.write({"type": EVENT, **event.to_dict()})

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _fallback(value: Any) -> Any:
    plain = to_plain(value)
    if plain is value:
        return repr(type(value).__name__)
    return plain
