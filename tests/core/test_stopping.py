"""What a stop carries and what a person's answer does (``onStop``), through a real guard."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.stopping import (
    StopReport,
    choose_on_stop,
    final_answer_request,
    parse_choice,
    person_note,
)
from loopwarden.testing import FakeClock, capture_events
from tests._snippets import ROOT, snippet

ON: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}


def loop_until_stopped(run: lw.RunGuard, tool: str = "read_file", limit: int = 40) -> lw.LoopAbort:
    """Make the same call with the same result until the guard stops the run."""
    for n in range(limit):
        try:
            decision = run.before_call(tool, {"path": "a.py"}, call_id=f"{tool}-{n}")
        except lw.LoopAbort as stop:
            return stop
        if not decision.blocked:
            run.after_call(tool, {"path": "a.py"}, call_id=f"{tool}-{n}", result="same text")
    raise AssertionError(f"no stop in {limit} calls")


def test_a_stop_carries_its_report_and_the_documented_summary() -> None:
    """The stop's report counts the run's calls and the refused ones, and its summary is
    the line docs/stopping.md shows."""
    with lw.LoopGuard(ON).run() as run:
        stop = loop_until_stopped(run)
    report = stop.report
    assert report is not None
    assert (report.code, report.tool, report.count) == ("consecutive_repeat", "read_file", 8)
    assert (report.calls, report.refused) == (8, 3)  # blocked at 6 and 7, stopped at 8
    assert report.message == stop.message and report.run_id == run.run_id
    assert stop.call_id == "read_file-7" and stop.askable
    assert report.summary() == snippet("stop-summary")
    assert stop.to_dict()["summary"] == report.summary()


def test_usage_reported_by_a_host_gives_the_savings() -> None:
    """Tokens, turns and the host's turn limit give the turns and tokens the stop saved."""
    report = StopReport("cycle", "grep", 6, "CRITICAL: loopwarden stopped this run: x.", 9, 2)
    assert report.saved_turns is None and report.saved_tokens is None
    used = report.with_usage(tokens=12_000, turns=8, turn_limit=25, limit_name="max_turns")
    assert (used.saved_turns, used.saved_tokens) == (17, 25_500)
    assert used.summary().endswith(
        "It had used 12,000 tokens. Without the stop it could have gone on for 17 more model "
        "turns (about 25,500 tokens) before its max_turns of 25."
    )
    assert used.to_dict()["saved_tokens"] == 25_500
    assert "stuck in a loop (rule cycle): x. No tools" in final_answer_request(used)


def test_allow_once_runs_the_refused_call_and_the_next_repeat_stops_again() -> None:
    """``allow_once``: the refused call runs and is recorded; the next repeat stops again."""
    with capture_events() as events, lw.LoopGuard(ON).run() as run:
        stop = loop_until_stopped(run)
        decision = run.resume(stop, "allow_once")
        assert decision.action == "allow"
        assert (
            run.after_call("read_file", {"path": "a.py"}, call_id=stop.call_id, result="same text")
            is None
        )
        assert run.snapshot()["stopped"] is None
        again = loop_until_stopped(run, limit=1)
    assert again.code == "consecutive_repeat" and again.report is not None
    assert again.report.calls == 9 and again.report.refused == 4
    resumed = [e for e in events if e.action == "resume"]
    assert len(resumed) == 1 and resumed[0].detector == "consecutive_repeat"


def test_continue_gives_the_model_the_note_and_starts_the_rules_afresh() -> None:
    """``continue``: the call is answered with the person's note, and the rules count the
    run afresh (the same loop is stopped again after the full thresholds)."""
    secret = "use the staging database, password hunter2"
    with capture_events() as events, lw.LoopGuard(ON).run() as run:
        stop = loop_until_stopped(run)
        decision = run.resume(stop, "continue", note=secret)
        assert decision.blocked and decision.message == person_note(secret)
        assert secret in (decision.message or "")
        again = loop_until_stopped(run)
    assert again.report is not None and again.report.count == 8
    assert again.report.calls == 16  # the count of calls goes on; the rules' counts do not
    for event in events:
        assert "hunter2" not in event.message  # the note reaches the model only


