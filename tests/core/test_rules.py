"""loopwarden's own rules (consecutive repeats, cycles, failure streaks), driven through the
engine's one feed path: ``runtime.before`` before each call and ``runtime.after`` after it,
exactly as the runtime guard drives them."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.config import DetectorsConfig, LoopDetectionConfig
from loopwarden.config.model import Rules
from loopwarden.engine.detectors import (
    CONSECUTIVE_REPEAT,
    CYCLE,
    FAILURE_STREAK,
    Call,
    ConsecutiveRepeatSettings,
    Detection,
)
from loopwarden.engine.runtime import Done, after, before, decide
from loopwarden.engine.state import RunState
from loopwarden.hashing import Outcome, is_wait_command
from loopwarden.profiles import DEFAULT_REGISTRY

REPEAT = CONSECUTIVE_REPEAT


@dataclass(frozen=True)
class Step:
    """One call as a test scripts it: its tool, args, outcome, and how it behaved."""

    tool: str
    sig: str
    outcome: str | None
    error: str | None = None
    command: str | None = None
    """The shell command it ran (a command that sleeps is a wait)."""
    seconds: float = 0.1
    poll: bool = False


def step(
    tool: str,
    args: str = "",
    outcome: str | None = "ok",
    *,
    error: str | None = None,
    waiting: bool = False,
    seconds: float = 0.1,
    poll: bool = False,
) -> Step:
    command = f"sleep 30; {args}" if waiting else None
    return Step(tool, f"{tool}:{args}", outcome, error, command, seconds, poll)


def config(rules: Rules | None = None) -> LoopDetectionConfig:
    """Detection on, loopwarden's rules on; OpenClaw's switchable rules off, so that only
    the rules under test (and the unknown-tool rule and the breaker at 30) speak."""
    return LoopDetectionConfig(
        enabled=True,
        detectors=DetectorsConfig(False, False, False),
        rules=rules if rules is not None else Rules(),
    )


class Engine:
    """One run's state, driven call by call through ``before`` and ``after``."""

    def __init__(self, rules: Rules | None = None) -> None:
        self.state = RunState.new(config(rules))
        self.now = 1000.0
        self.calls = 0

    def call(self, s: Step) -> Detection | None:
        """The finding before the call, then the call itself (a blocked one is not run)."""
        self.calls += 1
        key = f"c{self.calls}"
        call = Call(s.tool, s.sig, s.poll, key, key)
        stopped = self.state.stopped
        if stopped is not None:  # the run is over: every call is refused with its stop
            before(self.state, call, self.now)
            return Detection(
                "critical", stopped.code, stopped.count, stopped.message, "", stop=True
            )
        found = decide(self.state, call)
        decided = before(self.state, call, self.now)
        if not decided.decision.blocked and decided.stop is None:
            self.now += s.seconds
            params = None if s.command is None else {"command": s.command}
            error = s.error if s.error is not None else None
            outcome = Outcome(
                None if s.outcome is None else f"h:{s.outcome}", None, s.error is not None
            )
            done = Done(
                s.tool, s.sig, key, key, outcome, True, params, s.outcome, error,
                DEFAULT_REGISTRY, None,
            )  # fmt: skip
            after(self.state, done, self.now)
        self.now += 1.0
        return found

    def check(self, tool: str, sig: str) -> Detection | None:
        return decide(self.state, Call(tool, sig, False, "next", "next"))


def drive(engine: Engine, steps: list[Step]) -> list[Detection | None]:
    return [engine.call(s) for s in steps]


def levels(found: list[Detection | None]) -> list[str]:
    return ["-" if f is None else ("stop" if f.stop else f.level) for f in found]


