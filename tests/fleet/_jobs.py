"""A fleet job whose worker process dies on one input (importable by worker processes)."""

from __future__ import annotations

import os
from typing import Any

from loopwarden.fleet import Shard, ShardResult
from loopwarden.fleet.replay import ReplayJob, ReplayPayload


class DiesOnCrashFile(ReplayJob):
    """Replays like ``replay``, except that the worker process exits on a file named crash*."""

    def run(self, shard: Shard) -> ShardResult[ReplayPayload]:
        if os.path.basename(shard.name).startswith("crash"):
            os._exit(3)
        return super().run(shard)


def summary(results: Any) -> list[tuple[Any, ...]]:
    return [
        (
            r.shard.name,
            r.format,
            r.error,
            r.problem_count,
            [(x.label, x.calls, x.level, x.calls_after_stop) for x in r.payload.reports],
        )
        for r in results
    ]
