"""loopwarden's JSONL run record: the line schema, and the writer.

``LoopGuard(run_record=PATH)`` appends one JSON object per line; ``loopwarden
replay`` reads them back (:mod:`loopwarden.traces.loopwarden`). Every line has
a ``type`` and the fields :data:`FIELDS` lists for it, in that order:

==============  ==============================================================
``run_start``   the run's first call: ``session_id``, ``agent_id`` and the
                effective ``config`` block (camelCase)
``call``        a call and the guard's ``decision`` (allow, warn, block, stop);
                ``params`` only with ``log_params``
``outcome``     an allowed call's ``outcome_hash``, ``is_error``, the
                ``unknown_tool`` its error names; ``result`` only with ``log_params``
``compaction``  the runner compacted the context (the post-compaction guard armed)
``event``       a :class:`~loopwarden.events.LoopEvent` (``LoopEvent.to_dict()``)
``run_end``     the run ended
==============  ==============================================================

Calls and outcomes carry the hashes the live guard computed, so a replay never
needs the raw params. Lines are written with one ``write`` in append mode, so
several processes can share a file; their runs interleave.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ._canonical import encodable, to_plain
from ._logging import logger

if TYPE_CHECKING:
    from .events import LoopEvent

__all__ = [
    "CALL",
    "COMPACTION",
    "EVENT",
    "FIELDS",
    "LINE_TYPES",
    "OUTCOME",
    "RUN_END",
    "RUN_START",
    "JsonlRunRecord",
]

RUN_START = "run_start"
CALL = "call"
OUTCOME = "outcome"
COMPACTION = "compaction"
EVENT = "event"
RUN_END = "run_end"
LINE_TYPES = frozenset({RUN_START, CALL, OUTCOME, COMPACTION, EVENT, RUN_END})

_CALL_ID = ("ts", "run_id", "call_id", "tool", "args_hash")
FIELDS: Mapping[str, tuple[str, ...]] = {
    RUN_START: ("ts", "run_id", "session_id", "agent_id", "config"),
    CALL: (*_CALL_ID, "poll", "params", "decision"),
    OUTCOME: (*_CALL_ID, "outcome_hash", "is_error", "unknown_tool", "result"),
    COMPACTION: ("ts", "run_id"),
    RUN_END: ("ts", "run_id"),
}
"""The fields of each line type after ``type`` (``event`` lines hold a LoopEvent)."""


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
                os.makedirs(directory, mode=0o700, exist_ok=True)
            # Private: with logParams on it holds raw arguments and results.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
            self._fd = os.open(self.path, flags, 0o600)
        return self._fd

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one line."""
        try:
            try:
                line = orjson.dumps(record, default=_fallback) + b"\n"
            except orjson.JSONEncodeError:  # e.g. lone surrogates in logged params
                line = orjson.dumps(encodable(record), default=_fallback) + b"\n"
            with self._lock:
                os.write(self._open(), line)
        except Exception:
            logger.exception("loopwarden could not write the run record %s", self.path)

    def raw(self, value: Any) -> Any:
        """``value`` as JSON data if params logging is on, else ``None``."""
        if not self.log_params:
            return None
        try:
            return to_plain(value)
        except Exception:  # never into the agent; the line is written without it
            logger.debug("loopwarden could not record the raw value", exc_info=True)
            return None

    def line(self, kind: str, *values: Any) -> None:
        """Append a line of type ``kind`` with ``values`` in the order of :data:`FIELDS`."""
        try:
            line = {"type": kind, **dict(zip(FIELDS[kind], values, strict=True))}
        except (KeyError, ValueError):
            logger.exception("loopwarden could not build a %r run-record line", kind)
            return
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
