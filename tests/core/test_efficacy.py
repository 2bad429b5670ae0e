"""Issue 9 and issue 12 through the runtime guard: real loop shapes, waits, blocks that stop.

Each scenario is our own small version of a loop shape seen in real recorded
runs (the dev set's README): the guard is driven as an agent loop drives it, a
blocked call is not run, and a stop ends the scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwarden as lw
from loopwarden.config import LoopDetectionConfig
from loopwarden.config.model import Rules
from loopwarden.engine import ToolCallHistory
from loopwarden.engine.detectors import (
    ConsecutiveRepeatSettings,
    CycleSettings,
    FailureStreakSettings,
)
from loopwarden.errors import ConfigError
from loopwarden.profiles import OutcomeProfile, ProfileRegistry
from loopwarden.stores import Store
from loopwarden.stores.sqlite import SQLiteStore
from loopwarden.testing import FakeClock, capture_events
from tests.stores.conftest import all_stores

ON = {"tools": {"loopDetection": {"enabled": True}}}
OFF = {
    **ON,
    "loopwarden": {
        "volatileCounters": False,
        "consecutiveRepeat": False,
        "cycle": False,
        "failureStreak": False,
    },
}

Result = Callable[[int], Any]
"""The recorded outcome of the i-th call (0-based): a result, or an Exception to pass as error."""


def drive(
    run: lw.RunGuard,
    calls: list[tuple[str, Any, Any]],
    clock: FakeClock | None = None,
    took: float = 0.0,
) -> list[str]:
    """Each (tool, params, outcome) through before/after; the action per call, up to a stop.

    ``took``: seconds each call runs (the clock moves between before and after).
    """
    actions: list[str] = []
    for i, (tool, params, outcome) in enumerate(calls):
        try:
            decision = run.before_call(tool, params, call_id=f"c{i}")
        except lw.LoopAbort:
            actions.append("stop")
            break
        actions.append(decision.action)
        if decision.blocked:
            continue
        if clock is not None:
            clock.advance(took)
        if isinstance(outcome, Exception):
            run.after_call(tool, params, call_id=f"c{i}", error=outcome)
        else:
            run.after_call(tool, params, call_id=f"c{i}", result=outcome)
        if clock is not None:
            clock.advance(1.0)
    return actions


def first(actions: list[str], action: str) -> int | None:
    """The 1-based call number of the first ``action``."""
    return actions.index(action) + 1 if action in actions else None


def guard(config: Any = ON, **kw: Any) -> lw.LoopGuard:
    kw.setdefault("clock", FakeClock())
    return lw.LoopGuard(config, **kw)


class TestRealLoopShapes:
    """One scenario per loop shape of the dev set's README."""

    def test_same_failing_call_same_result(self) -> None:
        """find_file "X" again and again, "No matches found": blocked at 6, stopped at 8."""
        calls = [("find_file", {"name": "X"}, 'No matches found for "X" in /repo')] * 40
        actions = drive(guard().run(), calls)
        assert actions[:5] == ["allow"] * 4 + ["warn"]
        assert first(actions, "block") == 6
        assert actions[-1] == "stop" and len(actions) == 8

    def test_today_blocks_only_at_21(self) -> None:
        """The same loop with the extras off: OpenClaw's 10 / 20 / 30."""
        calls = [("find_file", {"name": "X"}, 'No matches found for "X" in /repo')] * 40
        actions = drive(guard(OFF).run(), calls)
        assert first(actions, "warn") == 11
        assert first(actions, "block") == 21
        assert len(actions) == 31 and actions[-1] == "stop"

    def test_shell_line_counter(self) -> None:
        """cd into a missing dir: bash's "line N:" grows every call, the loop is still seen."""
        calls = [
            (
                "bash",
                {"command": "cd fastjson/"},
                f"/bin/bash: line {18516 + i}: cd: fastjson/: No such file or directory",
            )
            for i in range(40)
        ]
        actions = drive(guard().run(), calls)
        # Counted from the 2nd call: the first outcome is hashed before there is a repeat.
        assert first(actions, "block") == 7
        assert actions[-1] == "stop" and len(actions) == 9
        # Without masking every outcome is new: no block from a repeat rule at all.
        unmasked = drive(guard({**ON, "loopwarden": {"volatileCounters": False}}).run(), calls)
        assert "block" not in unmasked and "stop" not in unmasked

    def test_reapplied_edit_grows_the_file(self) -> None:
        """The same edit re-applied: only "(N lines total)" changes in the result."""
        calls = [
            (
                "edit",
                {"range": "1:1", "text": "import os"},
                f"File updated. [File: /repo/a.py ({443 + i} lines total)]\n1:import os\n"
                f"({443 + i - 1} more lines below)",
            )
            for i in range(30)
        ]
        actions = drive(guard().run(), calls)
        assert first(actions, "block") == 7 and actions[-1] == "stop"

    def test_invalid_arguments_retried(self) -> None:
        """create without file_text, rejected the same way each time."""
        error = ValueError("Parameter `file_text` is required for command: create")
        calls = [("str_replace_editor", {"command": "create", "path": "/r/x.py"}, error)] * 30
        actions = drive(guard().run(), calls)
        assert first(actions, "block") == 6 and actions[-1] == "stop"

    def test_cycle_of_three(self) -> None:
        """open / search_file / search_dir going round with identical results."""
        cycle = [
            ("open", {"path": "Foo.java"}, "[File: Foo.java (120 lines total)]\n1:class Foo {}"),
            ("search_file", {"term": "bar"}, 'No matches found for "bar" in Foo.java'),
            ("search_dir", {"term": "bar"}, 'No matches found for "bar" in /repo'),
        ]
        events: list[lw.LoopEvent] = []
        g = guard(on_event=events.append)
        run = g.run()
        actions = drive(run, cycle * 11)
        # Warned at round 3, blocked at round 4 (call 12), stopped two blocks later.
        assert first(actions, "warn") == 9
        assert first(actions, "block") == 12
        assert actions[-1] == "stop" and len(actions) == 14
        block = next(e for e in events if e.action == "block")
        assert block.detector == "cycle"
        assert "open -> search_file -> search_dir" in block.message
        # Today's rules never act on it within 33 calls (no call reaches 20 in the window).
        today = drive(guard(OFF).run(), cycle * 11)
        assert "block" not in today and "stop" not in today

    def test_failure_streak_names_the_common_error(self) -> None:
        """One tool failing with varied arguments and the same error, 13th call blocked."""
        calls = [
            (
                "bash",
                {"command": f"python -c 'print({i}'"},
                RuntimeError(
                    f"/bin/bash: line {900 + i}: unexpected EOF while looking for matching `''"
                ),
            )
            for i in range(30)
        ]
        run = guard().run()
        actions: list[str] = []
        messages: list[str] = []
        for i, (tool, params, error) in enumerate(calls):
            try:
                decision = run.before_call(tool, params, call_id=f"c{i}")
            except lw.LoopAbort as abort:
                actions.append("stop")
                messages.append(abort.message)
                break
            actions.append(decision.action)
            messages.append(decision.message or "")
            if decision.allowed:
                run.after_call(tool, params, call_id=f"c{i}", error=error)
        assert first(actions, "warn") == 11
        assert first(actions, "block") == 13
        assert actions[-1] == "stop" and len(actions) == 15
        blocked = messages[12]
        assert "last 12 calls of bash all failed" in blocked
        assert "unexpected EOF while looking for matching" in blocked  # the common error
        assert "line #" in blocked  # quoted after masking

    def test_failure_streak_event_and_store_never_hold_the_error(self, tmp_path: Path) -> None:
        """Events and a persistent store get the streak without the error's text."""
        canary = "CANARY-9d1c"
        events: list[lw.LoopEvent] = []
        store = SQLiteStore(tmp_path / "lw.db")
        g = guard(store=store, on_event=events.append)
        run = g.run("r")
        calls = [("run_tests", {"k": i}, RuntimeError(f"{canary} exploded")) for i in range(20)]
        actions = drive(run, calls)
        assert first(actions, "block") == 13 and actions[-1] == "stop"
        assert events and all(canary not in e.message for e in events)
        block = next(e for e in events if e.action == "block")
        assert block.detector == "failure_streak" and "with the same error" in block.message
        g.close()
        data = (tmp_path / "lw.db").read_bytes()
        assert canary.encode() not in data

    def test_progress_that_looks_like_repetition(self) -> None:
        """python reproduce.py between edits, a different result each time: never blocked."""
        calls: list[tuple[str, Any, Any]] = []
        for i in range(12):
            calls.append(("bash", {"command": "python reproduce.py"}, f"{12 - i} tests failed"))
            calls.append(("edit", {"line": i, "text": f"fix {i}"}, f"edited line {i}"))
        actions = drive(guard().run(), calls)
        assert "block" not in actions and "stop" not in actions

    @pytest.mark.parametrize(
        ("outcome", "why"),
        [
            (lambda i: f"processed {i * 10} items", "a bare count"),
            (lambda i: f"{100 - i} passed, {i} failed in 0.5{i}s", "a test summary"),
            (lambda i: "\n".join(f"file{j}.py" for j in range(i + 1)), "a growing list"),
        ],
    )
    def test_progress_look_alikes_are_never_blocked(self, outcome: Result, why: str) -> None:
        """Counts, summaries and lists that change are progress, whatever the masking."""
        calls = [("run_batch", {"job": 1}, outcome(i)) for i in range(100)]
        actions = drive(guard().run(), calls)
        assert "block" not in actions and "stop" not in actions, why


