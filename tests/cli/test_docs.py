"""The Python examples of docs/cli.md run as documented."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests._snippets import snippet

from .conftest import EXAMPLES, ROOT, replay_json


def test_run_record_snippet_then_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run-record snippet's record stops at the breaker in replay; --set tunes it."""
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet("cli-run-record"), "docs/cli.md:cli-run-record", "exec"), {})
    record = tmp_path / "agent-runs.jsonl"
    assert record.exists()
    default = replay_json(str(record))["runs"][0]
    # The live defaults: the 8th identical read in a row stops the run (the record
    # holds the 8 calls the live guard saw).
    assert default["stop"]["call"] == 8
    assert default["stop"]["detector"] == "consecutive_repeat"
    tuned = replay_json(str(record), "--set", "warningThreshold=2", "--set", "criticalThreshold=3")
    run = tuned["runs"][0]
    assert (run["first_warning_call"], run["first_block_call"]) == (3, 4)


def test_json_gate_snippet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CI-gate snippet runs against the example traces and prints what the docs say."""
    shutil.copytree(EXAMPLES, tmp_path / "traces")
    monkeypatch.chdir(tmp_path)
    # the installed console script, as a user would have it on PATH
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    exec(compile(snippet("cli-json-gate"), "docs/cli.md:cli-json-gate", "exec"), {})
    out = capsys.readouterr().out
    assert out.count("consecutive_repeat") == 3
    assert out.count("unknown_tool_repeat") == 1  # a made-up tool, whichever rule saw it
    assert out.count("compaction_loop_persisted") == 2
    assert out.count(": cycle on ") == 1
    assert out.strip().endswith("97 calls came after a first warning")


def test_replay_sources_snippet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay_sources snippet reports the stopped example run and the totals."""
    monkeypatch.chdir(ROOT)
    exec(compile(snippet("cli-replay-sources"), "docs/cli.md:cli-replay-sources", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(
        "stopped at call 9 of 35: consecutive_repeat on Bash (count 8)"
        "; first warning at call 6, 29 calls after it; 26 calls after the stop"
    )
    assert out[-1] == "2 runs, 39 calls; fail a CI gate: True"
