"""The common shape of a fleet job: read one shard into a sink, return a small result."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ..traces import TraceFormatError, TraceInputError, TraceSink
from ._inputs import Shard
from ._read import RecordTap, read_shard

__all__ = ["MAX_PROBLEMS_KEPT", "ShardJob", "ShardResult", "ShardSink"]

P = TypeVar("P")

MAX_PROBLEMS_KEPT = 1000
"""Problems a shard sends back in full; the rest are only counted."""


class ShardSink(TraceSink, Protocol):
    """A trace sink that can be told its source and finishes its open runs."""

    def set_source(self, source: str, fmt: str) -> None: ...

    def finish(self) -> None: ...


@dataclass
class ShardResult(Generic[P]):
    """What one shard sends back: never the trace, only what the parent reports."""

    shard: Shard
    format: str | None
    """Detected (or forced) format; None for an empty or unreadable input."""
    error: str | None
    """Why the input (or the rest of it) was skipped, if it was."""
    payload: P
    problems: list[tuple[str, str]] = field(default_factory=list)
    """``(where, reason)`` of skipped records, ``where`` as ``file:line``."""
    problem_count: int = 0
    cpu: float = 0.0
    """CPU seconds the worker spent on this shard (for cost figures on a shared machine)."""


class _Problems:
    def __init__(self) -> None:
        self.kept: list[tuple[str, str]] = []
        self.count = 0

    def __call__(self, where: str, reason: str) -> None:
        self.count += 1
        if len(self.kept) < MAX_PROBLEMS_KEPT:
            self.kept.append((where, reason))


class ShardJob(ABC, Generic[P]):
    """Template of a shard task (see :class:`~loopwarden.fleet.ShardTask`).

    Subclasses build a sink per shard and say what to send back; reading,
    problems and failures are handled here the same way for every job.
    """

    @abstractmethod
    def sink(self, shard: Shard, on_problem: Any) -> ShardSink:
        """A fresh sink for one shard; ``on_problem(where, reason)`` gets skipped records."""

    @abstractmethod
    def payload(self, sink: ShardSink) -> P:
        """What the finished sink sends back."""

    @abstractmethod
    def empty(self) -> P:
        """The payload of a shard that could not be read at all."""

    def tap(self, sink: ShardSink) -> RecordTap | None:
        """A record tap for this sink, when the job needs to see raw records."""
        return None

    def run(self, shard: Shard) -> ShardResult[P]:
        started = time.process_time()
        problems = _Problems()
        sink = self.sink(shard, problems)
        sink.set_source(shard.name, shard.fmt or "?")
        fmt: str | None = None
        error: str | None = None

        def named(found: str) -> None:
            nonlocal fmt
            fmt = found
            sink.set_source(shard.name, found)

        try:
            if read_shard(shard, sink, tap=self.tap(sink), on_format=named) is None:
                error = "empty input"
        except (TraceFormatError, TraceInputError) as exc:
            error = str(exc)
        except Exception as exc:  # a reader bug must not end the whole job
            error = f"internal error while reading: {type(exc).__name__}: {exc}"
        sink.finish()
        payload = self.payload(sink)
        cpu = time.process_time() - started
        return ShardResult(shard, fmt, error, payload, problems.kept, problems.count, cpu)

    def failed(self, shard: Shard, reason: str) -> ShardResult[P]:
        return ShardResult(shard, None, f"{shard.name}: {reason}", self.empty())
