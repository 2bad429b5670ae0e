"""Structured events: :class:`LoopEvent`, event sinks, :func:`emit`.

Every warning, block, stop and abort becomes a :class:`LoopEvent`. Events go to
the ``loopwarden`` logger and to every sink: user callbacks, and the JSONL run
record (:mod:`loopwarden.runrecord`) when one is configured.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ._logging import logger

__all__ = ["EventSink", "LoopEvent", "emit"]

Action = Literal["warn", "block", "stop", "abort", "resume"]
"""``resume``: a person answered a stop and the run went on (``onStop: ask``)."""


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
    stamp = _dt.datetime.fromtimestamp(seconds, tz=_dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_event(event: LoopEvent) -> None:
    """Write ``event`` to the ``loopwarden`` logger (warnings at WARNING, the rest at ERROR)."""
    level = logging.WARNING if event.action in ("warn", "resume") else logging.ERROR
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