def test_stop_raises_the_stop_again_and_the_run_stays_stopped() -> None:
    """``stop``: the same stop is raised again, and the run refuses its next call."""
    with lw.LoopGuard(ON).run() as run:
        stop = loop_until_stopped(run)
        with pytest.raises(lw.LoopAbort) as raised:
            run.resume(stop, "stop")
        assert raised.value is stop
        with pytest.raises(lw.CircuitBreakerTripped):
            run.before_call("other", {}, call_id="x")


def test_the_post_compaction_abort_is_never_lifted() -> None:
    """A person cannot overrule the seed's post-compaction verdict: every answer raises it."""
    with lw.LoopGuard(ON).run() as run:
        for n in range(2):
            run.before_call("poll", {}, call_id=f"a{n}")
            run.after_call("poll", {}, call_id=f"a{n}", result="same")
        run.on_compaction()
        with pytest.raises(lw.CompactionLoopPersisted) as raised:
            for n in range(5):
                run.before_call("poll", {}, call_id=f"b{n}")
                run.after_call("poll", {}, call_id=f"b{n}", result="same")
        stop = raised.value
        assert not stop.askable and stop.call_id is None
        for choice in ("allow_once", "continue"):
            with pytest.raises(lw.CompactionLoopPersisted):
                run.resume(stop, choice)


def test_an_answer_holds_for_every_process_on_a_shared_store(tmp_path: Path) -> None:
    """A person's ``continue``, given through one guard, lifts the stop for another guard
    on the same SQLite file; the stop's counts were stored too."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with _pair(url) as (first, second):
        run_a = first.run("shared")
        stop = loop_until_stopped(run_a)
        run_b = second.run("shared")
        with pytest.raises(lw.CircuitBreakerTripped) as refused:
            run_b.before_call("read_file", {"path": "b.py"}, call_id="b")
        assert refused.value.report is not None and refused.value.report.refused == 4
        run_b.resume(stop, "continue", note="try b.py")
        assert run_a.before_call("read_file", {"path": "c.py"}, call_id="c").action == "allow"


class _pair:
    def __init__(self, url: str) -> None:
        self.guards = (lw.LoopGuard(ON, store=url), lw.LoopGuard(ON, store=url))

    def __enter__(self) -> tuple[lw.LoopGuard, lw.LoopGuard]:
        return self.guards

    def __exit__(self, *exc: object) -> None:
        for guard in self.guards:
            guard.close()


def test_an_unknown_answer_is_a_clear_error() -> None:
    """An answer that is none of the three is refused with what is allowed."""
    with lw.LoopGuard(ON).run() as run:
        stop = loop_until_stopped(run)
        with pytest.raises(ValueError, match="allow_once, stop or continue"):
            run.resume(stop, "maybe")
    assert parse_choice("Allow once") == "allow_once" and parse_choice("deny") == "stop"
    assert parse_choice("continue") == "continue" and parse_choice(3) is None


@pytest.mark.parametrize(
    ("given", "configured", "person", "expected"),
    [
        (None, None, True, "ask"),
        (None, None, False, "answer"),
        (None, "raise", True, "raise"),
        ("raise", "answer", False, "raise"),
        ("ask", None, False, "answer"),  # nobody to ask
        (None, "ask", True, "ask"),
    ],
)
def test_the_mode_is_the_argument_then_the_config_then_the_host(
    given: str | None, configured: str | None, person: bool, expected: str
) -> None:
    """``on_stop=`` wins over ``loopwarden.onStop``, which wins over the host's default."""
    assert choose_on_stop(given, configured, person=person) == expected


def test_on_stop_is_validated_with_its_path() -> None:
    """``loopwarden.onStop`` accepts the three modes and names a near miss."""
    guard = lw.LoopGuard({**ON, "loopwarden": {"onStop": "answer"}})
    assert guard.config.settings.on_stop == "answer"
    with pytest.raises(lw.ConfigError, match=r"loopwarden\.onStop: .*did you mean 'answer'"):
        lw.LoopGuard({**ON, "loopwarden": {"onStop": "answr"}})