class TestWaiting:
    """Waiting is not looping: 19 identical answers, then success, are never blocked early."""

    RUNNING = "status: running"

    def wait(self, tool: str, params: Any) -> list[tuple[str, Any, Any]]:
        return [(tool, params, self.RUNNING)] * 19 + [(tool, params, "status: success")]

    @pytest.mark.parametrize(
        ("tool", "params"),
        [
            ("command_status", {"id": "build-7"}),  # SPEC 4's known poll
            ("BashOutput", {"bash_id": "bash_3"}),  # Claude Code's poll (a profile)
            ("process", {"action": "poll", "sessionId": "s1"}),
            ("get_deploy_status", {"deploy": 42}),  # a tool named as a status check
        ],
    )
    def test_polls_keep_openclaw_thresholds(self, tool: str, params: Any) -> None:
        actions = drive(guard().run(), self.wait(tool, params))
        assert "block" not in actions and "stop" not in actions
        assert len(actions) == 20

    def test_a_shell_command_that_sleeps(self) -> None:
        """sleep 30 && gh run view: the agent waits on purpose."""
        params = {"command": "sleep 30 && gh run view 4242 --json status"}
        actions = drive(guard().run(), self.wait("bash", params))
        assert "block" not in actions and len(actions) == 20

    def test_a_call_that_takes_long(self) -> None:
        """A tool that blocks 30 s per call (the clock says so) is waiting, not spinning."""
        clock = FakeClock()
        run = guard(clock=clock).run()
        actions = drive(run, self.wait("ci_run", {"id": 42}), clock=clock, took=30.0)
        assert "block" not in actions and len(actions) == 20

    def test_a_fast_spin_of_the_same_tool_is_blocked(self) -> None:
        """The same calls without any sign of waiting are a spin: blocked at 6."""
        clock = FakeClock()
        run = guard(clock=clock).run()
        actions = drive(run, self.wait("ci_run", {"id": 42}), clock=clock, took=0.2)
        assert first(actions, "block") == 6

    def test_wait_threshold_is_configurable(self) -> None:
        clock = FakeClock()
        run = guard({**ON, "loopwarden": {"waitSeconds": 60}}, clock=clock).run()
        actions = drive(run, self.wait("ci_run", {"id": 42}), clock=clock, took=30.0)
        assert first(actions, "block") == 6

    def test_openclaw_still_blocks_a_stuck_poll_at_21(self) -> None:
        """A wait that never ends meets OpenClaw's thresholds: block at 21."""
        calls = [("command_status", {"id": "build-7"}, self.RUNNING)] * 40
        actions = drive(guard().run(), calls)
        assert first(actions, "block") == 21

    @pytest.mark.parametrize("tool", ["command_status", "fetch_log", "bash"])
    def test_a_progressing_poll_is_never_blocked(self, tool: str) -> None:
        """100 calls in a row whose status or log changes every time."""
        calls = [(tool, {"id": 1}, f"step {i} of 400: compiling module_{i}.c") for i in range(100)]
        actions = drive(guard().run(), calls)
        assert actions.count("block") == 0 and "stop" not in actions and len(actions) == 100


