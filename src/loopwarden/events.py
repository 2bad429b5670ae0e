"""Structured events (SPEC section 7) and the JSONL run record.

Every warning, block, stop and abort becomes a :class:`LoopEvent`. Events go to
the ``loopwarden`` logger, to user callbacks, and optionally to a JSONL run
record that also holds the calls, outcomes and compactions of each run (the
format ``loopwarden replay`` reads). Raw params and results are never written
unless the user opts in with ``log_params``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import orjson

from ._canonical import to_plain

__all__ = ["EventSink", "JsonlRunRecord", "LoopEvent"]

from ._logging import logger

Action = Literal["warn", "block", "stop", "abort"]


@dataclass(frozen=True)
class LoopEvent:
    """One decision of the guard that changed what the agent sees or does."""

    time: float
    """Seconds since the epoch."""
    session_id: str | None
    run_id: str | None
    agent_id: str | None
    tool: str
    level: Literal["warning", "critical"]
    action: Action
    detector: str
    count: int
    paired_tool: str | None
    warning_key: str | None
    message: str
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["time"] = iso_time(self.time)
        return data


EventSink = Callable[[LoopEvent], None]


def iso_time(seconds: float) -> str:
    stamp = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_event(event: LoopEvent) -> None:
    """Write ``event`` to the ``loopwarden`` logger (warnings at WARNING, the rest at ERROR)."""
    level = logging.WARNING if event.action == "warn" else logging.ERROR
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "loopwarden %s: tool=%s detector=%s count=%d%s run=%s session=%s agent=%s: %s",
        event.action,
        event.tool,
        event.detector,
        event.count,
        f" paired_tool={event.paired_tool}" if event.paired_tool else "",
        event.run_id,
        event.session_id,
        event.agent_id,
        event.message,
        extra={"loopwarden_event": event},
    )


def emit(events: Iterable[LoopEvent], sinks: Iterable[EventSink]) -> None:
    """Deliver events to the logger and every sink; a failing sink is logged, not raised."""
    for event in events:
        log_event(event)
        for sink in sinks:
            try:
                sink(event)
            except Exception:
                logger.exception("loopwarden event callback %r failed", sink)


class JsonlRunRecord:
    """Appends run records (calls, outcomes, compactions, events) to a JSONL file.

    Each line is one JSON object with a ``type`` of ``run_start``, ``call``,
    ``outcome``, ``compaction`` or ``event`` and the run and call ids. Lines are
    written with one ``write`` in append mode, so several processes can share a
    file. Raw params and results are only included with ``log_params=True``.
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
        """Append one record. I/O errors are logged and swallowed (the agent goes on)."""
        try:
            line = orjson.dumps(record, default=_fallback) + b"\n"
            with self._lock:
                os.write(self._open(), line)
        except Exception:
            logger.exception("loopwarden could not write the run record %s", self.path)

    def raw(self, value: Any) -> Any:
        """``value`` as JSON data if params logging is on, else ``None``."""
        return to_plain(value) if self.log_params else None

    def __call__(self, event: LoopEvent) -> None:
        self.write({"type": "event", **event.to_dict()})

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
