"""A session's side record: its current run, transcript offset, pending compaction, stop.

Hook events come one process (or helper request) at a time, and some carry no
run id (compaction events, Gemini's events); the small record kept per session
in the SQLite file ties them together:

* ``run``: the session's latest run (Gemini: chosen by ``BeforeAgent``);
* ``t``: where the transcript was read up to (see :mod:`.transcript`);
* ``arm``: a compaction whose run has made no call since (carried to the next run);
* ``seen``: (Gemini) a ``/compress`` already armed: its history rewrite, which
  Gemini may write to the transcript a request later, must not arm again;
* ``stop``: the reason of a stop not yet shown to the user (Claude Code's ``SessionEnd``),
  and ``sr``, its report, summed up there with the transcript's token figures;
* ``stopped``: the run that was stopped, and why (Qwen Code: its turn is ended).
* ``asked``: (``onStop: ask``) the stop put to the person, until the run's next ``PostToolBatch``.
* ``cm``: (Cline) the state of the session's compaction file at the last event.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from .._logging import logger
from .._util import guard_text
from ..stores import SideRecords
from .agents import Adapter, BatchEntry, Kind
from .transcript import Cursor, Found, UnknownCall, Window, read_window, scan

__all__ = ["SessionStep", "remember_stop", "session_key", "step_session"]


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def session_key(agent: str, agent_id: str, session: str) -> str:
    """Key of a session's side record (latest run, transcript offset) in the SQLite file."""
    return f"hook\x1f{agent}\x1f{agent_id}\x1f{session}"


class SessionStep(NamedTuple):
    """What the session's side record says about one event."""

    run: str
    unknown: list[UnknownCall]
    arm: bool
    """Arm this run's post-compaction guard now."""
    report: str | None = None
    """(End of session) a stop the user has not been told about yet."""
    calls: tuple[BatchEntry, ...] = ()
    """(Gemini) the calls completed since the last model request, from the transcript."""
    split: int = 0
    """How many of ``calls`` came before the compaction: recorded before arming."""
    stopped: str | None = None
    """The stop message, when this event's run was stopped."""
    asked: dict[str, Any] | None = None
    """(``onStop: ask``) the stop put to the person, whose answer this event brings."""
    stop_report: dict[str, Any] | None = None
    """(End of session) the stop's report, to sum up with the transcript's final figures."""


# Events that may read the transcript: those whose answer can reach the model.
_SCAN_KINDS: Mapping[str, frozenset[Kind]] = {
    "codex": frozenset({"pre", "post", "failure"}),
    "gemini": frozenset({"model"}),
}
# Events of a call the model made (they consume a compaction carried over from another run).
_CALL_KINDS: frozenset[Kind] = frozenset({"pre", "post", "failure", "batch", "model"})


def _load(old: bytes | None) -> dict[str, Any]:
    if not old:
        return {}
    try:
        loaded = orjson.loads(old)
    except orjson.JSONDecodeError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _offset(side: SideRecords, key: str, transcript: str) -> int | None:
    """Where the session's transcript was read up to, read without a write lock."""
    try:
        read = getattr(side, "read_value", None)
        old = read(key) if read is not None else side.transact_value(key, lambda v: (v, v))
    except Exception:
        logger.debug("loopwarden hook: could not read the session record", exc_info=True)
        return None
    return Cursor.load(_load(old).get("t"), transcript).offset


