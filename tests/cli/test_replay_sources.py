"""``traces.replay.replay_sources``: the replay loop as a library call, without the CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import loopwarden as lw
from loopwarden.traces import OpenedSource, expand_paths
from loopwarden.traces.replay import RunReport, Totals, replay_sources

from .conftest import EXAMPLES, replay_json

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
CLAUDE = next((EXAMPLES / "claude-code").glob("*.jsonl"))


class Collect:
    """A run writer that keeps the reports."""

    def __init__(self) -> None:
        self.reports: list[RunReport] = []

    def run(self, report: RunReport) -> None:
        self.reports.append(report)


class Progress:
    """A progress follower that records what it is told."""

    def __init__(self) -> None:
        self.opened: list[OpenedSource] = []
        self.done: list[int] = []

    def open(self, opened: OpenedSource) -> None:
        self.opened.append(opened)

    def file_done(self, index: int) -> None:
        self.done.append(index)


def _replay(paths: list[Path], config: Any = CONFIG, **kwargs: Any) -> tuple[Totals, Collect]:
    writer = Collect()
    sources = expand_paths([str(p) for p in paths])
    totals = replay_sources(sources, lw.load_config(config), writer=writer, **kwargs)
    return totals, writer


def test_totals_match_the_cli_json_report() -> None:
    """Over the bundled examples the library totals and runs equal ``replay --format json``."""
    totals, writer = _replay([EXAMPLES])
    report = replay_json(str(EXAMPLES))
    assert totals.to_dict() == report["totals"]
    assert [r.to_dict() for r in writer.reports] == report["runs"]
    assert totals.runs == len(writer.reports) > 5
    assert {info.format for info in totals.inputs} >= {"claude-code", "codex", "loopwarden"}


def test_an_unreadable_input_is_reported_and_skipped(tmp_path: Path) -> None:
    """An input of unknown format goes to on_error and into the totals; the others replay."""
    unknown = tmp_path / "a-unknown.json"
    unknown.write_text(json.dumps({"hello": "world"}))
    good = tmp_path / "b-good.jsonl"
    good.write_bytes(CLAUDE.read_bytes())
    errors: list[str] = []
    totals, writer = _replay([unknown, good], on_error=errors.append)
    assert len(errors) == 1 and str(unknown) in errors[0]
    assert "cannot tell which trace format" in errors[0]
    assert [(i.format, i.error is not None) for i in totals.inputs] == [
        (None, True),
        ("claude-code", False),
    ]
    assert writer.reports and not totals.nothing_read

    totals, _ = _replay([unknown])
    assert totals.nothing_read


def test_empty_input_alone_is_not_a_failure(tmp_path: Path) -> None:
    """An empty file is read (no runs), so the replay did not fail to read anything."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    totals, writer = _replay([empty])
    assert totals.inputs[0].error == "empty input"
    assert writer.reports == [] and not totals.nothing_read


def test_skipped_records_are_counted_and_passed_on(tmp_path: Path) -> None:
    """Malformed records reach on_problem with their place and are counted in the totals."""
    lines = CLAUDE.read_text().splitlines()
    lines.insert(3, "[1, 2, 3]")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n")
    problems: list[tuple[str, str]] = []
    totals, _ = _replay([broken], on_problem=lambda where, why: problems.append((where, why)))
    assert problems == [(f"{broken}:4", "expected a JSON object")]
    assert totals.problems == 1 and totals.problem_list == problems


def test_progress_follows_every_input(tmp_path: Path) -> None:
    """The progress follower sees each input opened and finished, in order."""
    paths = [tmp_path / "1.jsonl", tmp_path / "2.jsonl"]
    for path in paths:
        path.write_bytes(CLAUDE.read_bytes())
    progress = Progress()
    _replay(paths, progress=progress)
    assert [o.source.name for o in progress.opened] == [str(p) for p in paths]
    assert progress.done == [0, 1]


