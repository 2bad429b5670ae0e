"""Tune reports: a table for the terminal and a JSON document (schema ``loopwarden.tune/1``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from . import TuneOutcome

__all__ = ["SCHEMA", "config_block_text", "to_dict", "write_text"]

SCHEMA = "loopwarden.tune/1"
"""Identifier of the JSON schema; fields are only ever added within the same name."""


def config_block_text(outcome: TuneOutcome) -> str | None:
    """The recommended config as JSON to paste into a config file."""
    index = outcome.recommendation.index
    if index is None:
        return None
    block = outcome.candidates[index].config_block()
    return orjson.dumps(block, option=orjson.OPT_INDENT_2).decode()


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def tokens_text(outcome: TuneOutcome, index: int) -> str:
    """Tokens of the turns behind prevented calls, or why there is no figure."""
    if not outcome.corpus.runs_with_usage:
        return "not recorded"
    stats = outcome.stats[index]
    text = f"{stats.prevented_tokens:,}"
    if stats.prevented_without_usage:
        text += "+"  # some prevented calls are in runs without usage
    return text


def _median(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}"


def write_text(
    outcome: TuneOutcome, out: Callable[[str], None], style: Callable[..., str] | None = None
) -> None:
    """The per-config table, the recommendation and the config block to paste."""
    paint = style or (lambda text, **_: text)
    corpus = outcome.corpus
    labels = (
        f"labels: {corpus.good} good, {corpus.bad} bad, {corpus.unlabelled} without"
        if outcome.labelled
        else "no labels (false blocks unknown: give --labels FILE)"
    )
    usage = (
        f"tokens recorded in {corpus.runs_with_usage} of {corpus.runs} runs"
        if corpus.runs_with_usage
        else "token usage not recorded in these traces"
    )
    out(
        f"tune: {corpus.runs} runs, {corpus.calls} calls, {corpus.loops} loops "
        f"(>= {outcome.min_loop} repeated or alternating calls) in {corpus.runs_with_loops} runs"
    )
    out(f"      {labels}; {usage}")
    base = outcome.recommendation.baseline
    base_rules = outcome.rules(base if base is not None else 0) if outcome.candidates else []
    if base_rules:
        from ..report.rules import rules_line

        name = outcome.candidates[base if base is not None else 0].name
        out(f"      rules of {name}: {rules_line(base_rules)}")
    out("")
    head = [
        "config",
        "warned",
        "blocked",
        "stopped",
        "prevented",
        "tokens",
        "loops caught",
        "1st alarm",
    ]
    head += ["false blocks", "false warns"] if outcome.labelled else ["blocks w/o loop"]
    rows = [head]
    for i, (cand, stats) in enumerate(zip(outcome.candidates, outcome.stats, strict=True)):
        row = [
            cand.name,
            str(stats.runs_warned),
            str(stats.runs_blocked),
            str(stats.runs_stopped),
            f"{stats.calls_prevented} ({_pct(stats.calls_prevented, corpus.calls)})",
            tokens_text(outcome, i),
            f"{stats.loops_caught}/{corpus.loops}",
            _median(stats.median_first_alarm()),
        ]
        if outcome.labelled:
            row += [str(stats.false_blocks), str(stats.false_warnings)]
        else:
            row += [str(stats.blocked_outside_loops)]
        rows.append(row)
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    best = outcome.recommendation.index
    for n, row in enumerate(rows):
        line = "  ".join(
            cell.ljust(widths[k]) if k == 0 else cell.rjust(widths[k]) for k, cell in enumerate(row)
        )
        if n == 0:
            line = paint(line, bold=True)
        elif best is not None and n - 1 == best:
            line = paint(line + "  <- recommended", fg="green")
        out(line)
    out("")
    from ..report.rules import rules_changed

    for i, cand in enumerate(outcome.candidates):
        extra = f"  (same as: {'; '.join(cand.same_as)})" if cand.same_as else ""
        out(f"  {cand.name:<4} {cand.describe()}{extra}")
        for repair in cand.repairs:
            out(f"       repaired: {repair}")
        changed = rules_changed(base_rules, outcome.rules(i)) if i != base else ""
        if changed:
            out(f"       rules: {changed}")
    out("")
    out(
        "prevented: calls that would not have run (blocked, or after a stop); tokens: what the "
        "turns behind them cost ('+': some were in runs without usage); 1st alarm: median "
        "position of the first warning/block inside each caught loop (1 = the loop's first call)"
    )
    out("")
    rec = outcome.recommendation
    if rec.index is None and rec.baseline is not None:
        out(paint(rec.text, fg="green" if rec.zero_false_blocks else "yellow"))
    else:
        colour = "green" if rec.zero_false_blocks else "yellow"
        out(paint(("recommended: " if rec.zero_false_blocks else "note: ") + rec.text, fg=colour))
    block = config_block_text(outcome)
    if block is not None:
        out("paste into your config (JSON5/JSON, OpenClaw layout):")
        out(block)
    if outcome.problem_count:
        out(f"{outcome.problem_count} malformed records skipped")


def to_dict(
    outcome: TuneOutcome, *, version: str, labels_file: str | None, label_field: str | None
) -> dict[str, Any]:
    """The JSON report."""
    corpus = outcome.corpus
    configs: list[dict[str, Any]] = []
    for cand, stats in zip(outcome.candidates, outcome.stats, strict=True):
        recorded = corpus.runs_with_usage > 0
        configs.append(
            {
                "name": cand.name,
                "changes": cand.changes,
                "rules": [rule.to_dict() for rule in outcome.rules(len(configs))],
                "same_as": cand.same_as,
                "effective": cand.effective,
                "repairs": list(cand.repairs),
                "runs_warned": stats.runs_warned,
                "runs_blocked": stats.runs_blocked,
                "runs_stopped": stats.runs_stopped,
                "calls_prevented": stats.calls_prevented,
                "tokens": {
                    "recorded": recorded,
                    "prevented_turns": stats.prevented_tokens if recorded else None,
                    "after_stop": stats.saved_tokens if recorded else None,
                    "prevented_calls_without_usage": stats.prevented_without_usage,
                },
                "loops": {
                    "caught": stats.loops_caught,
                    "median_first_alarm": stats.median_first_alarm(),
                    "first_alarm": {str(k): v for k, v in sorted(stats.first_alarm.items())},
                },
                "blocked_outside_loops": stats.blocked_outside_loops,
                "false_blocks": stats.false_blocks if outcome.labelled else None,
                "false_warnings": stats.false_warnings if outcome.labelled else None,
                "bad_runs_caught": stats.bad_caught if outcome.labelled else None,
                "examples": stats.examples,
            }
        )
    rec = outcome.recommendation
    return {
        "schema": SCHEMA,
        "loopwarden_version": version,
        "corpus": {
            "runs": corpus.runs,
            "calls": corpus.calls,
            "loops": corpus.loops,
            "runs_with_loops": corpus.runs_with_loops,
            "min_loop": outcome.min_loop,
            "runs_with_usage": corpus.runs_with_usage,
            "tokens": corpus.tokens if corpus.runs_with_usage else None,
        },
        "labels": {
            "file": labels_file,
            "field": label_field,
            "good": corpus.good,
            "bad": corpus.bad,
            "unlabelled": corpus.unlabelled,
            "matched_from_file": outcome.labels_matched,
        },
        "configs": configs,
        "recommendation": {
            "config": outcome.candidates[rec.index].name if rec.index is not None else None,
            "basis": rec.basis,
            "zero_false_blocks": rec.zero_false_blocks,
            "text": rec.text,
            "baseline": outcome.candidates[rec.baseline].name if rec.baseline is not None else None,
            "keep_defaults": rec.index is None and rec.baseline is not None,
            "margin": rec.margin,
            "calls_needed": rec.needed,
            "config_block": outcome.candidates[rec.index].config_block()
            if rec.index is not None
            else None,
        },
        "inputs": outcome.inputs,
        "problems": [{"where": w, "reason": r} for w, r in outcome.problems],
        "problems_omitted": outcome.problem_count - len(outcome.problems),
    }
