"""``tune`` on small synthetic corpora with known answers, through the real guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loopwarden.cli.tune import tune_command
from loopwarden.config import load_config
from loopwarden.fleet import plan_shards
from loopwarden.fleet.replay import replay_fleet
from loopwarden.tune import (
    GridError,
    LabelBook,
    build_candidates,
    default_changes,
    grid_changes,
    parse_grid,
    tune,
)

from .corpus import conversation, known_corpus, slow_progress, stuck_loop, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"
BASE = {"tools": {"loopDetection": {"enabled": True}}}
GRID = ["warningThreshold=3", "criticalThreshold=6,12,20"]
LABELS = {"bad-loop": "stuck", "good-progress": "healthy", "good-plain": "good"}


def _run(folder: Path, grid: list[str] = GRID, **kwargs: object) -> object:
    candidates = build_candidates(load_config(BASE), grid_changes(parse_grid(grid)))
    return tune(plan_shards([str(folder)]), candidates, workers=1, **kwargs)  # type: ignore[arg-type]


def test_exactly_one_config_catches_the_loop_without_a_false_block(tmp_path: Path) -> None:
    """The defaults (C0) miss the loop; block at 6 also blocks the healthy run, at 20 misses
    the loop, 12 is the only clean catch: it beats the defaults and is recommended."""
    outcome = _run(known_corpus(tmp_path), labels=LabelBook(LABELS))
    stats = outcome.stats  # type: ignore[attr-defined]
    assert [c.name for c in outcome.candidates] == ["C0", "C1", "C2", "C3"]  # type: ignore[attr-defined]
    assert [s.calls_prevented for s in stats] == [0, 10, 2, 0]
    assert [s.false_blocks for s in stats] == [0, 1, 0, 0]
    assert [s.runs_blocked for s in stats] == [0, 2, 1, 0]
    assert [s.false_warnings for s in stats] == [0, 0, 1, 1]
    assert stats[1].examples["false_block"] == ["good-progress"]
    rec = outcome.recommendation  # type: ignore[attr-defined]
    assert rec.index == 2 and rec.zero_false_blocks and rec.basis == "labels"
    assert rec.baseline == 0 and rec.needed == 1
    block = outcome.candidates[2].config_block()  # type: ignore[attr-defined]
    assert block == {
        "tools": {
            "loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 12}
        }
    }
    # The loop is caught by every config at its 4th call (warning at 3 repeats).
    assert [s.loops_caught for s in stats][1:] == [1, 1, 1]
    assert [s.median_first_alarm() for s in stats][1:] == [4.0, 4.0, 4.0]


def test_without_labels_the_recommendation_uses_blocks_outside_loops(tmp_path: Path) -> None:
    """No labels: the healthy 8-call poll (shorter than a loop) blocked at 6 still rules C1 out."""
    outcome = _run(known_corpus(tmp_path))
    assert not outcome.labelled  # type: ignore[attr-defined]
    assert [s.blocked_outside_loops for s in outcome.stats] == [0, 1, 0, 0]  # type: ignore[attr-defined]
    rec = outcome.recommendation  # type: ignore[attr-defined]
    assert rec.index == 2 and rec.basis == "loops" and "no labels given" in rec.text


def test_configs_that_block_a_healthy_run_do_not_beat_the_defaults(tmp_path: Path) -> None:
    """Every grid config blocks the healthy run and the defaults do not: keep the defaults,
    and no block to paste."""
    outcome = _run(
        known_corpus(tmp_path),
        ["warningThreshold=2", "criticalThreshold=3,4"],
        labels=LabelBook(LABELS),
    )
    assert [s.false_blocks for s in outcome.stats] == [0, 1, 1]  # type: ignore[attr-defined]
    rec = outcome.recommendation  # type: ignore[attr-defined]
    assert rec.index is None and rec.baseline == 0 and rec.zero_false_blocks
    assert rec.text.startswith("no difference: keep the defaults (C0: 0 calls prevented")
    from loopwarden.tune.report import config_block_text

    assert config_block_text(outcome) is None  # type: ignore[arg-type]


def test_without_a_baseline_the_least_bad_config_is_named(tmp_path: Path) -> None:
    """``baseline=False``: every config blocks the healthy run; the report says so and names
    the one with the fewest false blocks."""
    candidates = build_candidates(
        load_config(BASE),
        grid_changes(parse_grid(["warningThreshold=2", "criticalThreshold=3,4"])),
        baseline=False,
    )
    outcome = tune(
        plan_shards([str(known_corpus(tmp_path))]),
        candidates,
        workers=1,
        labels=LabelBook(LABELS),
    )
    rec = outcome.recommendation
    assert not rec.zero_false_blocks and rec.baseline is None
    assert rec.text.startswith("no config in the grid has 0 false blocks")


def test_tokens_of_prevented_turns_and_not_recorded(tmp_path: Path) -> None:
    """Usage on assistant turns is summed for prevented calls; without usage it says so."""
    outcome = _run(known_corpus(tmp_path, usage=110))
    assert [s.prevented_tokens for s in outcome.stats] == [0, 1100, 220, 0]  # type: ignore[attr-defined]
    assert outcome.corpus.tokens == 28 * 110  # type: ignore[attr-defined]
    bare = tmp_path / "bare"
    bare.mkdir()
    outcome = _run(known_corpus(bare, usage=None))
    assert outcome.corpus.runs_with_usage == 0  # type: ignore[attr-defined]
    from loopwarden.tune.report import to_dict, tokens_text

    assert tokens_text(outcome, 0) == "not recorded"  # type: ignore[arg-type]
    data = to_dict(outcome, version="x", labels_file=None, label_field=None)  # type: ignore[arg-type]
    assert data["configs"][1]["tokens"] == {
        "recorded": False,
        "prevented_turns": None,
        "after_stop": None,
        "prevented_calls_without_usage": 10,
    }


def test_labels_read_from_a_trace_field(tmp_path: Path) -> None:
    """``--label-field outcome`` takes each conversation's own outcome field as its label."""
    write_jsonl(
        tmp_path / "runs.jsonl",
        [
            conversation(None, stuck_loop(), extra={"outcome": "stuck"}),
            conversation(None, slow_progress(), extra={"outcome": "resolved"}),
        ],
    )
    outcome = _run(tmp_path, label_field="outcome")
    assert outcome.labelled and outcome.corpus.good == 1 and outcome.corpus.bad == 1  # type: ignore[attr-defined]
    assert [s.false_blocks for s in outcome.stats] == [0, 1, 0, 0]  # type: ignore[attr-defined]


