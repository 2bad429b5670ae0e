"""Replay: recorded runs through the real runtime guard.

Every call of a trace goes through :meth:`RunGuard.before_call` (or
``before_call_hashed`` for loopwarden's own run records) and every outcome
through ``after_call``, so what replay reports is exactly what the live guard
would have done with the same config. Guard events are collected with
``LoopGuard(on_event=...)``.

How replay proceeds past a decision (the recorded model never saw it):

* **warn** — the call ran; replay goes on as recorded.
* **block** — the guard records a veto (SPEC 6.2) and ignores the recorded
  result of that call; later calls are fed as recorded, which is what a model
  that ignores blocks would do, so a stuck loop climbs to the circuit breaker.
* **stop / abort** — the run would have ended here. Later calls of the run are
  only counted (``calls_after_stop``) and drawn in the HTML timeline; the
  guard, which would refuse each of them the same way, is not asked again.

:func:`replay_sources` replays a list of inputs (what ``loopwarden replay``
does); :class:`Replayer` is the engine underneath, fed by the trace readers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import TraceFormatError, TraceInputError, read_source
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
)

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
        sources: the inputs (see :func:`~loopwarden.traces.expand_paths`).
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
    totals = Totals()

    def problem(where: str, reason: str) -> None:
        totals.add_problem(where, reason)
        if on_problem is not None:
            on_problem(where, reason)

    def finished(report: RunReport) -> None:
        totals.add(report)
        writer.run(report)

    replayer = Replayer(
        config, agent_id=agent_id, on_run=finished, on_problem=problem, timeline=timeline
    )
    for index, source in enumerate(sources):
        replayer.set_source(source.name, input_format or "?")
        info = InputInfo(source.name, None)
        totals.inputs.append(info)
        message = None
        try:
            info.format = read_source(
                source,
                replayer,
                index=index,
                input_format=input_format,
                on_open=progress.open if progress is not None else None,
                on_format=functools.partial(_name_format, replayer, source.name),
            )
            if info.format is None:
                info.error = "empty input"
        except (TraceFormatError, TraceInputError) as exc:
            info.error = message = str(exc)  # the message names the input
        except (KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as exc:  # a reader bug must not end the whole replay
            info.error = f"internal error while reading: {type(exc).__name__}: {exc}"
            message = f"{source.name}: {info.error}"
        if message is not None and on_error is not None:
            on_error(message)
        replayer.finish()
        if progress is not None:
            progress.file_done(index)
    return totals


def _name_format(replayer: Replayer, name: str, fmt: str) -> None:
    replayer.set_source(name, fmt)
