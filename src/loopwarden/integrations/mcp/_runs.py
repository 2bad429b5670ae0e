"""Run keying for the MCP proxy and middleware: sessions and their runs (no MCP imports).

MCP has no notion of an agent run. A downstream connection is a session; a
session's tool calls belong to one run until the session has been idle for
``run_idle_seconds``, then the next call starts a new run (so a desktop client
that stays connected for days does not carry loop counts, or a stopped run,
from one conversation into the next).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._logging import logger
from ...errors import LoopAbort
from ...guard import LoopGuard, RunGuard

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

__all__ = ["DEFAULT_RUN_IDLE_SECONDS", "Question", "RunTable", "session_key"]

DEFAULT_RUN_IDLE_SECONDS = 300.0
"""A session's next call after this many idle seconds starts a new run."""

_MAX_INFLIGHT = 1024
MAX_STOPPED = 16_384
"""Stopped sessions remembered after they left the table of live sessions."""
_MAX_KEY = 128  # characters of a header or client name kept in a session key


def session_key(ctx: ServerRequestContext[Any, Any], default: str) -> str:
    """Which downstream session a request belongs to.

    stdio and in-process: the one client of this server (``default``).
    Streamable HTTP: the ``Mcp-Session-Id`` of a stateful (handshake-era)
    session, so two clients never share a run whatever name they report.
    Requests without a session (the stateless 2026-07-28 protocol has none)
    are grouped by an ``X-Loopwarden-Session`` header, else by the client's
    name: nothing else tells two such clients apart.
    """
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return default
    sid = headers.get("mcp-session-id")
    if sid:
        return f"http:{sid[:_MAX_KEY]}"
    explicit = headers.get("x-loopwarden-session")
    if explicit:
        return f"http-client:{explicit[:_MAX_KEY]}"
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else "anonymous"
    return f"http-client:{name[:_MAX_KEY]}"


@dataclass
class Question:
    """A stop put to a person (``onStop: ask``), from the question until their answer.

    At most one per run: while it is open, and once the person left the stop standing
    (stop, decline, cancel, no answer in time), the run's calls are answered without
    asking again.
    """

    stop: LoopAbort
    run: RunGuard
    deadline: float
    """The time (on the guard's clock) after which an answer no longer counts."""
    token: str | None = None
    """The ``requestState`` of a 2026-07-28 question (the answer comes with a retry)."""
    call: tuple[str, str] | None = None
    """(tool, arguments key) of the call the token answers."""
    settled: bool = False
    """The person left the stop standing: no more questions in this run."""


@dataclass
class _Entry:
    run: RunGuard
    last: float
    inflight: set[str] = field(default_factory=set)
    stop: LoopAbort | None = None
    question: Question | None = None