class TestBlocksStopTheRun:
    """Issue 12: a run whose calls keep being blocked reaches a stop whatever the detector."""

    def turns(self, n: int) -> list[tuple[str, Any, Any]]:
        """Two calls of one tool made together each turn, unchanged results."""
        calls: list[tuple[str, Any, Any]] = []
        for _ in range(n):
            calls.append(("poll_status", {"job": "a"}, "a: queued"))
            calls.append(("poll_status", {"job": "b"}, "b: queued"))
        return calls

    @pytest.mark.parametrize("config", [ON, OFF], ids=["defaults", "extras off"])
    def test_a_blocked_ping_pong_is_stopped(self, config: Any) -> None:
        events: list[lw.LoopEvent] = []
        run = guard(config, on_event=events.append).run()
        actions = drive(run, self.turns(200))
        assert actions[-1] == "stop"
        blocks = actions.count("block")
        assert 1 <= blocks <= 10  # ten blocks in a row at most, then the stop
        stop = events[-1]
        assert stop.action == "stop"

    def test_extras_off_stop_after_ten_blocks(self) -> None:
        """OpenClaw's escalation: ping-pong blocks from call 20, the 11th block stops."""
        events: list[lw.LoopEvent] = []
        run = guard(OFF, on_event=events.append).run()
        actions = drive(run, self.turns(200))
        assert first(actions, "block") == 20
        assert actions.count("block") == 10 and len(actions) == 30
        stop = events[-1]
        assert stop.detector == "blocks_in_a_row"
        assert "10 calls in a row were blocked (ping pong" in stop.message

    def test_two_calls_of_one_tool_are_worded_as_such(self) -> None:
        events: list[lw.LoopEvent] = []
        run = guard(OFF, on_event=events.append).run()
        drive(run, self.turns(200))
        warn = next(e for e in events if e.action == "warn")
        assert "between poll_status and poll_status" not in warn.message
        assert "same two poll_status calls" in warn.message


