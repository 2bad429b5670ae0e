"""What every replay sink keeps: the open runs by key, the input being read, pending calls.

:class:`~loopwarden.traces.replay.Replayer` (one config) and
:class:`~loopwarden.tune._replay.GridReplayer` (a grid of configs) are both
:class:`RunBook` subclasses: they differ only in what a run holds and what a
call does to it. The hashing helpers compute exactly what
``RunGuard.before_call`` / ``after_call`` compute, once per call, so sinks can
feed the ``*_hashed`` guard methods and reuse the hashes (timelines, several
configs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

from .._util import MAX_NAME_CHARS, guard_text
from ..hashing import digest
from ._sink import Loc, format_loc

__all__ = ["MAX_PENDING", "RunBook", "RunStart", "call_signature", "remember"]

R = TypeVar("R")

MAX_PENDING = 256
"""Calls per run that wait for their outcome; older ones are forgotten (never answered)."""


def call_signature(tool: Any, params: Any) -> tuple[str, str]:
    """The tool name as the guard sees it, and the call's args hash (``before_call``'s)."""
    name = tool.strip() if type(tool) is str else str(tool).strip()
    if len(name) > MAX_NAME_CHARS or not name.isascii():
        name = guard_text(name)  # valid UTF-8, bounded: as RunGuard takes a name
    return name, f"{name}:{digest(params)}"


def remember(pending: dict[str, Any], call_id: str, entry: Any) -> None:
    """Keep a call until its outcome arrives; the oldest goes when too many wait."""
    pending[call_id] = entry
    if len(pending) > MAX_PENDING:
        del pending[next(iter(pending))]


class RunStart(NamedTuple):
    """What a reader says about a run as it begins (see ``TraceSink.begin_run``)."""

    key: str
    label: str
    line: Loc
    session: str | None
    agent: str | None
    tools: Iterable[str] | None
    title: str | None


class RunBook(Generic[R]):
    """The open runs of one replay, by the keys the trace readers choose.

    Subclasses say what a run is (:meth:`_open`) and what happens when it
    ends (:meth:`_close`); the calls and outcomes of :class:`~loopwarden.traces.TraceSink`
    are theirs. Model turns and live events are ignored unless a subclass cares.
    """

    def __init__(self, on_problem: Callable[[str, str], None]) -> None:
        self._on_problem = on_problem
        self._runs: dict[str, R] = {}
        self._serial = 0
        self._source = "<input>"
        self._format = "?"
        # Consecutive records nearly always belong to the same run.
        self._last_key: str | None = None
        self._last_run: R | None = None
        self.problems = 0

    # -- subclasses ----------------------------------------------------------------
    def _open(self, run_id: str, start: RunStart) -> R:
        """A new run; ``run_id`` is unique within this replay."""
        raise NotImplementedError

    def _close(self, key: str, run: R) -> None:
        """The run is over."""
        raise NotImplementedError

    # -- the input -------------------------------------------------------------------
    def set_source(self, source: str, fmt: str) -> None:
        """Name the input that the following records come from."""
        self._source = source
        self._format = fmt

    def problem(self, loc: Loc, reason: str) -> None:
        self.problems += 1
        self._on_problem(format_loc(self._source, loc), reason)

    # -- runs ------------------------------------------------------------------------
    def has_run(self, key: str) -> bool:
        return key in self._runs

    def open_runs(self) -> int:
        return len(self._runs)

    def begin_run(
        self,
        key: str,
        *,
        label: str,
        line: Loc,
        session: str | None = None,
        agent: str | None = None,
        tools: Iterable[str] | None = None,
        title: str | None = None,
    ) -> None:
        if key in self._runs:  # the same key again: the old run is over
            self.end_run(key)
        self._serial += 1
        start = RunStart(key, label, line, session, agent, tools, title)
        run = self._open(str(self._serial), start)
        self._runs[key] = run
        self._last_key, self._last_run = key, run

    def _run(self, key: str, line: Loc) -> R:
        """The open run ``key`` (begun on the fly when a reader did not begin it)."""
        if key is self._last_key and self._last_run is not None:
            return self._last_run
        run = self._runs.get(key)
        if run is None:
            self.begin_run(key, label=key.rpartition("\x1f")[2] or key, line=line)
            run = self._runs[key]
        self._last_key, self._last_run = key, run
        return run

    def end_run(self, key: str) -> None:
        run = self._runs.pop(key, None)
        if run is None:
            return
        if run is self._last_run:
            self._last_key = self._last_run = None
        self._close(key, run)

    def finish(self) -> None:
        """End every open run (end of input)."""
        for key in list(self._runs):
            self.end_run(key)

    # -- what only some sinks use ----------------------------------------------------
    def live_event(self, key: str) -> None:
        return None

    def model_turn(self, key: str, tokens: int | None) -> None:
        return None

    def turn_usage(self, key: str, tokens: int | None) -> None:
        return None