def test_grid_config_gives_the_same_runs_as_replay() -> None:
    """Each config's blocked/stopped runs and prevented calls equal a plain Replayer's."""
    shards = plan_shards([str(EXAMPLES)])
    candidates = build_candidates(load_config(BASE), default_changes())
    outcome = tune(shards, candidates, workers=1)
    for candidate, stats in zip(candidates, outcome.stats, strict=True):
        reports = [
            r
            for res in replay_fleet(shards, candidate.config, workers=1)
            for r in res.payload.reports
        ]
        prevented = sum(r.calls_prevented for r in reports)
        assert stats.calls_prevented == prevented, candidate.describe()
        assert stats.runs_stopped == sum(r.stop is not None for r in reports)
        assert stats.runs_warned == sum(r.level == "warning" for r in reports)


def test_nested_settings_of_the_own_rules_are_grid_keys(tmp_path: Path) -> None:
    """``loopwarden.consecutiveRepeat.blockAt`` is an axis: each value is its own config."""
    same = [("read_file", {"path": "/src/app.py"}, "the same text")] * 14
    write_jsonl(tmp_path / "runs.jsonl", [conversation("stuck", same, usage=90)])
    shards = plan_shards([str(tmp_path)])
    axes = parse_grid(["loopwarden.consecutiveRepeat.blockAt=6,7,8"])
    candidates = build_candidates(load_config(BASE), grid_changes(axes))
    assert [c.describe() for c in candidates] == [
        "defaults",
        *(f"loopwarden.consecutiveRepeat.blockAt={n}" for n in (6, 7, 8)),
    ]
    assert candidates[2].config_block()["loopwarden"] == {"consecutiveRepeat": {"blockAt": 7}}
    outcome = tune(shards, candidates, workers=1)
    prevented = [s.calls_prevented for s in outcome.stats]
    for candidate, count in zip(candidates, prevented, strict=True):
        reports = [
            r
            for res in replay_fleet(shards, candidate.config, workers=1)
            for r in res.payload.reports
        ]
        assert count == sum(
            r.counts["block"] + r.counts["stop"] + r.calls_after_stop for r in reports
        )
    assert prevented[0] == prevented[1]  # blockAt 6 is the default
    assert prevented[1] > prevented[3]  # a later block lets more of the loop through


