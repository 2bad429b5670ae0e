"""The tune HTML report: self-contained, and its chart drawn by a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from loopwarden.cli.tune import tune_command

from .corpus import CHROMIUM_NOTE, known_corpus

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
GRID = ["--grid", "warningThreshold=3", "--grid", "criticalThreshold=6,12,20"]


def _page(tmp_path: Path) -> Path:
    labels = tmp_path / "labels.json"
    labels.write_text('{"bad-loop": "bad", "good-progress": "good", "good-plain": "good"}')
    out = tmp_path / "tune.html"
    args = [
        str(known_corpus(tmp_path)),
        *GRID,
        "--labels",
        str(labels),
        "--workers",
        "1",
        "--format",
        "html",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(tune_command, args, standalone_mode=False)
    assert result.exception is None, result.output
    return out


def test_html_is_self_contained_with_one_point_per_config(tmp_path: Path) -> None:
    """The page loads nothing, plots the defaults and three configs, rings the recommended one."""
    page = _page(tmp_path).read_text()
    assert (
        "src=" not in page
        and "<link" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    assert page.count('class="pt"') == 4 and page.count('<circle class="best"') == 1
    assert 'data-config="C2"' in page and "criticalThreshold&quot;: 12" in page
    assert page.count('fill="#c62828"') == 1  # C1 has a false block
    # The header names the rules in force, loopwarden's own with their thresholds.
    assert 'id="rules">rules of C0: unknown_tool_repeat block 11' in page
    assert "consecutive_repeat warn 5 · block 6 · stop 8" in page


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason=CHROMIUM_NOTE)
def test_chart_renders_in_headless_chromium(tmp_path: Path) -> None:
    """Chromium builds the chart's DOM and paints a non-blank screenshot of the page."""
    assert CHROMIUM is not None, "chromium is required in CI"
    page = _page(tmp_path)
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<svg id="chart"' in dom.stdout and dom.stdout.count("<circle") == 5
    shot = tmp_path / "tune.png"
    done = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1100,1400", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000
    keep = os.environ.get("LOOPWARDEN_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