def step_session(
    side: SideRecords,
    adapter: Adapter,
    kind: Kind,
    event: Mapping[str, Any],
    session: str,
    agent_id: str,
    marker: str | None = None,
) -> SessionStep:
    """Find the run, remember it for later events, and read new transcript lines.

    ``marker``: the state of the file the agent rewrites at each compaction (Cline);
    a change since the session's last event is a compaction.

    A compaction arms the guard of the run it happened in and is remembered
    (``arm``) until that run makes a call: a compaction that ends its run (Claude
    Code's ``/compact`` is a prompt of its own) arms the session's next run instead.
    """
    explicit = adapter.run_id(event)
    transcript = _str(event.get("transcript_path"))
    fmt = adapter.transcript
    scan_now = fmt is not None and transcript is not None and kind in _SCAN_KINDS[fmt]
    key = session_key(adapter.name, agent_id, session)
    window: Window | None = None
    if scan_now and fmt is not None and transcript is not None:
        # Never inside the transaction: a slow or blocking file would hold the store's
        # write lock for every session on the machine.
        window = read_window(transcript, _offset(side, key, transcript), fmt)

    def step(old: bytes | None) -> tuple[bytes, SessionStep]:
        data = _load(old)
        if kind == "prompt":
            stamp = _str(event.get("timestamp")) or str(time.time_ns())
            data["run"] = guard_text(f"{session}@{stamp}")
        elif explicit is not None:
            data["run"] = explicit
        run = explicit or _str(data.get("run")) or session
        if kind == "end":
            report = data.pop("stop", None)
            summary = data.pop("sr", None)
            return orjson.dumps(data), SessionStep(
                run,
                [],
                False,
                _str(report),
                stop_report=summary if isinstance(summary, dict) else None,
            )
        found = Found([])
        if scan_now and fmt is not None and transcript is not None:
            cursor = Cursor.load(data.get("t"), transcript)
            found = scan(fmt, cursor, window)
            data["t"] = cursor.dump()
        arm = False
        carried = data.get("arm")
        rewritten = False
        if marker is not None:
            rewritten = data.get("cm", marker) != marker
            data["cm"] = marker
        if found.compacted and data.pop("seen", None):
            found = found._replace(compacted=False, split=0)  # armed by its own event
        elif kind == "model" and isinstance(data.get("seen"), int):
            data["seen"] -= 1  # the rewrite comes within a request or two, or never
            if data["seen"] <= 0:
                del data["seen"]
        if kind == "compact" or found.compacted or rewritten:
            data["arm"] = run
            arm = True
            if kind == "compact" and fmt == "gemini":
                data["seen"] = 3  # /compress: its history rewrite is yet to be read
        elif carried is not None and kind in _CALL_KINDS:
            if carried != run:
                arm = True  # compacted in an earlier run that made no call since
                del data["arm"]
            elif kind != "model":
                del data["arm"]
        split = found.split if found.compacted else 0
        stopped = data.get("stopped")
        message = stopped[1] if isinstance(stopped, list) and stopped[:1] == [run] else None
        asked = data.get("asked")
        if isinstance(asked, dict) and asked.get("run") == run and kind == "batch":
            # Claude Code: "Yes", or "No" with a note, comes with the call's batch; "No"
            # and Esc end the turn without one (the run stays stopped).
            del data["asked"]
        else:
            asked = None
        return orjson.dumps(data), SessionStep(
            run, found.unknown, arm, None, found.calls, split, _str(message), asked
        )

    try:
        return side.transact_value(key, step)
    except Exception:
        logger.exception("loopwarden hook: could not read the session record; continuing")
        return SessionStep(explicit or session, [], kind == "compact")


def remember_stop(
    side: SideRecords,
    key: str,
    message: str,
    run: str | None = None,
    report: dict[str, Any] | None = None,
) -> None:
    """Keep a stop's reason for the end of the session (Claude Code's text mode shows
    nothing else to the user), and which run it stopped; ``report``: the stop's report,
    summed up again at the end of the session."""

    def step(old: bytes | None) -> tuple[bytes, None]:
        data = _load(old)
        data["stop"] = message
        if report is not None:
            data["sr"] = report
        else:
            data.pop("sr", None)
        if run is not None:
            data["stopped"] = [run, message]
        return orjson.dumps(data), None

    try:
        side.transact_value(key, step)
    except Exception:
        logger.exception("loopwarden hook: could not record the stop for the session")
