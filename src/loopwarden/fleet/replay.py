"""``replay`` on a fleet: each shard replayed by a :class:`~loopwarden.traces.replay.Replayer`.

Workers send back the finished :class:`~loopwarden.traces.replay.RunReport` of
each run (bounded: at most ``max_events`` events and a ``timeline_limit``
timeline per run), never the trace. :func:`replay_fleet` yields them in the
order a single-process replay reports them, with the input's format, error and
problems, for the same report writers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..traces.replay import Replayer, RunReport
from ._engines import Engine, run_shards
from ._inputs import Shard
from ._job import ShardJob, ShardResult, ShardSink

__all__ = ["Renumber", "ReplayJob", "ReplayPayload", "numbering", "replay_fleet"]


def chunk_number(key: str, label: str, name: str) -> tuple[int, bool] | None:
    """``(n, generated)`` for the n-th Chat conversation of a range, or None for other runs.

    The Chat reader numbers conversations in file order and labels those
    without an id ``<stem>#<n>``; a worker that reads a range of the file
    numbers from 1, so the parent adds the count of the ranges before it
    (see :class:`Renumber`). ``generated`` says the label is such a number.
    """
    _, sep, number = key.rpartition("\x1e")
    if not sep or not number.isdigit():
        return None
    stem = name.rsplit("/", 1)[-1]
    for suffix in (".gz", ".jsonl", ".ndjson", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return int(number), label == f"{stem}#{number}"


def numbering(keys: Sequence[tuple[str, str, str]]) -> tuple[list[int | None], int]:
    """Per ``(key, label, source)``: the number of a generated label; and the conversations seen."""
    numbers: list[int | None] = []
    seen = 0
    for key, label, source in keys:
        found = chunk_number(key, label, source)
        if found is None:
            numbers.append(None)
            continue
        seen = max(seen, found[0])
        numbers.append(found[0] if found[1] else None)
    return numbers, seen


class Renumber:
    """Fixes the numbers of id-less conversations read from ranges of one file."""

    def __init__(self) -> None:
        self._index = -1
        self._offset = 0

    def start(self, shard: Shard, conversations: int) -> int:
        """The offset for this shard's numbers; call once per result, in order."""
        if shard.index != self._index or shard.part == 0:
            self._index, self._offset = shard.index, 0
        offset = self._offset
        self._offset += conversations
        return offset

    @staticmethod
    def label(label: str, local: int | None, offset: int) -> str:
        if local is None or offset == 0:
            return label
        stem = label.rpartition("#")[0]
        return f"{stem}#{local + offset}"


@dataclass
class ReplayPayload:
    reports: list[RunReport]
    numbers: list[int | None]
    """Per report, its per-range conversation number when it has a generated label."""
    conversations: int


class _ReplaySink(Replayer):
    def __init__(self, config: Config, agent: str | None, on_problem: Any, timeline: bool) -> None:
        self.reports: list[RunReport] = []
        super().__init__(
            config,
            agent_id=agent,
            on_run=self.reports.append,
            on_problem=on_problem,
            timeline=timeline,
        )


class ReplayJob(ShardJob[ReplayPayload]):
    """Replays one shard with one config (what ``loopwarden replay`` does per input)."""

    def __init__(self, config: Config, *, agent: str | None = None, timeline: bool = False):
        self.config = config
        self.agent = agent
        self.timeline = timeline

    def sink(self, shard: Shard, on_problem: Any) -> ShardSink:
        return _ReplaySink(self.config, self.agent, on_problem, self.timeline)

    def payload(self, sink: ShardSink) -> ReplayPayload:
        assert isinstance(sink, _ReplaySink)
        numbers, seen = numbering([(r.key, r.label, r.source) for r in sink.reports])
        return ReplayPayload(sink.reports, numbers, seen)

    def empty(self) -> ReplayPayload:
        return ReplayPayload([], [], 0)


def replay_fleet(
    shards: Sequence[Shard],
    config: Config,
    *,
    agent: str | None = None,
    timeline: bool = False,
    workers: int | None = None,
    engine: Engine = "local",
    ray_address: str | None = None,
) -> Iterator[ShardResult[ReplayPayload]]:
    """Replay every shard; yields shard results in input order, run labels made whole-file."""
    renumber = Renumber()
    job = ReplayJob(config, agent=agent, timeline=timeline)
    for result in run_shards(job, shards, workers=workers, engine=engine, ray_address=ray_address):
        payload = result.payload
        offset = renumber.start(result.shard, payload.conversations)
        if offset:
            for report, local in zip(payload.reports, payload.numbers, strict=True):
                report.label = Renumber.label(report.label, local, offset)
        yield result
