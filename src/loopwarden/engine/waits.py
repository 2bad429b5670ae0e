"""Polls of a job that is still running: how long it has run, and how long to wait.

An agent that polls a background job (``BashOutput``, ``process`` poll, a
``get_status`` tool) every few seconds for a job that prints nothing until it ends
looks like a loop to every rule, and is one: the same call, the same result. The rules
still warn and block it at their thresholds; what changes is the wording, which tells
the model the job is still running, for how long it has been polled, and how long to
wait before it checks again. The timing is the guard's clock at each outcome (a hook's
wall clock, a trace's recorded times).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..hashing import MISSING, ToolOutcome

if TYPE_CHECKING:
    from .state import RunState

__all__ = ["Wait", "says_running", "track_wait", "wait_of"]

_MAX_WAITS = 16
# The result's own status field, where it has one.
_STATUS_KEYS = ("status", "state", "phase")
_RUNNING = frozenset(
    {"running", "pending", "queued", "in_progress", "in-progress", "started", "starting", "busy"}
)
_DONE = frozenset(
    {"completed", "complete", "done", "finished", "failed", "error", "exited", "killed", "success"}
)
# Free text that says a job has not finished (the first 2 KB of it are read).
_RUNNING_TEXT = re.compile(
    r"\b(?:still running|is running|running|in progress|pending|queued|not (?:yet )?"
    r"(?:finished|complete|completed|done)|has not (?:finished|completed))\b",
    re.IGNORECASE,
)
_TEXT_CHARS = 2048


def _status(where: Mapping[str, Any]) -> bool | None:
    for key in _STATUS_KEYS:
        value = where.get(key)
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _RUNNING:
                return True
            if word in _DONE:
                return False
    return None


def _text(result: Any) -> str | None:
    if isinstance(result, str):
        return result
    if isinstance(result, Mapping):
        content = result.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [
                b["text"]
                for b in content[:8]
                if isinstance(b, Mapping) and isinstance(b.get("text"), str)
            ]
            return "\n".join(texts) if texts else None
        for key in ("stdout", "output", "text"):
            value = result.get(key)
            if isinstance(value, str):
                return value
    return None


def says_running(result: Any) -> bool:
    """The result says the job it reports on has not finished (its status field, or, for a
    result without one, its text)."""
    if type(result) is ToolOutcome:
        if result.error is not MISSING:
            return False
        if result.details is not None:
            found = _status(result.details)
            if found is not None:
                return found
        result = result.content
    if isinstance(result, Mapping):
        details = result.get("details")
        found = _status(details) if isinstance(details, Mapping) else None
        if found is None:
            found = _status(result)
        if found is not None:
            return found
    text = _text(result)
    return text is not None and _RUNNING_TEXT.search(text[:_TEXT_CHARS]) is not None


def track_wait(st: RunState, sig: str, result: Any, error: Any, now: float) -> None:
    """Keep the timing of a poll whose result says the job still runs; forget it otherwise."""
    waits = st.waits
    running = (error is None or error is MISSING) and says_running(result)
    found = waits.get(sig)
    if not running:
        if found is not None:
            del waits[sig]
        return
    if found is None:
        if len(waits) >= _MAX_WAITS:
            del waits[next(iter(waits))]
        waits[sig] = [now, now, 1.0]
    else:
        found[1] = now
        found[2] += 1


class Wait(NamedTuple):
    """A running job's polls: over how long, how often, and the wait to suggest."""

    elapsed: float
    """Seconds from the first poll that saw the job running to the newest."""
    interval: float
    """Mean seconds between those polls."""
    suggest: int
    """Seconds to wait before the next check: at least 30, at least twice the polling
    interval, half the time the job has run so far, at most 10 minutes; in tens."""


def wait_of(st: RunState, sig: str) -> Wait | None:
    """The timing of ``sig``'s polls, when its newest result said the job still runs."""
    found = st.waits.get(sig) if st.waits else None
    if found is None:
        return None
    first, newest, polls = found
    elapsed = max(0.0, newest - first)
    interval = elapsed / (polls - 1) if polls > 1 else 0.0
    wanted = min(600.0, max(30.0, 2 * interval, elapsed / 2))
    return Wait(elapsed, interval, int(math.ceil(wanted / 10) * 10))


def duration(seconds: float) -> str:
    """``75`` as ``1 min 15 s``; under a minute in seconds."""
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, rest = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
