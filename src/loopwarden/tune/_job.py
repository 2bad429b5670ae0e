"""The fleet task of ``tune``: one shard replayed under every config of the grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..fleet import Shard, ShardJob, ShardSink
from ..traces import RecordTap
from ._labels import LabelTap
from ._replay import GridReplayer, RunRow

__all__ = ["TuneJob", "TunePayload"]


@dataclass
class TunePayload:
    rows: list[RunRow]


class _Sink(GridReplayer):
    def __init__(self, job: TuneJob, on_problem: Any) -> None:
        self.rows: list[RunRow] = []
        super().__init__(
            job.configs,
            on_run=self.rows.append,
            on_problem=on_problem,
            agent_id=job.agent,
            min_loop=job.min_loop,
        )


class TuneJob(ShardJob[TunePayload]):
    """Replays a shard under every config; sends back one small row per run."""

    def __init__(
        self,
        configs: list[Config],
        *,
        agent: str | None = None,
        min_loop: int = 10,
        label_field: str | None = None,
    ) -> None:
        self.configs = configs
        self.agent = agent
        self.min_loop = min_loop
        self.label_field = label_field

    def sink(self, shard: Shard, on_problem: Any) -> ShardSink:
        return _Sink(self, on_problem)

    def tap(self, sink: ShardSink) -> RecordTap | None:
        assert isinstance(sink, _Sink)
        return LabelTap(sink, self.label_field) if self.label_field else None

    def payload(self, sink: ShardSink) -> TunePayload:
        assert isinstance(sink, _Sink)
        return TunePayload(sink.rows)

    def empty(self) -> TunePayload:
        return TunePayload([])