class TestConfig:
    def test_keys_and_switches(self) -> None:
        cfg = lw.load_config(
            {
                **ON,
                "loopwarden": {
                    "consecutiveRepeat": {"warnAt": 4, "blockAt": 5, "stopAt": 9},
                    "cycle": False,
                    "failureStreak": {"enabled": False},
                    "waitSeconds": 5,
                },
            }
        )
        rules = cfg.settings.rules
        repeat = rules.get(ConsecutiveRepeatSettings)
        assert (repeat.warn_at, repeat.stop_at) == (4, 9)
        assert not rules.get(CycleSettings).enabled
        assert not rules.get(FailureStreakSettings).enabled
        assert rules.wait_seconds == 5.0
        assert cfg.settings.volatile_counters is True

    @pytest.mark.parametrize(
        ("block", "path"),
        [
            ({"consecutiveRepeat": {"warnAt": 0}}, "loopwarden.consecutiveRepeat.warnAt"),
            ({"consecutiveRepeat": {"blokAt": 3}}, "loopwarden.consecutiveRepeat.blokAt"),
            (
                {"consecutiveRepeat": {"warnAt": 7, "blockAt": 6}},
                "loopwarden.consecutiveRepeat.blockAt",
            ),
            ({"cycle": {"maxPeriod": 9}}, "loopwarden.cycle.maxPeriod"),
            ({"failureStreak": "yes"}, "loopwarden.failureStreak"),
            ({"waitSeconds": -1}, "loopwarden.waitSeconds"),
            ({"volatileCounters": "on"}, "loopwarden.volatileCounters"),
            (
                {"outcomeProfiles": {"x": {"volatileCounters": 1}}},
                "loopwarden.outcomeProfiles.x.volatileCounters",
            ),
        ],
    )
    def test_errors_name_the_path(self, block: Any, path: str) -> None:
        with pytest.raises(ConfigError) as caught:
            lw.load_config({**ON, "loopwarden": block})
        assert path in str(caught.value)

    def test_each_rule_switches_off(self) -> None:
        calls = [("find_file", {"name": "X"}, "No matches found")] * 25
        run = guard({**ON, "loopwarden": {"consecutiveRepeat": False}}).run()
        assert first(drive(run, calls), "block") == 21

    def test_masking_off_per_tool(self) -> None:
        config = {**ON, "loopwarden": {"outcomeProfiles": {"bash": {"volatileCounters": False}}}}
        calls = [
            ("bash", {"command": "cd x"}, f"/bin/bash: line {i}: cd: x: missing") for i in range(30)
        ]
        assert "block" not in drive(guard(config).run(), calls)

    def test_masking_extended_per_tool(self) -> None:
        """A tool's own volatile pattern joins the built-in profile."""
        config = {
            **ON,
            "loopwarden": {"outcomeProfiles": {"build": {"volatilePatterns": [r"build #\d+"]}}},
        }
        calls = [("build", {"t": "all"}, f"build #{i}: failed, see log") for i in range(30)]
        assert first(drive(guard(config).run(), calls), "block") == 6

    def test_engine_objects_keep_openclaw_semantics(self) -> None:
        """A bare tools.loopDetection block: no extras, no masking in ToolCallHistory."""
        cfg = LoopDetectionConfig.from_dict({"enabled": True})
        assert cfg.rules is None
        hist = ToolCallHistory(cfg)
        for i in range(8):
            hist.record_call("find_file", {"name": "X"}, call_id=f"c{i}")
            hist.record_outcome("find_file", {"name": "X"}, call_id=f"c{i}", result="none")
        assert hist.detect("find_file", {"name": "X"}) is None

    def test_engine_objects_switch_extras_on(self) -> None:
        cfg = LoopDetectionConfig(enabled=True, rules=Rules())
        hist = ToolCallHistory(cfg, profiles=ProfileRegistry.create(volatile=True))
        for i in range(5):
            hist.record_call("bash", {"c": "cd x"}, call_id=f"c{i}")
            hist.record_outcome(
                "bash",
                {"c": "cd x"},
                call_id=f"c{i}",
                result=f"/bin/bash: line {i + 10}: cd: x: no",
            )
        det = hist.detect("bash", {"c": "cd x"})
        assert det is not None and det.detector == "consecutive_repeat" and det.critical

    def test_python_profile_turns_masking_off(self) -> None:
        registry = ProfileRegistry.create(
            {"bash": OutcomeProfile.build(volatile_counters=False)}, volatile=True
        )
        assert registry.masker_for("bash") is None
        assert registry.masker_for("other") is not None


