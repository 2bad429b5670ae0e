"""The post-compaction guard (SPEC 5), from the upstream scenarios in reference 6.2 and 6.7."""

from __future__ import annotations

import builtins
import logging
from typing import Any

import pytest

import loopwarden as lw


def observe(
    guard: lw.PostCompactionGuard, tool: str, args: Any, result: str
) -> lw.CompactionVerdict:
    return guard.observe(tool, repr(args), result)


def info_messages(logs: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in logs.records if r.levelno == logging.INFO]


class TestPostCompactionGuard:
    def test_unarmed_never_aborts(self) -> None:
        """6.2.1."""
        guard = lw.PostCompactionGuard()
        verdict = observe(guard, "read", {}, "r")
        assert (verdict.should_abort, verdict.armed) == (False, False)

    def test_arm_opens_the_window(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """6.2.2 and the exact INFO line."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        assert (guard.armed, guard.remaining_attempts) == (True, 3)
        assert "post-compaction guard armed for 3 attempts" in info_messages(lw_logs)

    def test_attempts_count_down(self) -> None:
        """6.2.3 and 6.7.1."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        verdicts = [observe(guard, tool, {}, "r") for tool in ("read", "write", "exec")]
        assert [(v.should_abort, v.armed, v.remaining_attempts) for v in verdicts] == [
            (False, True, 2),
            (False, True, 1),
            (False, False, 0),
        ]
        assert not guard.armed

    def test_identical_triples_abort(self) -> None:
        """6.2.4 and 6.7.2."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        verdicts = [
            observe(guard, "gateway", {"action": "lookup", "path": "x"}, "r1") for _ in range(3)
        ]
        assert [v.should_abort for v in verdicts] == [False, False, True]
        last = verdicts[-1]
        assert (last.detector, last.count, last.tool_name) == (
            "compaction_loop_persisted",
            3,
            "gateway",
        )
        assert (last.armed, last.remaining_attempts) == (False, 0)
        assert last.message is not None and "gateway" in last.message and "3" in last.message

    def test_changing_results_or_args_never_abort(self) -> None:
        """6.2.5 and 6.2.6."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        assert not any(observe(guard, "gateway", {"a": 1}, f"r{i}").should_abort for i in range(3))
        guard.arm()
        assert not any(observe(guard, "gateway", {"a": i}, "r1").should_abort for i in range(3))

    def test_window_of_two(self) -> None:
        """6.2.7: the second identical observation aborts; after the window, nothing does."""
        guard = lw.PostCompactionGuard(window_size=2)
        guard.arm()
        first = observe(guard, "x", {}, "r1")
        second = observe(guard, "x", {}, "r1")
        assert not first.should_abort and second.should_abort and not second.armed
        third = observe(guard, "x", {}, "r1")
        assert not third.should_abort and not third.armed

    def test_rearm_resets(self) -> None:
        """6.2.8."""
        guard = lw.PostCompactionGuard(window_size=2)
        guard.arm()
        observe(guard, "x", {}, "a")
        observe(guard, "y", {}, "b")
        guard.arm()
        assert (guard.armed, guard.remaining_attempts) == (True, 2)
        guard.arm()
        observe(guard, "x", {}, "r")
        guard.arm()  # forgets the previous window's observation
        assert not observe(guard, "x", {}, "r").should_abort

    def test_disabled(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """6.2.9 and 6.7.7: nothing is armed, nothing aborts, nothing is logged."""
        guard = lw.PostCompactionGuard(window_size=3, enabled=False)
        guard.arm()
        assert not guard.armed
        verdicts = [observe(guard, "x", {}, "r") for _ in range(3)]
        assert all(
            (v.should_abort, v.armed, v.remaining_attempts) == (False, False, 0) for v in verdicts
        )
        assert lw_logs.records == []

    def test_window_summary(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """6.7.3 and 6.7.4: the closing summary counts repeats of pre-compaction calls."""
        guard = lw.PostCompactionGuard(window_size=3)
        observe(guard, "read", "/report.md", "v1")
        observe(guard, "exec", "ls", "out")
        guard.arm()
        observe(guard, "read", "/report.md", "v2")
        observe(guard, "read", "/other.md", "x")
        observe(guard, "gateway", "probe", "y")
        summary = [m for m in info_messages(lw_logs) if "window closed" in m]
        assert len(summary) == 1
        assert "3 calls, 1 repeated" in summary[0] and "(read)" in summary[0]
        guard.arm()
        for i in range(3):
            observe(guard, "fresh", i, "z")
        assert (
            "3 calls, 0 repeated" in [m for m in info_messages(lw_logs) if "window closed" in m][-1]
        )

    def test_baseline_keeps_the_last_sixteen_calls(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """6.7.5."""
        guard = lw.PostCompactionGuard(window_size=3)
        for i in range(20):
            observe(guard, "read", f"/old-{i}", "r")
        guard.arm()
        observe(guard, "read", "/old-0", "r2")
        observe(guard, "read", "/old-19", "r2")
        observe(guard, "read", "/new", "r2")
        assert (
            "3 calls, 1 repeated" in [m for m in info_messages(lw_logs) if "window closed" in m][-1]
        )

    def test_abort_logs_no_summary(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """6.7.6."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        for _ in range(3):
            observe(guard, "x", {}, "r")
        assert not [m for m in info_messages(lw_logs) if "window closed" in m]
        assert any(r.levelno == logging.ERROR for r in lw_logs.records)

    def test_state_round_trip(self) -> None:
        """A dumped guard loads into another with the same window and counts."""
        guard = lw.PostCompactionGuard(window_size=3)
        guard.arm()
        observe(guard, "x", {}, "r")
        copy = lw.PostCompactionGuard(window_size=3)
        copy.load(guard.dump())
        assert copy.remaining_attempts == 2
        observe(copy, "x", {}, "r")
        assert observe(copy, "x", {}, "r").should_abort


class TestExceptions:
    def test_compaction_loop_persisted(self) -> None:
        """6.2.11 and 6.2.12, in loopwarden's exception form."""
        exc = lw.CompactionLoopPersisted("loop persisted", tool_name="gateway", count=4)
        assert isinstance(exc, lw.LoopAbort) and isinstance(exc, lw.LoopwardenError)
        assert exc.code == exc.detector == "compaction_loop_persisted"
        assert (exc.tool_name, exc.count, str(exc)) == ("gateway", 4, "loop persisted")
        assert exc.to_dict()["code"] == "compaction_loop_persisted"

    def test_circuit_breaker_tripped(self) -> None:
        """CircuitBreakerTripped is a LoopAbort with its code and count."""
        exc = lw.CircuitBreakerTripped("stop", tool_name="read", count=30)
        assert isinstance(exc, lw.LoopAbort)
        assert exc.code == "global_circuit_breaker" and exc.count == 30

    def test_find_behind_wrappers(self) -> None:
        """LoopAbort.find sees through causes, contexts and exception groups."""
        stop = lw.CircuitBreakerTripped("stop", tool_name="t", count=30)
        try:
            try:
                raise stop
            except lw.LoopAbort as inner:
                raise RuntimeError("Error in plugin") from inner
        except RuntimeError as wrapped:
            assert lw.LoopAbort.find(wrapped) is stop
        exception_group = getattr(builtins, "ExceptionGroup", None)
        if exception_group is None:
            pytest.skip("exception groups need Python 3.11")
        group = exception_group("task group", [ValueError("other"), RuntimeError("wrapped")])
        group.exceptions[1].__cause__ = stop
        assert lw.LoopAbort.find(group) is stop
        assert lw.LoopAbort.find(ValueError("unrelated")) is None
        assert lw.LoopAbort.find(None) is None
