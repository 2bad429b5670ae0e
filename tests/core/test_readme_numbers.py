"""Every number the README's rule table and walkthrough state is what a run of the guard
shows: each row is a scenario run through a real LoopGuard, as an integration drives it
(blocked calls are not run, a stop ends the run), and the call numbers in the row are
compared with the calls at which the guard warned, blocked and stopped. Moving a default
threshold without the README fails here."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.engine.detectors import plan_for

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

Step = tuple[str, dict[str, Any], Any, BaseException | None]
OWN_OFF = {
    "consecutiveRepeat": {"enabled": False},
    "cycle": {"enabled": False},
    "failureStreak": {"enabled": False},
}
"""loopwarden's own pattern rules off: OpenClaw's rules alone (what rows 1-5 describe)."""


def _same(tool: str, params: dict[str, Any], result: str) -> Callable[[], Iterator[Step]]:
    def calls() -> Iterator[Step]:
        while True:
            yield (tool, params, result, None)

    return calls


def _round(*steps: tuple[str, dict[str, Any], str]) -> Callable[[], Iterator[Step]]:
    def calls() -> Iterator[Step]:
        for tool, params, result in itertools.cycle(steps):
            yield (tool, params, result, None)

    return calls


def _new_args(tool: str, error: str) -> Callable[[], Iterator[Step]]:
    def calls() -> Iterator[Step]:
        for i in itertools.count(1):
            yield (tool, {"arg": i}, None, RuntimeError(error))

    return calls


@dataclass(frozen=True)
class Scenario:
    rule: str
    """The row's stop code / detector."""
    calls: Callable[[], Iterator[Step]]
    own: dict[str, Any] | None = None
    """The ``loopwarden`` block (``None``: the defaults)."""
    block: dict[str, Any] | None = None
    """Extra ``tools.loopDetection`` keys."""
    tools: tuple[str, ...] | None = None
    compact_first: bool = False


SCENARIOS: dict[str, Scenario] = {
    "generic repeat": Scenario(
        "generic_repeat", _same("read_file", {"path": "a.txt"}, "same text"), own=OWN_OFF
    ),
    "polling without progress": Scenario(
        "known_poll_no_progress",
        _same("process", {"action": "poll", "sessionId": "s1"}, "still running"),
    ),
    "ping-pong": Scenario(
        "ping_pong",
        _round(("list_dir", {"path": "."}, "a.txt b.txt"), ("read_file", {"p": "a"}, "same")),
        own=OWN_OFF,
    ),
    "unknown tool": Scenario(
        "unknown_tool_repeat",
        _new_args("web_search", "Unknown tool: web_search"),
        own=OWN_OFF,
        tools=("read_file",),
    ),
    "global circuit breaker": Scenario(
        "global_circuit_breaker", _same("read_file", {"path": "a.txt"}, "same text"), own=OWN_OFF
    ),
    "post-compaction loop": Scenario(
        "compaction_loop_persisted",
        _same("read_file", {"path": "a.txt"}, "same text"),
        compact_first=True,
    ),
    "consecutive repeat": Scenario(
        "consecutive_repeat", _same("find_file", {"name": "X"}, "No matches found")
    ),
    "cycle": Scenario(
        "cycle",
        _round(
            ("open", {"path": "a.py"}, "[file a.py]"),
            ("search_file", {"term": "foo"}, "No matches"),
            ("search_dir", {"term": "foo"}, "No matches in ."),
        ),
    ),
    "failure streak": Scenario("failure_streak", _new_args("run_tests", "exit code 1")),
    "blocks in a row": Scenario(
        "blocks_in_a_row",
        _round(("list_dir", {"path": "."}, "a.txt b.txt"), ("read_file", {"p": "a"}, "same")),
        own=OWN_OFF,
    ),
}


