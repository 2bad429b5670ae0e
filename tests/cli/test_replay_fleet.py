"""``loopwarden replay --workers/--engine`` through the real command: the report never changes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.tune.corpus import fleet_corpus, local_ray, ray_turn

from .conftest import Run

__all__ = ["local_ray"]


def _json(cli: Run, *args: str) -> dict[str, Any]:
    done = cli(["replay", *args, "--format", "json"], timeout=180)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_same_report_on_one_and_two_workers_and_on_ray(
    cli: Run, tmp_path: Path, local_ray: Any
) -> None:
    """--workers 1, --workers 2 and --engine ray (a running cluster) print the identical report."""
    corpus = str(fleet_corpus(tmp_path))
    one = _json(cli, corpus, "--workers", "1")
    two = _json(cli, corpus, "--workers", "2")
    address = local_ray.get_runtime_context().gcs_address
    ray = _json(cli, corpus, "--engine", "ray", "--ray-address", address)
    assert one == two == ray
    totals = one["totals"]
    assert totals["files"] == 9 and totals["runs"] == 74 and totals["runs_warning"] >= 20
    labels = {run["run"] for run in one["runs"]}
    assert {"many#2", "many#60", "conv-58"} <= labels


def test_html_and_text_reports_do_not_depend_on_workers(cli: Run, tmp_path: Path) -> None:
    """The HTML page (with its timelines) and the text report come out byte for byte the same."""
    corpus = str(fleet_corpus(tmp_path))
    for fmt in ("html", "text"):
        pages = []
        for workers in ("1", "2"):
            out = tmp_path / f"report-{workers}.{fmt}"
            args = ["replay", corpus, "--workers", workers, "--format", fmt, "-o", str(out)]
            done = cli(args, timeout=180)
            assert done.returncode == 0, done.stderr
            pages.append(out.read_bytes())
        assert pages[0] == pages[1] and len(pages[0]) > 5000


def test_globs_and_gz_files(cli: Run, tmp_path: Path) -> None:
    """A quoted recursive glob reaches replay, and .gz traces read like plain ones."""
    corpus = fleet_corpus(tmp_path)
    plain = next((corpus / "examples" / "claude-code").glob("*.jsonl"))
    (plain.parent / "copy.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    data = _json(cli, str(corpus / "**" / "*.jsonl.gz"), "--workers", "2")
    files = [Path(i["file"]).name for i in data["inputs"]]
    assert files == ["copy.jsonl.gz", next(Path(i["file"]).name for i in data["inputs"][1:])]
    assert all(name.endswith(".gz") for name in files)
    formats = {run["source"]["format"] for run in data["runs"]}
    assert formats == {"claude-code", "codex"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray-address", "auto"], "--ray-address needs --engine ray"),
        (["--engine", "spark"], "'spark' is not one of 'local', 'ray'"),
        (["--workers", "0"], "0 is not in the range 1<=x<=4096"),
        (["--input-format", "yaml"], "unknown trace format 'yaml'"),
    ],
)
def test_bad_fleet_options_are_usage_errors(
    cli: Run, tmp_path: Path, args: list[str], message: str
) -> None:
    """Wrong engine options are refused with exit 2 before any input is read."""
    done = cli(["replay", str(tmp_path), *args])
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_a_glob_that_matches_nothing_is_a_usage_error(cli: Run, tmp_path: Path) -> None:
    """A glob without a match names itself in the error (exit 2)."""
    done = cli(["replay", str(tmp_path / "*.jsonl"), "--workers", "2"])
    assert done.returncode == 2 and "no file matches" in done.stderr


@pytest.mark.parametrize("command", ["replay", "tune"])
def test_a_ray_that_will_not_start_is_a_one_line_error(
    cli: Run, tmp_path: Path, command: str
) -> None:
    """Ray failing to start (here: its temp dir is a file) is exit 1 with a way out, not a crash."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    corpus = fleet_corpus(tmp_path)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with ray_turn():
        done = cli(
            [command, str(corpus), "--engine", "ray"],
            env={"RAY_TMPDIR": str(blocker)},
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"loopwarden {command}: error: could not start a local Ray: ")
    assert "--ray-address" in last and "--workers N" in last
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