class TestConsecutiveRepeat:
    def test_escalates_warn_block_stop(self) -> None:
        """Identical call and outcome: warn at the 5th call, block at the 6th, stop at the 8th."""
        found = drive(Engine(), [step("bash", "cd x", "no such dir")] * 9)
        assert levels(found) == [
            "-",
            "-",
            "-",
            "-",
            "warning",
            "critical",
            "critical",
            "stop",
            "stop",
        ]
        assert found[5] is not None and found[5].detector == REPEAT and found[5].count == 6
        assert "bash" in found[5].message and "6 times in a row" in found[5].message

    def test_changing_outcome_restarts_the_count(self) -> None:
        """A new outcome is progress: the streak starts again from it."""
        steps = [step("fetch", "job", "running")] * 4 + [step("fetch", "job", "done")] * 4
        # The 5th call is checked before its new answer is known; after it, counting restarts.
        assert levels(drive(Engine(), steps)) == ["-"] * 4 + ["warning"] + ["-"] * 3

    def test_other_call_between_breaks_it(self) -> None:
        """Another call in between means the calls are not consecutive."""
        steps = [step("bash", "make"), step("bash", "make"), step("read", "log")] * 4
        det = Engine()
        assert all(f is None or f.detector != REPEAT for f in drive(det, steps))

    def test_call_without_outcome_is_neutral(self) -> None:
        """A call that left no outcome neither extends nor resets the streak."""
        steps = [step("bash", "x", "same")] * 3 + [step("bash", "x", None)] + [step("bash", "x")]
        det = Engine()
        drive(det, steps[:4])
        finding = det.check("bash", "bash:x")
        assert finding is None  # 3 identical outcomes: the 5th call warns, this is the 4th counted
        det.call(step("bash", "x", "same"))
        finding = det.check("bash", "bash:x")
        assert finding is not None and finding.level == "warning"

    def test_waiting_is_not_looping(self) -> None:
        """Calls that sleep or take long are left to OpenClaw's thresholds."""
        steps = [step("bash", "sleep 30; gh run view", "in_progress", waiting=True)] * 19
        assert levels(drive(Engine(), steps)) == ["-"] * 19

    def test_slow_calls_are_waits(self) -> None:
        """A call that took at least ``wait_seconds`` counts as a wait."""
        slow = drive(Engine(), [step("ci_run", "42", "running", seconds=30.0)] * 19)
        assert levels(slow) == ["-"] * 19
        fast = drive(Engine(), [step("ci_run", "42", "running", seconds=0.2)] * 6)
        assert levels(fast)[5] == "critical"

    def test_sleep_in_the_command_is_a_wait(self) -> None:
        """The command of a repeated call is read for sleep/watch/wait."""
        steps = [step("bash", "gh pr checks 7", "pending", waiting=True)] * 19
        assert levels(drive(Engine(), steps)) == ["-"] * 19

    def test_known_poll_is_left_to_openclaw(self) -> None:
        """A known poll call never triggers the consecutive-repeat rule."""
        steps = [step("process", "poll", "running", poll=True)] * 19
        assert levels(drive(Engine(), steps)) == ["-"] * 19

    @given(st.integers(2, 120))
    @settings(max_examples=50, deadline=None)
    def test_progressing_outcomes_never_block(self, n: int) -> None:
        """A poll whose answer changes every call is never blocked, however long."""
        steps = [step("status", "job", f"progress {i}") for i in range(n)]
        assert all(f is None or not f.critical for f in drive(Engine(), steps))


class TestCycle:
    def test_period_two(self) -> None:
        """A,B,A,B... with unchanged results: warn at call 6, block at 8, stop at 10."""
        steps = [step("open", "a", "A"), step("bash", "b", "B")] * 6
        found = drive(Engine(), steps)
        assert (
            levels(found)
            == ["-"] * 5 + ["warning", "warning", "critical", "critical"] + ["stop"] * 3
        )
        f = found[7]
        assert f is not None and f.detector == CYCLE and f.count == 8
        assert f.tools == ("open", "bash") and "open -> bash" in f.message

    def test_period_three_names_the_calls(self) -> None:
        """A cycle of three calls is named in call order and blocked at its 4th round."""
        steps = [
            step("open", "f", "F"),
            step("search_file", "x", "none"),
            step("search_dir", "x", "none"),
        ]
        found = drive(Engine(), steps * 5)
        first_block = next(i for i, f in enumerate(found) if f is not None and f.critical)
        assert first_block + 1 == 12
        f = found[first_block]
        assert f is not None and f.tools == ("open", "search_file", "search_dir")

    def test_warning_key_ignores_where_the_cycle_starts(self) -> None:
        """The same cycle gets the same key whichever call is checked."""
        steps = [step("a", "1", "x"), step("b", "2", "y")] * 4
        found = [f for f in drive(Engine(), steps) if f is not None]
        assert len({f.warning_key for f in found}) == 1

    def test_a_position_that_progresses_keeps_it_quiet(self) -> None:
        """When one position's result changes each round, the cycle is making progress."""
        steps = []
        for i in range(12):
            steps += [step("edit", "f", "edited"), step("test", "run", f"{i} failures")]
        assert all(f is None or f.detector != CYCLE for f in drive(Engine(), steps))

    def test_cycle_with_a_wait_is_quiet(self) -> None:
        """status, sleep, status, sleep... is waiting, not a spin."""
        steps = [step("status", "ci", "pending"), step("bash", "sleep 30", "", waiting=True)] * 12
        assert levels(drive(Engine(), steps)) == ["-"] * 24

    def test_one_call_repeated_is_not_a_cycle(self) -> None:
        """A,A,A... belongs to the consecutive-repeat rule, not to the cycle rule."""
        found = drive(Engine(), [step("x", "1", "same")] * 12)
        assert all(f is None or f.detector == REPEAT for f in found)