def run(scenario: Scenario, limit: int = 200) -> dict[str, tuple[int, str]]:
    """The first warn, block and stop of the scenario's run: call number and rule."""
    raw: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True, **(scenario.block or {})}}}
    if scenario.own is not None:
        raw["loopwarden"] = scenario.own
    guard = lw.LoopGuard(raw)
    first: dict[str, tuple[int, str]] = {}
    with guard.run(tools=scenario.tools) as run:
        if scenario.compact_first:
            run.on_compaction()
        try:
            for n, (tool, params, result, error) in enumerate(
                itertools.islice(scenario.calls(), limit), 1
            ):
                decision = run.before_call(tool, params, call_id=str(n))
                if decision.detection is not None and decision.action != "allow":
                    first.setdefault(decision.action, (n, decision.detection.detector))
                if decision.blocked:
                    continue
                if error is not None:
                    run.after_call(tool, params, call_id=str(n), error=error)
                else:
                    run.after_call(tool, params, call_id=str(n), result=result)
        except lw.LoopAbort as stop:
            first["stop"] = (n, stop.code)
    return first


def _table() -> list[list[str]]:
    """The rows of the README's first table ("What it catches"), as cells."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## What it catches") :]
    body = section.splitlines()[2:]
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), body))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert rows[0] == ["pattern (code)", "example", "warns", "blocks", "stops the run", "set by"]
    return rows[2:]


_CALL = re.compile(r"^call (\d+)")
_CODE = re.compile(r"\(`(\w+)`\)")


def test_the_table_has_a_row_for_every_rule() -> None:
    """One row per registered rule, in precedence order of the code the row names."""
    from loopwarden.engine.detectors import rules

    found = [_CODE.search(row[0]) for row in _table()]
    codes = [m.group(1) for m in found if m is not None]
    assert len(codes) == len(_table())
    assert sorted(codes) == sorted(cls.name for cls in rules())
    assert [row[0].split(" (")[0] for row in _table()] == list(SCENARIOS)


@pytest.mark.parametrize("row", _table(), ids=lambda row: row[0].split(" (")[0])
def test_each_row_is_what_the_guard_does(row: list[str]) -> None:
    """The row's warn / block / stop calls are the calls at which a real guard acts on the
    row's example (the rule the row names, unless the cell names another); a dash means the
    row's rule never does that."""
    name, _, warns, blocks, stops, keys = row
    scenario = SCENARIOS[name.split(" (")[0]]
    code = _CODE.search(name)
    assert code is not None and code.group(1) == scenario.rule
    measured = run(scenario)
    for action, cell in (("warn", warns), ("block", blocks), ("stop", stops)):
        found = measured.get(action)
        if cell == "—":
            assert found is None or found[1] != scenario.rule, (action, found)
            continue
        number = _CALL.match(cell)
        assert number is not None, cell
        other = _CODE.search(cell)
        assert found == (int(number.group(1)), other.group(1) if other else scenario.rule), (
            action,
            cell,
        )
    # The keys the row names are the ones that set the rule's numbers.
    cfg = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}).config_for()
    (det,) = [d for d in plan_for(cfg).detectors if d.name == scenario.rule]
    prefix = ""
    for key in [k for t in det.thresholds() for k in t.key.split(", ")]:
        short = key.removeprefix("tools.loopDetection.")
        if short.startswith("loopwarden."):
            prefix = short.rsplit(".", 1)[0]
            assert f"`{short}`" in keys or (
                f"`.{short.rsplit('.', 1)[1]}`" in keys and f"`{prefix}." in keys
            ), (short, keys)
        else:
            assert f"`{short}`" in keys, (short, keys)


def test_the_blocks_in_a_row_numbers() -> None:
    """ "the 11th blocked call in a row" and "(10)" of the escalation paragraph: the ping-pong
    is blocked from call 20 on and stopped at call 30."""
    measured = run(SCENARIOS["blocks in a row"])
    assert measured["block"] == (20, "ping_pong")
    assert measured["stop"] == (30, "blocks_in_a_row")
    assert measured["stop"][0] - measured["block"][0] + 1 == 11
    cfg = lw.LoopDetectionConfig()
    assert cfg.global_circuit_breaker_threshold - cfg.critical_threshold == 10
    text = re.sub(r"\s+", " ", README.read_text(encoding="utf-8"))
    assert "`globalCircuitBreakerThreshold \u2212 criticalThreshold` (10) calls in a row" in text


