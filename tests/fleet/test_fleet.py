"""Fleet replay: same results on 1 or 2 worker processes and on Ray; problems, not crashes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopwarden.config import load_config
from loopwarden.fleet import plan_shards, run_shards
from loopwarden.fleet.replay import replay_fleet, replay_shards
from loopwarden.tune import build_candidates, default_changes, tune
from loopwarden.tune.report import to_dict
from tests.tune.corpus import (
    conversation,
    fleet_corpus,
    plain,
    stuck_loop,
    write_jsonl,
)

from ._jobs import DiesOnCrashFile, summary

BASE = load_config({"tools": {"loopDetection": {"enabled": True}}})
SPLIT = 4096  # bytes per range of a large one-run-per-line file, small for the tests


def _tune_json(shards: Any, **engine: Any) -> dict[str, Any]:
    candidates = build_candidates(BASE, default_changes())
    outcome = tune(shards, candidates, **engine)
    return to_dict(outcome, version="x", labels_file=None, label_field=None)


def test_large_files_are_split_by_run_and_give_the_whole_file_result(tmp_path: Path) -> None:
    """Ranges of a one-run-per-line file replay to exactly the runs of the whole file."""
    folder = fleet_corpus(tmp_path)
    split = plan_shards([str(folder / "many.jsonl")], split_bytes=SPLIT)
    whole = plan_shards([str(folder / "many.jsonl")])
    assert len(split) > 3 and len(whole) == 1
    assert [s.first_line for s in split][:2] == [1, split[1].first_line] and split[1].first_line > 2
    got = [r for res in replay_fleet(split, BASE, workers=1) for r in res.payload.reports]
    want = [r for res in replay_fleet(whole, BASE, workers=1) for r in res.payload.reports]
    assert [(r.label, r.line, r.calls, r.level) for r in got] == [
        (r.label, r.line, r.calls, r.level) for r in want
    ]
    assert {r.label for r in got} >= {"many#2", "many#60", "conv-58"}


def test_same_tune_totals_on_one_and_two_workers(tmp_path: Path) -> None:
    """workers=1 (in process) and workers=2 (processes) give the identical tune report."""
    shards = plan_shards([str(fleet_corpus(tmp_path))], split_bytes=SPLIT)
    one = _tune_json(shards, workers=1)
    two = _tune_json(shards, workers=2)
    assert one == two
    assert one["corpus"]["runs"] == 74 and one["corpus"]["runs_with_usage"] == 62


def test_same_replay_reports_on_one_and_two_workers(tmp_path: Path) -> None:
    """replay_fleet yields the same runs in the same order whatever the worker count."""
    shards = plan_shards([str(fleet_corpus(tmp_path))], split_bytes=SPLIT)
    assert summary(replay_fleet(shards, BASE, workers=1)) == summary(
        replay_fleet(shards, BASE, workers=2)
    )


def test_same_totals_on_ray(tmp_path: Path, local_ray: Any) -> None:
    """A local Ray (2 CPUs) gives the same tune report and replay runs as one process."""
    shards = plan_shards([str(fleet_corpus(tmp_path))], split_bytes=SPLIT)
    assert _tune_json(shards, engine="ray") == _tune_json(shards, workers=1)
    assert summary(replay_fleet(shards, BASE, engine="ray")) == summary(
        replay_fleet(shards, BASE, workers=1)
    )


def test_globs_and_gz_inputs(tmp_path: Path) -> None:
    """A recursive glob finds plain and .gz traces; the .gz one reads like its plain twin."""
    folder = fleet_corpus(tmp_path)
    shards = plan_shards([str(folder / "examples" / "**" / "rollout-*")])
    assert [Path(s.name).name.endswith(".gz") for s in shards] == [False, True]
    results = summary(replay_fleet(shards, BASE, workers=2))
    assert results[0][1] == results[1][1] == "codex"
    assert results[0][4] == results[1][4]


def test_malformed_records_are_problems_with_file_and_line(tmp_path: Path) -> None:
    """A broken line and an unreadable file are reported (file:line), the rest replays."""
    good = write_jsonl(tmp_path / "a.jsonl", [conversation("r1", stuck_loop())])
    broken = tmp_path / "b.jsonl"
    broken.write_text(json.dumps(conversation("r2", plain())) + "\n{not json\n")
    (tmp_path / "c.json").write_text("[1, 2")
    shards = plan_shards([str(good), str(broken), str(tmp_path / "c.json")])
    results = list(replay_fleet(shards, BASE, workers=2))
    assert [len(r.payload.reports) for r in results] == [1, 1, 0]
    assert results[1].problems[0][0] == f"{broken}:2"
    assert results[2].error is not None and "not valid JSON" in results[2].error


def test_a_dead_worker_costs_only_its_input(tmp_path: Path) -> None:
    """A worker process that exits mid-job fails its own shard; the others are replayed."""
    for name in ("a.jsonl", "crash.jsonl", "z.jsonl"):
        write_jsonl(tmp_path / name, [conversation(name, stuck_loop())])
    shards = plan_shards([str(tmp_path)])
    job = DiesOnCrashFile(BASE)
    results = list(run_shards(job, shards, workers=2))
    assert [Path(r.shard.name).name for r in results] == ["a.jsonl", "crash.jsonl", "z.jsonl"]
    assert [len(r.payload.reports) for r in results] == [1, 0, 1]
    assert results[1].error is not None and "worker process died" in results[1].error


def test_fsspec_urls(tmp_path: Path) -> None:
    """``file://`` globs go through fsspec and read like local paths."""
    pytest.importorskip("fsspec")
    folder = fleet_corpus(tmp_path)
    local = plan_shards([str(folder / "examples" / "codex")])
    remote = plan_shards([f"file://{folder}/examples/codex/*.jsonl*"])
    assert all(s.url is not None for s in remote) and len(remote) == 2
    got = summary(replay_fleet(remote, BASE, workers=2))
    want = summary(replay_fleet(local, BASE, workers=1))
    assert [g[1:] for g in got] == [w[1:] for w in want]


