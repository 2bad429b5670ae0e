"""Replay: recorded runs through the real runtime guard.

Every call of a trace goes through :meth:`RunGuard.before_call` (or
``before_call_hashed`` for loopwarden's own run records) and every outcome
through ``after_call``, so what replay reports is exactly what the live guard
would have done with the same config. Guard events are collected with
``LoopGuard(on_event=...)``.

How replay proceeds past a decision (the recorded model never saw it):

* **warn** — the call ran; replay goes on as recorded.
* **block** — the guard records a veto (the blocked pattern's outcome once
  more, so retries climb to the circuit breaker) and ignores the recorded
  result of that call; later calls are fed as recorded, which is what a model
  that ignores blocks would do, so a stuck loop climbs to the circuit breaker.
* **stop / abort** — the run would have ended here. Later calls of the run are
  only counted (``calls_after_stop``) and drawn in the HTML timeline; the
  guard, which would refuse each of them the same way, is not asked again.

:func:`replay_sources` replays a list of inputs (what ``loopwarden replay``
does); :class:`Replayer` is the engine underneath, fed by the trace readers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import read_input
from ._replayer import MAX_COMPACTION_MARKS, MAX_PENDING, Replayer, ReplayStore
from ._results import (
    ABORTED,
    AFTER_STOP,
    BLOCKED,
    ERROR,
    REPEAT,
    STOPPED,
    TIMELINE_FLAGS,
    WARNED,
    InputInfo,
    ReplayEvent,
    RunReport,
    Totals,
    merge_input,
)
from .chat import RangeLabels

if TYPE_CHECKING:
    from ..config import Config
    from ._source import OpenedSource, Source

__all__ = [
    "ABORTED",
    "AFTER_STOP",
    "BLOCKED",
    "ERROR",
    "MAX_COMPACTION_MARKS",
    "MAX_PENDING",
    "REPEAT",
    "STOPPED",
    "TIMELINE_FLAGS",
    "WARNED",
    "InputInfo",
    "ReplayEvent",
    "ReplayMerge",
    "ReplayProgress",
    "ReplayStore",
    "Replayer",
    "RunReport",
    "RunWriter",
    "Totals",
    "replay_sources",
]


class RunWriter(Protocol):
    """Receives each run's report as soon as the run ends (a report writer)."""

    def run(self, report: RunReport) -> None: ...


class ReplayProgress(Protocol):
    """Follows the reading: which input is open, and how many bytes are done."""

    def open(self, opened: OpenedSource) -> None:
        """An input was opened; ``opened.position()`` tells how far reading got."""
        ...

    def file_done(self, index: int) -> None:
        """Input ``sources[index]`` is finished."""
        ...


class ReplayMerge:
    """Folds what replay finds into :class:`Totals`, input by input, in input order.

    :func:`replay_sources` feeds it as it reads; fleet replay
    (:func:`loopwarden.fleet.replay.replay_shards`) feeds it the results
    workers send back. Either way the writer sees the same runs in the same
    order, and the parts of a file read in ranges make one input with
    whole-file run labels.
    """

    def __init__(
        self,
        writer: RunWriter,
        *,
        on_problem: Callable[[str, str], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.totals = Totals()
        self._writer = writer
        self._on_problem = on_problem
        self._on_error = on_error
        self._labels: RangeLabels | None = None
        self._continued = False

    def begin_input(self, *, part: int | None = None) -> None:
        """An input starts: a whole file (``part`` None) or range ``part`` of a file."""
        self._continued = bool(part)
        if part is None:
            self._labels = None
            return
        if self._labels is None or not part:
            self._labels = RangeLabels()
        self._labels.next_range(first=not part)

    def run(self, report: RunReport) -> None:
        """A finished run, in reading order."""
        if self._labels is not None:
            report.label = self._labels.label(report.key, report.label, report.source)
        self.totals.add(report)
        self._writer.run(report)

    def problem(self, where: str, reason: str) -> None:
        """A skipped record."""
        self.totals.add_problem(where, reason)
        if self._on_problem is not None:
            self._on_problem(where, reason)

    def end_input(self, info: InputInfo, message: str | None) -> None:
        """The input is done; ``message`` says why it could not be read, if it could not."""
        if message is not None and self._on_error is not None:
            self._on_error(message)
        merge_input(self.totals.inputs, info, continued=self._continued)


def replay_sources(
    sources: Sequence[Source],
    config: Config,
    *,
    writer: RunWriter,
    agent_id: str | None = None,
    input_format: str | None = None,
    timeline: bool = False,
    on_problem: Callable[[str, str], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    progress: ReplayProgress | None = None,
) -> Totals:
    """Replay every input in turn and return the totals; runs go to ``writer`` as they end.

    Args:
        sources: the inputs (see :func:`~loopwarden.traces.expand_paths`); a
            source with a ``byte_range`` right after the one for the range
            before it counts as the same input (see :func:`loopwarden.fleet.plan_shards`).
        config: the loaded config; replay uses a private store and writes no run record.
        writer: gets each :class:`RunReport` as its run ends.
        agent_id: force this agent's block for every run (see :class:`Replayer`).
        input_format: a canonical format name (see
            :func:`~loopwarden.traces.normalize_format`); ``None`` detects each input's.
        timeline: keep a per-call timeline in each report (for the HTML page).
        on_problem: gets ``(where, reason)`` for each skipped record (also counted
            in :attr:`Totals.problems`).
        on_error: gets one line for each input that could not be read; the input is
            skipped and its error kept in :attr:`Totals.inputs`.
        progress: follows the reading (a progress bar).

    An unreadable input never ends the replay: unknown or malformed formats,
    unreadable files and even a bug in a reader are reported and skipped.
    ``KeyboardInterrupt`` and ``BrokenPipeError`` are not caught.
    """
    merge = ReplayMerge(writer, on_problem=on_problem, on_error=on_error)
    replayer = Replayer(
        config, agent_id=agent_id, on_run=merge.run, on_problem=merge.problem, timeline=timeline
    )
    for index, source in enumerate(sources):
        part = source.byte_range
        merge.begin_input(part=None if part is None else int(part.start > 0))
        info, message = read_input(
            source,
            replayer,
            index=index,
            input_format=input_format,
            on_open=progress.open if progress is not None else None,
        )
        replayer.finish()
        merge.end_input(info, message)
        if progress is not None:
            progress.file_done(index)
    return merge.totals
