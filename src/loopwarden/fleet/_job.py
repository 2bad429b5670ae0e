"""The common shape of a fleet job: read one shard into a sink, return a small result."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..traces import InputInfo, RecordTap, ReplaySink, TraceInputError, read_input
from ._inputs import Shard
from ._read import local_source

__all__ = ["MAX_PROBLEMS_KEPT", "ShardJob", "ShardResult", "ShardSink"]

P = TypeVar("P")

MAX_PROBLEMS_KEPT = 1000
"""Problems a shard sends back in full; the rest are only counted."""

ShardSink = ReplaySink
"""A trace sink that can be told its source and finishes its open runs."""


@dataclass
class ShardResult(Generic[P]):
    """What one shard sends back: never the trace, only what the parent reports."""

    shard: Shard
    info: InputInfo
    """The input as this shard saw it (format, or why it was skipped)."""
    message: str | None
    """One line naming the input, when it could not be read (for stderr)."""
    payload: P
    problems: list[tuple[str, str]] = field(default_factory=list)
    """``(where, reason)`` of skipped records, ``where`` as ``file:line``."""
    problem_count: int = 0
    cpu: float = 0.0
    """CPU seconds the worker spent on this shard (for cost figures on a shared machine)."""

    @property
    def format(self) -> str | None:
        """Detected (or forced) format; None for an empty or unreadable input."""
        return self.info.format

    @property
    def error(self) -> str | None:
        """Why the input (or the rest of it) was skipped, if it was."""
        return self.info.error

    @property
    def part(self) -> int | None:
        """The shard's range of its file (None: the whole file)."""
        return self.shard.part if self.shard.is_range else None


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
    problems and failures are :func:`loopwarden.traces.read_input`'s, the
    same as for a replay in one process.
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
        try:
            with local_source(shard) as source:
                info, message = read_input(
                    source, sink, index=shard.index, input_format=shard.fmt, tap=self.tap(sink)
                )
        except TraceInputError as exc:  # a URL that cannot be fetched
            info, message = InputInfo(shard.name, None, str(exc)), str(exc)
        sink.finish()
        payload = self.payload(sink)
        cpu = time.process_time() - started
        return ShardResult(shard, info, message, payload, problems.kept, problems.count, cpu)

    def failed(self, shard: Shard, reason: str) -> ShardResult[P]:
        message = f"{shard.name}: {reason}"
        return ShardResult(shard, InputInfo(shard.name, None, message), message, self.empty())