def test_a_nested_setting_that_breaks_the_order_is_refused() -> None:
    """The validator's ordering rule reaches the grid with its path."""
    with pytest.raises(GridError) as caught:
        parse_grid(["loopwarden.consecutiveRepeat.blockAt=4"])
    assert "--grid loopwarden.consecutiveRepeat.blockAt=4: loopwarden.consecutiveRepeat" in str(
        caught.value
    )
    assert "blockAt 4 is below warnAt 5" in str(caught.value)


def test_default_grid_follows_the_validator_keys() -> None:
    """The default grid lowers every threshold the config knows and flips every detector."""
    changes = default_changes()
    assert changes[0] == {}
    keys = {key for change in changes for key in change}
    assert {"warningThreshold", "criticalThreshold", "globalCircuitBreakerThreshold"} <= keys
    assert {"detectors.genericRepeat", "detectors.pingPong"} <= keys
    # loopwarden's own rules act first on most loops: their thresholds are in it too.
    for rule in ("consecutiveRepeat", "cycle", "failureStreak"):
        assert f"loopwarden.{rule}.blockAt" in keys or f"loopwarden.{rule}.blockRounds" in keys
        assert {f"loopwarden.{rule}.enabled": False} in changes
    assert {"loopwarden.blocksInARow.enabled": False} in changes
    for change in changes:  # every default entry is valid for the real validator
        build_candidates(load_config(BASE), [change])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "warningThreshhold=5",
            "tools.loopDetection.warningThreshhold: unknown key; did you mean 'warningThreshold'?",
        ),
        (
            "criticalThreshold=10,0",
            "tools.loopDetection.criticalThreshold: expected a positive integer",
        ),
        (
            "detectors.pingPongg=true",
            "tools.loopDetection.detectors.pingPongg: unknown key; did you mean 'pingPong'?",
        ),
        (
            "detectors.pingPong=maybe",
            "tools.loopDetection.detectors.pingPong: expected true or false",
        ),
        ("loopwarden.failMode=open,sometimes", "loopwarden.failMode: expected 'open' or 'closed'"),
        (
            'loopwarden.sendTool=["x"]',
            "loopwarden.sendTool: unknown key; did you mean 'sendTools'?",
        ),
        ("criticalThreshold", "--grid expects KEY=V1,V2,..."),
    ],
)
def test_bad_grid_keys_and_values_get_the_validator_errors(spec: str, expected: str) -> None:
    """A wrong key or value is refused with the config validator's path and suggestion."""
    with pytest.raises(GridError) as caught:
        parse_grid([spec])
    assert expected in str(caught.value)


def test_cli_rejects_a_bad_grid_with_exit_2(tmp_path: Path) -> None:
    """The command reports the validator's message on stderr and exits 2."""
    result = CliRunner().invoke(
        tune_command, [str(known_corpus(tmp_path)), "--grid", "warningTreshold=5"]
    )
    assert result.exit_code == 2
    assert "did you mean 'warningThreshold'" in result.output


def test_cli_json_report_with_labels_file(tmp_path: Path) -> None:
    """``--labels`` (CSV) and ``--format json -o`` give the schema'd report and the pick."""
    labels = tmp_path / "labels.csv"
    labels.write_text("run,label\n" + "".join(f"{k},{v}\n" for k, v in LABELS.items()))
    out = tmp_path / "tune.json"
    args = [
        str(known_corpus(tmp_path)),
        *[arg for g in GRID for arg in ("--grid", g)],
        "--labels",
        str(labels),
        "--workers",
        "1",
        "--format",
        "json",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(tune_command, args, standalone_mode=False)
    assert result.exception is None, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "loopwarden.tune/1"
    assert data["labels"]["good"] == 2 and data["labels"]["matched_from_file"] == 3
    assert data["recommendation"]["config"] == "C2"
    assert [c["false_blocks"] for c in data["configs"]] == [0, 1, 0, 0]
    assert data["recommendation"]["baseline"] == "C0"
    assert data["recommendation"]["keep_defaults"] is False
    assert (
        data["recommendation"]["config_block"]["tools"]["loopDetection"]["criticalThreshold"] == 12
    )


def test_cli_text_report_prints_the_block_to_paste(tmp_path: Path) -> None:
    """The text report ends with the recommended config as JSON."""
    args = [
        str(known_corpus(tmp_path)),
        *[arg for g in GRID for arg in ("--grid", g)],
        "--workers",
        "1",
    ]
    result = CliRunner().invoke(tune_command, args, standalone_mode=False)
    assert result.exception is None, result.output
    text = result.output
    assert "recommended: C2" in text
    block = json.loads(text[text.index("{") :])
    assert block["tools"]["loopDetection"]["criticalThreshold"] == 12
