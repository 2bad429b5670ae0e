"""``loopwarden tune`` through the real command line, in a subprocess."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import run_cli

from .corpus import fleet_corpus, known_corpus, ray_turn

GRID = ["--grid", "warningThreshold=3", "--grid", "criticalThreshold=6,12,20"]


def _tune_json(*args: str) -> dict[str, Any]:
    done = run_cli(["tune", *args, "--format", "json"], timeout=240)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_same_tune_report_on_one_and_two_workers_and_on_a_local_ray(tmp_path: Path) -> None:
    """--workers 1, --workers 2 and --engine ray (a local Ray the command starts) agree."""
    corpus = str(fleet_corpus(tmp_path))
    one = _tune_json(corpus, *GRID, "--workers", "1")
    two = _tune_json(corpus, *GRID, "--workers", "2")
    assert one == two
    if importlib.util.find_spec("ray") is not None:  # the no-extras suite has no Ray
        with ray_turn():
            assert _tune_json(corpus, *GRID, "--engine", "ray", "--workers", "2") == one
    assert one["corpus"]["runs"] == 74 and one["corpus"]["runs_with_usage"] == 62
    assert [c["calls_prevented"] for c in one["configs"]][1] > 0
    assert len(one["inputs"]) == 9 and all(i["error"] is None for i in one["inputs"])


def test_text_report_recommends_and_prints_the_block_to_paste(tmp_path: Path) -> None:
    """The table ends with the recommendation and a config block that parses as JSON."""
    done = run_cli(["tune", str(known_corpus(tmp_path)), *GRID, "--workers", "1"])
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "recommended: C2" in text and "tokens recorded in 3 of 3 runs" in text
    block = json.loads(text[text.index("{") :])
    assert block["tools"]["loopDetection"] == {
        "enabled": True,
        "warningThreshold": 3,
        "criticalThreshold": 12,
    }


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (
            "warningThreshhold=5",
            "--grid warningThreshhold=5: tools.loopDetection.warningThreshhold: unknown key; "
            "did you mean 'warningThreshold'?",
        ),
        (
            "criticalThreshold=10,-3",
            "tools.loopDetection.criticalThreshold: expected a positive integer",
        ),
        (
            "detectors.pingPong=perhaps",
            "tools.loopDetection.detectors.pingPong: expected true or false",
        ),
        ("loopwarden.failMode=open,ajar", "loopwarden.failMode: expected 'open' or 'closed'"),
        ("criticalThreshold", "--grid expects KEY=V1,V2,..."),
    ],
)
def test_bad_grid_keys_and_values_exit_2_with_the_validator_message(
    tmp_path: Path, grid: str, message: str
) -> None:
    """A bad --grid is refused before any trace is read, with the config validator's path."""
    done = run_cli(["tune", str(known_corpus(tmp_path)), "--grid", grid])
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_labels_file_that_is_not_labels_is_a_usage_error(tmp_path: Path) -> None:
    """--labels with no good/bad entry says so (exit 2)."""
    labels = tmp_path / "labels.csv"
    labels.write_text("run,label\nx,maybe\n")
    done = run_cli(["tune", str(known_corpus(tmp_path)), "--labels", str(labels)])
    assert done.returncode == 2 and "has no good/bad label" in done.stderr