def poll_running(run: lw.RunGuard, clock: FakeClock, polls: int, every: float) -> list[str]:
    """Poll a job that keeps running; what the model reads with each poll (or its block)."""
    seen: list[str] = []
    for n in range(polls):
        decision = run.before_call("BashOutput", {"bash_id": "b1"}, call_id=f"p{n}")
        if decision.blocked:
            seen.append(decision.message or "")
            continue
        clock.advance(every)
        result = {"status": "running", "stdout": "", "stderr": ""}
        seen.append(
            run.after_call("BashOutput", {"bash_id": "b1"}, call_id=f"p{n}", result=result) or ""
        )
    return seen


def test_a_poll_of_a_running_job_is_told_to_wait_as_the_docs_say() -> None:
    """A job polled every 4 s gets the wait wording of docs/stopping.md at its 11th poll, and
    its block at the 21st says how long it has run; the thresholds are the seed's."""
    clock = FakeClock(1000.0)
    with lw.LoopGuard(ON, clock=clock).run() as run:
        seen = poll_running(run, clock, 21, 4.0)
    page = (ROOT / "docs" / "stopping.md").read_text(encoding="utf-8")
    quoted = re.search(r"reads at its\s+11th poll:\s+((?:> .*\n)+)", page)
    assert quoted is not None
    text = " ".join(line[2:].strip() for line in quoted.group(1).splitlines())
    assert seen[10] == text
    assert all(not note for note in seen[:10]) and not any(seen[11:20])
    assert seen[20].startswith(
        "CRITICAL: loopwarden blocked this call: the job is still running after at least "
        "1 min 16 s, and BashOutput has been polled 20 times (about every 4 s)"
    )


def test_a_finished_job_loses_the_wait_wording() -> None:
    """Once the poll's result says the job ended, the same loop is worded as a plain poll."""
    clock = FakeClock(1000.0)
    with lw.LoopGuard(ON, clock=clock).run() as run:
        running = poll_running(run, clock, 12, 4.0)
        finished = []
        for n in range(12, 23):
            run.before_call("BashOutput", {"bash_id": "b1"}, call_id=f"p{n}")
            clock.advance(4.0)
            done = {"status": "completed", "stdout": "ok", "exitCode": 0}
            note = run.after_call("BashOutput", {"bash_id": "b1"}, call_id=f"p{n}", result=done)
            finished.append(note or "")
    assert running[10].startswith("WARNING: the job is still running")
    warned = [note for note in finished if note]
    assert warned == [
        "WARNING: BashOutput has been polled 10 times with identical arguments and no "
        "progress in its result. Wait longer between checks, or report the task as failed "
        "if the process looks stuck."
    ]


def test_stop_holds_where_another_answer_had_lifted_the_stop(tmp_path: Path) -> None:
    """Two people answer the same stop through two guards on one SQLite file: the newest
    answer wins, and a ``stop`` after a ``continue`` stops the run again."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with _pair(url) as (first, second):
        run_a = first.run("shared")
        stop = loop_until_stopped(run_a)
        run_b = second.run("shared")
        run_b.resume(stop, "continue", note="go on")
        assert run_a.before_call("read_file", {"path": "x.py"}, call_id="x").action == "allow"
        with capture_events() as events, pytest.raises(lw.LoopAbort):
            run_a.resume(stop, "stop")
        assert [e.action for e in events] == []  # a stop is no "resume"
        with pytest.raises(lw.CircuitBreakerTripped):
            run_b.before_call("read_file", {"path": "y.py"}, call_id="y")


def test_continue_keeps_the_rules_state_storable(tmp_path: Path) -> None:
    """After ``continue`` the run's fresh rules and window are what the SQLite store writes:
    a second guard on the same file reads the same run, and its rules go on counting."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with _pair(url) as (first, second):
        run = first.run("r")
        stop = loop_until_stopped(run)
        run.resume(stop, "continue")
        for n in range(4):
            run.before_call("grep", {"q": "x"}, call_id=f"g{n}")
            run.after_call("grep", {"q": "x"}, call_id=f"g{n}", result="none")
        other = second.run("r")
        snapshot = other.snapshot()
        assert snapshot["stopped"] is None
        assert [r["tool_name"] for r in snapshot["records"]] == ["grep"] * 4
        warned = other.before_call("grep", {"q": "x"}, call_id="g4")
    assert warned.action == "warn"  # the 5th identical call in a row: consecutive_repeat
