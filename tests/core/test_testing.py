"""The public test helpers of ``loopwarden.testing``."""

from __future__ import annotations

import logging
import textwrap

import pytest

import loopwarden as lw
from loopwarden import testing
from loopwarden.testing import SMALL_THRESHOLDS, FakeClock, ScriptedAgent, capture_events


class TestCaptureEvents:
    def test_captures_every_guard(self) -> None:
        """Events of guards built with or without sinks all arrive, in order."""
        own: list[lw.LoopEvent] = []
        with capture_events() as events:
            for guard in (lw.LoopGuard(SMALL_THRESHOLDS, on_event=own.append), lw.LoopGuard()):
                run = guard.run(tools=["read"])
                for i in range(4):
                    run.before_call("ghost", {"i": i}, call_id=str(i))
        assert [(e.action, e.detector) for e in events] == [("block", "unknown_tool_repeat")] * 1
        assert own == events

    def test_nothing_outside_the_block(self) -> None:
        """Only events emitted inside the ``with`` block are collected."""
        run = lw.LoopGuard(SMALL_THRESHOLDS).run()
        with capture_events() as events:
            pass
        for i in range(4):
            run.before_call("t", {}, call_id=str(i))
            run.after_call("t", {}, call_id=str(i), result="same")
        assert events == []

    def test_a_quiet_logger_is_lowered_and_restored(self) -> None:
        """Warnings are captured even when the application set the logger to ERROR."""
        logger = logging.getLogger("loopwarden")
        logger.setLevel(logging.ERROR)
        try:
            with capture_events() as events:
                run = lw.LoopGuard(SMALL_THRESHOLDS).run()
                for i in range(4):
                    run.before_call("t", {}, call_id=str(i))
                    run.after_call("t", {}, call_id=str(i), result="same")
            assert [e.action for e in events] == ["warn"]
            assert logger.level == logging.ERROR
        finally:
            logger.setLevel(logging.NOTSET)


class TestFakeClock:
    def test_moves_only_when_told(self) -> None:
        """The clock reads the same until advanced."""
        clock = FakeClock(50.0)
        assert (clock(), clock()) == (50.0, 50.0)
        assert clock.advance(2.5) == 52.5 == clock()


class TestScriptedAgent:
    def test_what_the_model_sees(self) -> None:
        """Results get the note appended, blocked calls are not run, missing tools fail."""
        agent = ScriptedAgent(lw.LoopGuard(SMALL_THRESHOLDS).run(), {"poll": lambda job: "pending"})
        seen = [agent.call("poll", {"job": 1}, f"c{i}") for i in range(6)]
        assert [s.blocked for s in seen] == [False] * 5 + [True]
        assert seen[3].warned and seen[3].text == f"pending\n\n{seen[3].note}"
        assert seen[0].result == "pending" and seen[5].result is None
        assert agent.executed == 5
        missing = agent.call("nope", {}, "m")
        assert missing.text == "Error: Unknown tool: nope"
        assert isinstance(missing.error, LookupError)

    def test_render_and_stop(self) -> None:
        """``render`` shapes the text; a stop propagates out of the agent."""
        agent = ScriptedAgent(
            lw.LoopGuard(SMALL_THRESHOLDS).run(), {"get": lambda: {"n": 1}}, render=repr
        )
        assert agent.call("get", {}, "c0").text == "{'n': 1}"
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(1, 10):
                agent.call("get", {}, f"c{i}")
        assert len(agent.seen) == 7


def test_small_thresholds() -> None:
    """The small config warns at 3, blocks at 5, stops at 7 and blocks a missing tool at 3."""
    cfg = lw.load_config(SMALL_THRESHOLDS).for_agent(None)
    assert (cfg.enabled, cfg.warning_threshold, cfg.critical_threshold) == (True, 3, 5)
    assert (cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold) == (7, 3)


def test_module_example_runs() -> None:
    """The usage example at the top of ``loopwarden.testing`` runs as written."""
    doc = testing.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\nNothing here", 1)[0]
    code = "import loopwarden as lw\n" + textwrap.dedent(block)
    exec(compile(code, "loopwarden/testing.py", "exec"), {})