class TestStores:
    @all_stores
    def test_every_store_keeps_the_extra_detectors(self, store: Store, clock: FakeClock) -> None:
        """Every backend (a transaction run twice included) gives memory's decisions:
        a counter loop, a cycle and a failure streak, with the blocks-in-a-row count."""
        loop = [
            ("bash", {"command": "cd x"}, f"/bin/bash: line {i}: cd: x: No such file or dir")
            for i in range(12)
        ]
        cycle = [("a", {}, "same a"), ("b", {}, "same b"), ("c", {}, "same c")] * 6
        fails = [("run", {"i": i}, RuntimeError("boom")) for i in range(20)]
        for calls in (loop, cycle, fails):
            expected = drive(guard(clock=FakeClock()).run("r"), calls)
            g = lw.LoopGuard(ON, store=store, clock=clock)
            run = g.run(f"r{len(calls)}")
            assert drive(run, calls) == expected
            assert expected[-1] == "stop"

    def test_extras_state_persists_in_sqlite(self, tmp_path: Path) -> None:
        """A persistent store gives the same decisions as memory (state round-trips)."""
        calls = [
            ("bash", {"command": "cd x"}, f"/bin/bash: line {i}: cd: x: No such file or dir")
            for i in range(20)
        ]
        memory = drive(guard().run("r"), calls)
        g = guard(store=SQLiteStore(tmp_path / "lw.db"))
        try:
            assert drive(g.run("r"), calls) == memory
        finally:
            g.close()


# -- properties ------------------------------------------------------------------------------

tools = st.sampled_from(["read", "grep", "edit", "bash", "list"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(tools, st.integers(0, 3)), min_size=1, max_size=80))
def test_progressing_outcomes_never_block(calls: list[tuple[str, int]]) -> None:
    """Whatever the calls, when every outcome is new (a count that moves) nothing blocks."""
    script = [
        (tool, {"arg": arg}, f"done: {i} items processed") for i, (tool, arg) in enumerate(calls)
    ]
    actions = drive(guard().run(), script)
    assert "block" not in actions and "stop" not in actions


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60, unique=True))
def test_all_distinct_histories_never_fire(args: list[int]) -> None:
    """Every call different from every other: no rule fires, old or new."""
    script = [("read", {"n": n}, "the same text each time") for n in args]
    assert set(drive(guard().run(), script)) == {"allow"}


def test_blocks_of_a_call_that_never_failed_are_no_failure_streak() -> None:
    """A call blocked for repeating a plain result did not fail: its blocks must not add up
    to a failure streak (they once did, and stopped the run as 'all failed')."""
    guard = lw.LoopGuard(
        {
            "tools": {
                "loopDetection": {
                    "enabled": True,
                    "warningThreshold": 2,
                    "criticalThreshold": 3,
                    "globalCircuitBreakerThreshold": 400,
                }
            },
            "loopwarden": {"consecutiveRepeat": False},
        }
    )
    run = guard.run("r")
    actions = []
    with capture_events() as events:
        for i in range(40):
            decision = run.before_call("summarise", {"doc": "same"}, call_id=str(i))
            actions.append(decision.action)
            if not decision.blocked:
                run.after_call("summarise", {"doc": "same"}, call_id=str(i), result="too long")
    assert actions[3:] == ["block"] * 37
    assert events and {e.detector for e in events} == {"generic_repeat"}