def test_with_the_defaults_loopwardens_rules_act_first() -> None:
    """The sentence under the table: an identical loop is blocked at call 6 by consecutive
    repeat, a ping-pong at call 8 by the cycle rule."""
    text = re.sub(r"\s+", " ", README.read_text(encoding="utf-8"))
    assert (
        "an identical loop is blocked at call 6 by consecutive repeat, a ping-pong at call 8 "
        "by the cycle rule" in text
    )
    identical = dataclasses.replace(SCENARIOS["generic repeat"], own=None)
    ping_pong = dataclasses.replace(SCENARIOS["ping-pong"], own=None)
    assert run(identical)["block"] == (6, "consecutive_repeat")
    assert run(ping_pong)["block"] == (8, "cycle")
    assert "`waitSeconds` (10 s)" in text
    assert lw.LoopGuard(None).config.settings.rules.wait_seconds == 10


def test_the_walkthrough_is_what_a_run_shows() -> None:
    """The README's poll_job walkthrough, call by call: calls 1-10 plain, the warning with
    call 11 (and no other before the block), calls 21-30 blocked with the quoted text, the
    circuit breaker at call 31; and a tool that is no poll is blocked at its 6th call."""
    text = README.read_text(encoding="utf-8")
    walk = text[text.index("What the model sees with the defaults") :]
    walk = re.sub(r"\s+", " ", walk[: walk.index("### The API in brief")])
    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    seen: list[tuple[str, str]] = []
    with guard.run() as run_:
        try:
            for n in range(1, 60):
                decision = run_.before_call("poll_job", {"job": "42"}, call_id=str(n))
                if decision.blocked:
                    seen.append(("blocked", decision.message or ""))
                    continue
                note = run_.after_call("poll_job", {"job": "42"}, call_id=str(n), result="pending")
                seen.append(("note", note) if note else ("plain", ""))
        except lw.CircuitBreakerTripped as stop:
            stopped_at, code = len(seen) + 1, stop.code
    plain = [n for n, (kind, _) in enumerate(seen, 1) if kind == "plain"]
    noted = [n for n, (kind, _) in enumerate(seen, 1) if kind == "note"]
    blocked = [n for n, (kind, _) in enumerate(seen, 1) if kind == "blocked"]
    assert plain[:10] == list(range(1, 11)) and noted == [11]
    assert blocked == list(range(21, 31))
    assert (stopped_at, code) == (31, "global_circuit_breaker")
    assert "calls 1\u201310: `pending`" in walk
    assert f'call 11: `pending` followed by *"{seen[10][1]}"*' in walk
    assert f'calls 21\u201330: not executed; the result is *"{seen[20][1]}"*' in walk
    assert "call 31: `CircuitBreakerTripped` (code `global_circuit_breaker`) ends the run" in walk
    assert "blocked at its 6th call in a row" in walk
    other = run(dataclasses.replace(SCENARIOS["generic repeat"], own=None))
    assert other["block"] == (6, "consecutive_repeat")


def test_the_configuration_page_gives_each_own_rules_real_defaults() -> None:
    """docs/configuration.md's row of each of loopwarden's own rules gives the defaults the
    guard runs with (each section's settings, and the numbers its rule acts at)."""
    from loopwarden.config.model import RULE_SETTINGS

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    cfg = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}).config_for()
    plan = plan_for(cfg)
    for key, cls in RULE_SETTINGS.items():
        (row,) = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
        numbers = {k: v for k, v in cls().to_dict().items() if k != "enabled" and v is not None}
        for name, value in numbers.items():
            assert f"{name}: {value}" in row, (key, name, row)
        rule = next(d for d in plan.detectors if d.settings is cls)
        assert rule.thresholds(), key
    blocks = next(d for d in plan.detectors if d.name == "blocks_in_a_row")
    (stop,) = blocks.thresholds()
    assert stop.key == "loopwarden.blocksInARow.stopAfter" and stop.at == 11
    (row,) = [line for line in page.splitlines() if line.startswith("| `blocksInARow` |")]
    assert "(10)" in row and "the 11th blocked call in a row" in row
    assert run(SCENARIOS["blocks in a row"])["stop"] == (30, "blocks_in_a_row")
