"""Replay at fleet scale: many inputs, sharded, on local worker processes or on Ray.

* :func:`plan_shards` turns files, folders, globs, ``.gz`` files and (with
  ``fsspec``) URLs into shards: one per file, and line-aligned ranges of large
  plain JSONL files that hold one run per line. The plan depends only on the
  inputs, so results never depend on who runs them.
* :func:`run_shards` runs a picklable task on every shard — in this process,
  on ``workers`` local processes or on Ray — and yields the results in shard
  order. Workers stream their input (memory stays flat) and send back small
  summaries, never traces; a dead worker costs only its shard.
* :class:`ShardJob` is the common task shape (a sink per shard read by
  :func:`loopwarden.traces.read_input`, problems with ``file:line``);
  :func:`~loopwarden.fleet.replay.replay_shards` is ``replay`` on a fleet, and
  :mod:`loopwarden.tune` builds on the same parts.
"""

from __future__ import annotations

from ._engines import ENGINES, EngineUnavailable, ShardTask, default_workers, run_shards
from ._inputs import SPLIT_BYTES, Shard, plan_shards
from ._job import ShardJob, ShardResult, ShardSink
from ._read import local_source, shard_source

__all__ = [
    "ENGINES",
    "SPLIT_BYTES",
    "EngineUnavailable",
    "Shard",
    "ShardJob",
    "ShardResult",
    "ShardSink",
    "ShardTask",
    "check_engine",
    "default_workers",
    "local_source",
    "plan_shards",
    "run_shards",
    "shard_source",
]


def check_engine(engine: str) -> str | None:
    """Why ``engine`` cannot run here (None when it can): for a clear error before any work."""
    if engine not in ENGINES:
        return f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}"
    if engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            return "--engine ray needs Ray: pip install 'loopwarden[ray]'"
    return None