class TestFailureStreak:
    def failing(self, n: int, error: str = "unexpected EOF") -> list[Step]:
        return [step("bash", f"cmd {i}", f"err{i}", error=error) for i in range(n)]

    def test_escalates_and_names_the_common_error(self) -> None:
        """Warn after 10 failures, block after 12 (naming the shared error), stop after 14."""
        found = drive(Engine(), self.failing(16))
        assert levels(found)[9:16] == [
            "-",
            "warning",
            "warning",
            "critical",
            "critical",
            "stop",
            "stop",
        ]
        f = found[12]
        assert f is not None and f.detector == FAILURE_STREAK and f.count == 12
        assert 'same error ("unexpected EOF")' in f.message
        assert "unexpected EOF" not in f.log_message  # tool output stays out of logs

    def test_different_errors_are_not_quoted(self) -> None:
        """When the errors disagree, the block says the calls failed without quoting one."""
        steps = [step("bash", f"c{i}", f"e{i}", error=f"error {i}") for i in range(13)]
        f = drive(Engine(), steps)[12]
        assert f is not None and f.critical and '("' not in f.message

    def test_success_or_other_tool_breaks_it(self) -> None:
        """A success, or a call of another tool, ends the streak."""
        for breaker in (step("bash", "ok", "fine"), step("read", "f", "text")):
            steps = [*self.failing(9), breaker, *self.failing(9)]
            assert levels(drive(Engine(), steps)) == ["-"] * 19

    def test_blocks_the_tool_whatever_the_args(self) -> None:
        """Once blocked, the tool stays blocked for new arguments until the run stops."""
        det = Engine()
        drive(det, self.failing(12))
        f = det.check("bash", "bash:something new")
        assert f is not None and f.critical
        assert det.check("read", "read:x") is None

    def test_waits_keep_it_quiet(self) -> None:
        """Failures while waiting (a server that is still starting) are left alone."""
        steps = [
            step("bash", f"sleep 2; curl {i}", "refused", error="refused", waiting=True)
            for i in range(20)
        ]
        assert levels(drive(Engine(), steps)) == ["-"] * 20


class TestProperties:
    @given(
        st.lists(
            st.tuples(st.text(min_size=1, max_size=6), st.booleans(), st.text(max_size=4)),
            max_size=60,
            unique_by=lambda t: t[0],
        )
    )
    @settings(max_examples=200, deadline=None)
    def test_all_distinct_histories_never_fire(self, calls: list[tuple[str, bool, str]]) -> None:
        """Calls that are all different (tools and args) never warn or block."""
        steps = [
            step(f"tool_{name}", name, f"out {out}", error=f"e {out}" if failed else None)
            for name, failed, out in calls
        ]
        assert levels(drive(Engine(), steps)) == ["-"] * len(steps)

    @given(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=80))
    @settings(max_examples=200, deadline=None)
    def test_progressing_outcomes_never_block(self, tools: list[str]) -> None:
        """Whatever the call pattern, calls whose results are all new are never blocked."""
        steps = [step(t, "same", f"result {i}") for i, t in enumerate(tools)]
        assert all(f is None or not f.critical for f in drive(Engine(), steps))

    @given(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), st.booleans()),
            max_size=40,
        ),
        st.sampled_from(["a", "b", "c"]),
    )
    @settings(max_examples=150, deadline=None)
    def test_dump_load_round_trip(self, calls: list[tuple[str, str, bool]], nxt: str) -> None:
        """A state rebuilt from its dump answers the next check exactly as the original."""
        det = Engine()
        drive(det, [step(t, "1", o, error=o if failed else None) for t, o, failed in calls])
        copy = Engine()
        copy.state = RunState.from_bytes(det.state.to_bytes(), det.state.plan.detectors[0].cfg)
        assert copy.check(nxt, f"{nxt}:1") == det.check(nxt, f"{nxt}:1")

    def test_rules_can_be_switched_off(self) -> None:
        """A rule switched off in the config never reports and keeps no state."""
        off = Rules(sections={"consecutiveRepeat": ConsecutiveRepeatSettings(enabled=False)})
        engine = Engine(off)
        assert all(f is None for f in drive(engine, [step("x", "1")] * 10))
        assert REPEAT not in [d.name for d in engine.state.detectors]


class TestWaitCommand:
    def test_waiting_commands(self) -> None:
        """sleep, watch and wait (as commands or flags) mark a wait."""
        for command in (
            "sleep 30 && gh run view 42",
            "gh run watch 42",
            "kubectl wait --for=condition=ready pod/x",
            "helm upgrade x ./chart --wait",
            ["bash", "-c", "wait"],
        ):
            assert is_wait_command({"command": command}), command

    def test_other_commands(self) -> None:
        """Words that only contain those letters, and non-shell params, are not waits."""
        for params in (
            {"command": "python wait_for_it.py"},
            {"command": "cat sleepy.txt"},
            {"command": "echo awaited"},
            {"path": "sleep"},
            "sleep 5",
        ):
            assert not is_wait_command(params), params
