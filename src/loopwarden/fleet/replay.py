"""``replay`` on a fleet: each shard replayed by a :class:`~loopwarden.traces.replay.Replayer`.

Workers send back the finished :class:`~loopwarden.traces.replay.RunReport` of
each run (bounded: at most ``max_events`` events and a ``timeline_limit``
timeline per run), never the trace. :func:`replay_shards` folds them into the
same :class:`~loopwarden.traces.replay.Totals` and writer calls, in the same
order, as :func:`~loopwarden.traces.replay.replay_sources` on one process —
which is what it runs when there is nothing to share out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..traces.chat import RangeLabels
from ..traces.replay import (
    Replayer,
    ReplayMerge,
    ReplayProgress,
    RunReport,
    RunWriter,
    Totals,
    replay_sources,
)
from ._engines import Engine, in_process, run_shards
from ._inputs import Shard
from ._job import ShardJob, ShardResult, ShardSink
from ._read import shard_source

__all__ = ["ReplayJob", "ReplayPayload", "replay_fleet", "replay_shards"]


@dataclass
class ReplayPayload:
    reports: list[RunReport]


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
        return ReplayPayload(sink.reports)

    def empty(self) -> ReplayPayload:
        return ReplayPayload([])


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
    labels = RangeLabels()
    job = ReplayJob(config, agent=agent, timeline=timeline)
    for result in run_shards(job, shards, workers=workers, engine=engine, ray_address=ray_address):
        if result.part is not None:
            labels.next_range(first=result.part == 0)
            for report in result.payload.reports:
                report.label = labels.label(report.key, report.label, report.source)
        yield result


def replay_shards(
    shards: Sequence[Shard],
    config: Config,
    *,
    writer: RunWriter,
    agent_id: str | None = None,
    timeline: bool = False,
    on_problem: Callable[[str, str], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    progress: ReplayProgress | None = None,
    workers: int | None = None,
    engine: Engine = "local",
    ray_address: str | None = None,
) -> Totals:
    """Replay the shards of :func:`~loopwarden.fleet.plan_shards` and return the totals.

    The same as :func:`~loopwarden.traces.replay.replay_sources` over the same
    inputs (same runs, labels, order, problems and totals) on ``workers``
    local processes or on Ray. ``workers`` None: the number of cores, but
    one process for small inputs (see :func:`~loopwarden.fleet.run_shards`). In this
    process, runs reach ``writer`` as they end and ``progress`` follows the
    reading; from workers, they come shard by shard (``progress.file_done``
    per shard). Forced formats travel in the shards (``plan_shards(input_format=)``).
    """
    here = in_process(shards, workers, engine)
    formats = {s.fmt for s in shards if not s.is_range}  # one: the forced one, or None
    if here and len(formats) <= 1 and not any(s.url for s in shards):
        return replay_sources(
            [shard_source(s) for s in shards],
            config,
            writer=writer,
            agent_id=agent_id,
            input_format=next(iter(formats), None),
            timeline=timeline,
            on_problem=on_problem,
            on_error=on_error,
            progress=progress,
        )
    merge = ReplayMerge(writer, on_problem=on_problem, on_error=on_error)
    job = ReplayJob(config, agent=agent_id, timeline=timeline)
    results = run_shards(job, shards, workers=workers, engine=engine, ray_address=ray_address)
    for position, result in enumerate(results):
        merge.begin_input(part=result.part)
        for where, reason in result.problems:
            merge.problem(where, reason)
        merge.totals.problems += result.problem_count - len(result.problems)
        for report in result.payload.reports:
            merge.run(report)
        merge.end_input(result.info, result.message)
        if progress is not None:
            progress.file_done(position)
    return merge.totals