def test_missing_inputs_are_usage_errors(tmp_path: Path) -> None:
    """A path or glob that names nothing is an error before any work starts."""
    from loopwarden.traces import TraceInputError

    with pytest.raises(TraceInputError, match="no file matches"):
        plan_shards([str(tmp_path / "*.jsonl")])
    with pytest.raises(TraceInputError, match="no such file"):
        plan_shards([str(tmp_path / "missing.jsonl")])
    assert orjson.dumps([s.name for s in plan_shards([str(tmp_path)])]) == b"[]"


class _Runs:
    """A run writer that keeps what the report shows of each run, in order."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def run(self, report: Any) -> None:
        self.rows.append((report.label, report.source, report.line, report.calls, report.level))


def test_replay_shards_in_process_and_on_workers_agree_on_split_files(tmp_path: Path) -> None:
    """Ranges read in this process (replay_sources) and by two workers give the same runs."""
    folder = fleet_corpus(tmp_path)
    (folder / "broken.jsonl").write_text('{"messages": []}\n{oops\n')
    shards = plan_shards([str(folder)], split_bytes=SPLIT)
    assert sum(s.is_range for s in shards) > 3
    results = []
    for workers in (1, 2):
        runs = _Runs()
        totals = replay_shards(shards, BASE, writer=runs, workers=workers)
        results.append((runs.rows, totals.to_dict(), totals.inputs, totals.problem_list))
    assert results[0] == results[1]
    rows, figures, inputs, problems = results[0]
    assert figures["runs"] == len(rows) == 75 and figures["files"] == len(inputs) == 10
    assert {"many#2", "many#60", "conv-58"} <= {row[0] for row in rows}
    assert problems == [(f"{folder / 'broken.jsonl'}:2", problems[0][1])]


def test_workers_from_a_forkserver_while_a_thread_runs(tmp_path: Path) -> None:
    """With another thread alive, workers are not forked from this process; same runs."""
    import threading

    from loopwarden.fleet._engines import _context
    from loopwarden.fleet.replay import ReplayJob

    shards = plan_shards([str(fleet_corpus(tmp_path))], split_bytes=SPLIT)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert _context(ReplayJob(BASE)).get_start_method() == "forkserver"
        two = summary(replay_fleet(shards, BASE, workers=2))
    finally:
        stop.set()
        thread.join()
    assert two == summary(replay_fleet(shards, BASE, workers=1))