class RunTable:
    """The current run of every downstream session (least recently used dropped first).

    A session whose run was stopped stays stopped until it has been idle for
    ``run_idle_seconds`` (with no idle limit: the state TTL), even after it left
    the table: its stop is kept in a tombstone (the session key, a time and the
    stop; a few hundred bytes), at most ``max_stopped`` of them, oldest dropped.
    """

    def __init__(
        self,
        guard: LoopGuard,
        *,
        run_idle_seconds: float | None = DEFAULT_RUN_IDLE_SECONDS,
        max_sessions: int = 1024,
        max_stopped: int = MAX_STOPPED,
    ) -> None:
        if run_idle_seconds is not None and run_idle_seconds <= 0:
            run_idle_seconds = None
        self.guard = guard
        self.run_idle_seconds = run_idle_seconds
        self.max_sessions = max_sessions
        self.max_stopped = max_stopped
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._seq = itertools.count(1)
        # session -> (last call, stop) of stopped runs that left the table
        self._stopped: OrderedDict[str, tuple[float, LoopAbort]] = OrderedDict()
        self._stop_ttl = (
            run_idle_seconds
            if run_idle_seconds is not None
            else guard.config.settings.state_ttl_seconds
        )

    def __len__(self) -> int:
        return len(self._entries)

    def enter(
        self, session: str, request_id: object, tools: frozenset[str] | None
    ) -> tuple[RunGuard, str | None]:
        """The run for a call in ``session``, and a call id unique among its calls in flight."""
        now = time.monotonic()
        entries = self._entries
        entry = entries.get(session)
        idle = self.run_idle_seconds
        if (
            entry is not None
            and idle is not None
            and now - entry.last > idle
            and not entry.inflight
        ):
            logger.info("loopwarden: session %s was idle; starting a new run", session)
            entry.run.end()
            del entries[session]
            entry = None
        if entry is None:
            run = self.guard.run(f"mcp-{uuid.uuid4().hex[:12]}", session_id=session, tools=tools)
            entry = entries[session] = _Entry(run, now)
            if len(entries) > self.max_sessions:
                key, dropped = entries.popitem(last=False)
                dropped.run.end()
                if dropped.stop is not None:
                    self._bury(key, dropped.last, dropped.stop)
        else:
            entries.move_to_end(session)
            entry.last = now
            if entry.run.tools is not tools:
                entry.run.set_tools(tools)
        call_id = None if request_id is None else str(request_id)
        if call_id is not None:
            inflight = entry.inflight
            # Two clients sharing a session (stateless HTTP) may reuse request ids.
            if call_id in inflight:
                call_id = f"{call_id}#{next(self._seq)}"
            if len(inflight) < _MAX_INFLIGHT:
                inflight.add(call_id)
        return entry.run, call_id

    def stopped(self, session: str) -> LoopAbort | None:
        """The stop of ``session`` if its stopped run left the table and the session has not
        been idle since for the run-idle time; a call refused this way counts as activity."""
        tombs = self._stopped
        if not tombs:
            return None
        now = time.monotonic()
        ttl = self._stop_ttl
        while tombs:  # drop the expired ones, oldest first
            first = next(iter(tombs.values()))
            if now - first[0] <= ttl:
                break
            tombs.popitem(last=False)
        found = tombs.get(session)
        if found is None or now - found[0] > ttl:
            tombs.pop(session, None)
            return None
        tombs[session] = (now, found[1])
        tombs.move_to_end(session)
        return found[1]

    def stop(self, session: str, exc: LoopAbort) -> None:
        """The run of ``session`` was stopped (kept if the session leaves the table)."""
        entry = self._entries.get(session)
        if entry is not None:
            entry.stop = exc

    def question(self, session: str) -> Question | None:
        """The stop of ``session``'s live run that is (or was) put to a person."""
        entry = self._entries.get(session)
        return entry.question if entry is not None else None

    def ask(self, session: str, question: Question | None) -> None:
        """Remember (``None``: forget) the question about ``session``'s stop."""
        entry = self._entries.get(session)
        if entry is not None:
            entry.question = question

    def hold(self, session: str, call_id: str | None) -> None:
        """A person answered in ``session`` (activity), and ``call_id`` is in flight again
        (let run once by their answer)."""
        entry = self._entries.get(session)
        if entry is None:
            return
        entry.last = time.monotonic()
        if call_id is not None and len(entry.inflight) < _MAX_INFLIGHT:
            entry.inflight.add(call_id)

    def _bury(self, session: str, last: float, exc: LoopAbort) -> None:
        tombs = self._stopped
        tombs[session] = (last, exc)
        tombs.move_to_end(session)
        while len(tombs) > self.max_stopped:
            tombs.popitem(last=False)

    def leave(self, session: str, call_id: str | None) -> None:
        """A call of ``session`` finished (answered or blocked)."""
        entry = self._entries.get(session)
        if entry is not None and call_id is not None:
            entry.inflight.discard(call_id)
            entry.last = time.monotonic()

    def runs(self) -> Iterable[RunGuard]:
        return [entry.run for entry in self._entries.values()]

    def close(self) -> None:
        for entry in self._entries.values():
            entry.run.end()
        self._entries.clear()
        self._stopped.clear()