def test_replay_never_writes_the_configured_run_record(tmp_path: Path) -> None:
    """A config's runRecord belongs to the live guard: replaying leaves it untouched."""
    record = tmp_path / "live-record.jsonl"
    config = {**CONFIG, "loopwarden": {"runRecord": str(record)}}
    totals, _ = _replay([CLAUDE], config)
    assert totals.calls > 0
    assert not record.exists()


def test_fail_levels() -> None:
    """``reached`` says whether any run got a warning (or worse) or a critical intervention."""
    totals, writer = _replay([CLAUDE])
    levels = {r.level for r in writer.reports}
    assert totals.reached("warning") == bool(levels & {"warning", "critical"})
    assert totals.reached("critical") == ("critical" in levels)
    assert totals.reached("critical")  # the example run loops until it is stopped


def test_byte_ranges_of_a_file_replay_as_the_whole_file(tmp_path: Path) -> None:
    """Sources for line-aligned ranges give the whole file's runs, labels, lines and problems."""
    from loopwarden.traces import ByteRange, Source

    lines = []
    for n in range(9):
        calls = [
            {"role": "assistant", "tool_calls": [_call(f"c{i}", "poll", {"job": n})]}
            for i in range(12)
        ]
        results = [{"role": "tool", "tool_call_id": f"c{i}", "content": "busy"} for i in range(12)]
        messages = [m for pair in zip(calls, results, strict=True) for m in pair]
        conversation: dict[str, Any] = {"messages": messages}
        if n % 3 == 0:
            conversation["id"] = f"run-{n}"
        lines.append(json.dumps(conversation).encode() + b"\n")
    lines.insert(5, b"{broken\n")
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"".join(lines))
    cuts = [0, len(b"".join(lines[:3])), len(b"".join(lines[:7])), path.stat().st_size]
    ranges = [
        Source(str(path), path, ByteRange(start, end, 1 + [0, 3, 7][i], "chat"))
        for i, (start, end) in enumerate(itertools.pairwise(cuts))
    ]
    config = lw.load_config(CONFIG)
    whole, parts = Collect(), Collect()
    one = replay_sources(expand_paths([str(path)]), config, writer=whole)
    split = replay_sources(ranges, config, writer=parts)
    rows = [[(r.label, r.line, r.calls, r.level) for r in w.reports] for w in (whole, parts)]
    assert rows[0] == rows[1] and len(rows[0]) == 9
    assert [r[0] for r in rows[0]][:3] == ["run-0", "runs#2", "runs#3"]
    assert one.to_dict() == split.to_dict() and len(split.inputs) == 1
    assert one.problem_list == split.problem_list == [(f"{path}:6", one.problem_list[0][1])]


def _call(ident: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": ident,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(args)},
    }


def test_unknown_tool_wordings_still_found_behind_the_quick_check() -> None:
    """Each wording the guard knows is still an error naming the tool; other texts are results."""
    from loopwarden.hashing import MISSING
    from loopwarden.traces._common import _UNKNOWN_WORDS, outcome_from_text

    wordings = [
        "Unknown tool name: 'fetch_page'",
        "unknown tool: fetch_page",
        "Tool 'fetch_page' not found.",
        "Tool fetch_page is not available",
        "No such tool available: fetch_page",
        "unsupported call: fetch_page",
        "Error: fetch_page is not a valid tool, try one of [search].",
    ]
    for text in wordings:
        assert outcome_from_text("Fetch_Page ", text) == (MISSING, text), text
    for text in ("fetch_page returned 3 rows", "Tool 'search' not found.", "unknown tool: x"):
        assert outcome_from_text("fetch_page", text) == (text, MISSING), text
    # The quick check only skips texts in which no wording can match.
    from loopwarden.hashing import _UNKNOWN_PATTERNS

    for pattern in _UNKNOWN_PATTERNS:
        assert any(word in pattern.pattern.lower() for word in _UNKNOWN_WORDS), pattern.pattern
