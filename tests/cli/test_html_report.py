"""``replay --format html``: a self-contained page, checked in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .conftest import EXAMPLES, Run, no_traceback

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Collector(HTMLParser):
    """Counts elements by tag and class, and collects every URL the page would load."""

    def __init__(self) -> None:
        super().__init__()
        self.classes: dict[str, int] = {}
        self.tags: dict[str, int] = {}
        self.ids: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name == "class" and value:
                for cls in value.split():
                    self.classes[cls] = self.classes.get(cls, 0) + 1
            if name == "id" and value:
                self.ids.add(value)
            if name in ("src", "href") and value and not value.startswith("#"):
                self.urls.append(value)


def _render(cli: Run, tmp_path: Path) -> Path:
    out = tmp_path / "report.html"
    done = cli(["replay", str(EXAMPLES), "--format", "html", "-o", str(out)])
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    return out


def test_html_page_structure(cli: Run, tmp_path: Path) -> None:
    """The HTML page is self-contained and draws one cell per call with every kind of mark."""
    page = _render(cli, tmp_path).read_text()
    parsed = _Collector()
    parsed.feed(page)
    assert parsed.urls == []  # self-contained: nothing to fetch
    assert "<link" not in page and "@import" not in page
    assert parsed.classes["card"] >= 6
    assert parsed.tags["article"] == 12  # one timeline per run of the examples
    # one cell per call of every run (151 calls in the examples)
    assert parsed.classes["c"] - 8 == 151  # minus the 8 legend swatches
    assert parsed.classes["s"] - 1 == 5  # five stops (+1 in the legend)
    assert parsed.classes["a"] - 1 == 2  # two post-compaction aborts
    assert parsed.classes["cp"] - 1 == 2  # two compactions drawn
    assert parsed.classes["x"] - 1 == 77  # calls after a stop, faded
    assert parsed.classes["r"] > 30  # repeated identical outcomes are hatched
    assert "compaction_loop_persisted" in page and "consecutive_repeat" in page
    rows = re.findall(r'<tr class="lvl-(\w+)"', page)
    assert len(rows) == 12
    assert rows[: rows.count("critical")] == ["critical"] * rows.count("critical")  # findings first
    # Text from traces is escaped, never interpreted.
    assert "<script>" not in page.replace("<script>\n(function", "")


def test_html_escapes_trace_content(cli: Run, tmp_path: Path) -> None:
    """Markup in trace content is escaped in the HTML page, never interpreted."""
    trace = tmp_path / "evil.jsonl"
    trace.write_text(
        '{"role": "user", "content": "<img src=x onerror=alert(1)>"}\n'
        '{"type": "function_call", "call_id": "c1", "name": "<b>tool</b>", "arguments": "{}"}\n'
    )
    out = tmp_path / "evil.html"
    done = cli(["replay", str(trace), "--format", "html", "-o", str(out)])
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "<b>tool</b>" not in page and "&lt;b&gt;tool&lt;/b&gt;" in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs it from apt)")
def test_html_report_in_headless_chromium(cli: Run, tmp_path: Path) -> None:
    """A real browser renders the HTML page without script errors."""
    page = _render(cli, tmp_path)
    profile = tmp_path / "profile"
    base = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
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
    html = dom.stdout
    # The browser built the DOM the report promises: totals, table, timelines, hover script.
    assert 'id="totals"' in html and 'id="summary"' in html and 'id="timelines"' in html
    assert html.count("<article") == 12
    assert html.count('class="c ') >= 151
    assert 'id="hover"' in html
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1300,1800", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # a rendered page, not a blank one
    keep = os.environ.get("LOOPWARDEN_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_replay_headers_list_the_rules_that_the_findings_come_from(
    cli: Run, tmp_path: Path
) -> None:
    """The text and HTML headers name every rule in force with its thresholds, loopwarden's
    own included (the findings below warn at 5 and block at 6), not OpenClaw's three numbers
    alone; the JSON carries the same rules; a config's own numbers show."""
    from loopwarden.config import load_config
    from loopwarden.report.rules import rules_in_force, rules_line

    replay_default = load_config({"tools": {"loopDetection": {"enabled": True}}})
    expected = "rules: " + rules_line(rules_in_force(replay_default))
    assert "consecutive_repeat warn 5 · block 6 · stop 8" in expected

    text = cli(["replay", str(EXAMPLES)]).stdout
    header, rules = text.splitlines()[:2]
    assert header.startswith("loopwarden replay — config: built-in defaults (enabled: true)")
    assert "breaker 30" not in header
    assert rules.strip() == expected
    assert "warn   consecutive_repeat" in text  # a finding of a rule the header names

    page = _render(cli, tmp_path).read_text(encoding="utf-8")
    assert f'<p class="meta rules">{expected}</p>' in page

    config = tmp_path / "loopwarden.json5"
    config.write_text(
        "{tools: {loopDetection: {enabled: true}}, "
        "loopwarden: {consecutiveRepeat: {warnAt: 3, blockAt: 4, stopAt: 6}}}"
    )
    done = cli(["replay", str(EXAMPLES), "--config", str(config), "--format", "json"])

    report = json.loads(done.stdout)
    repeat = next(r for r in report["config"]["rules"] if r["name"] == "consecutive_repeat")
    assert [t["at"] for t in repeat["thresholds"]] == [3, 4, 6]
