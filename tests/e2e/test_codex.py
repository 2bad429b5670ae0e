"""Codex CLI 0.171.0 with loopwarden's hook, against a scripted OpenAI Responses API.

Codex cannot end a turn from a hook (docs/hooks.md): after a stop every later
call of the turn is denied instead, so the tests count real executions rather
than expecting the turn to end. Calls of a missing tool fire no hook: the next
real call's hooks read them from the rollout.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from .common import (
    LOOP_THROUGH_COMPACTION,
    SMALL,
    check_ended_by_the_compaction_abort,
    check_progressing_loop,
    check_uninstall_restores,
    check_users_hook_kept,
    check_warn_then_block,
    kinds,
)
from .harness import Outcome, Workspace
from .views import classify

pytestmark = pytest.mark.e2e

AGENT = "codex"
MISSING_TOOL = {"tool": "no_such_tool", "input": {"job": 42}}
COMPACT_AT = {"toml": "model_auto_compact_token_limit = 2000\n"}


def turn_events(outcome: Outcome) -> list[str]:
    return [e.get("type", "") for e in outcome.runs[-1].events()]


def test_no_progress_loop_warns_then_blocks_at_the_configured_calls(ws: Workspace) -> None:
    """With the default config the identical shell loop is warned once, then blocked."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.breaker)])
    check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical, "blocked calls must not run"
    block = outcome.results()[t.critical]
    assert block is not None and block.text.startswith("Command blocked by PreToolUse hook")
    assert "turn.completed" in turn_events(outcome)


def test_stop_denies_the_call_and_every_later_call(ws: Workspace) -> None:
    """From the circuit breaker on, no call of the turn runs and the model is told to stop."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 4)])
    seen = check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical
    assert seen[t.breaker] == "stop"
    assert all(kind in ("stop", None) for kind in seen[t.stop :]), seen


def test_stop_is_shown_to_the_user(ws: Workspace) -> None:
    """``codex exec`` (text mode) tells the user that loopwarden stopped the turn."""
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 2)], text_mode=True)
    run = outcome.runs[-1]
    assert classify(run.stdout + run.stderr) == "stop", (run.stdout[-800:], run.stderr[-800:])
    # onStop answer: the deny reason Codex prints holds the stop's summary, with the
    # turn's tokens from the rollout's token_count events.
    summary = re.search(
        r"loopwarden stopped this run \(rule \w+, tool Bash, count \d+\): \d+ of its \d+ "
        r"tool calls were not run\. It had used ([\d,]+) tokens\.",
        run.stderr,
    )
    assert summary is not None and int(summary[1].replace(",", "")) > 0, run.stderr[-1500:]


def test_auto_compaction_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After an automatic compaction the repeated call is aborted within the window and
    no later call of the turn runs."""
    ws = make_workspace(AGENT, **COMPACT_AT)
    ws.install()
    t = ws.thresholds()
    # The third answer reports more tokens than the limit: Codex compacts after it. The
    # first two calls progress, so that only the post-compaction guard decides here (the
    # same call in a row would be blocked by the consecutive-repeat rule first).
    outcome = ws.run([ws.progress(2), ws.poll(1, usage=5000), ws.poll(t.window + 4)])
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    assert outcome.executions == 3 + t.window
    seen = kinds(outcome)
    assert "stop" in seen
    assert all(kind in ("stop", None) for kind in seen[seen.index("stop") :]), seen


def test_misses_are_noted_at_the_next_real_call(ws: Workspace) -> None:
    """Calls of a missing tool fire no hook in Codex; the next real call's hooks read
    them from the rollout and tell the model (that call itself runs)."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([{**MISSING_TOOL, "repeat": t.unknown + 1}, ws.poll(1)])
    seen = kinds(outcome)
    assert seen[: t.unknown + 1] == [None] * (t.unknown + 1), seen
    assert seen[t.unknown + 1] == "miss", seen
    assert outcome.executions == 1


def test_a_loop_of_misses_stops_the_turn_at_the_next_real_call(ws: Workspace) -> None:
    """Misses up to the circuit breaker: the next real call and every later one is denied
    with the stop. (A turn of misses only cannot be interrupted: no Codex hook sees them
    in time to act.)"""
    ws.write_config(SMALL)
    t = ws.thresholds()
    stop = max(t.breaker, t.unknown) + 1
    outcome = ws.run([{**MISSING_TOOL, "repeat": stop}, ws.poll(3)])
    seen = kinds(outcome)
    assert seen[stop : stop + 3] == ["stop"] * 3, seen
    assert outcome.executions == 0


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A repeated call whose output changes every time is never blocked or stopped."""
    check_progressing_loop(ws, ws.thresholds().stop + 5)


def test_the_users_own_hook_is_kept_and_still_runs(ws: Workspace) -> None:
    """install adds loopwarden next to the user's PreToolUse hook, which keeps firing."""
    check_users_hook_kept(ws, "PreToolUse")


def test_uninstall_gives_back_the_file_byte_for_byte(ws: Workspace) -> None:
    """install, a session, then uninstall leave the user's hooks.json as it was."""
    check_uninstall_restores(ws, ws.poll(2))


def test_doctor_reports_hooks_codex_does_not_trust(ws: Workspace) -> None:
    """Without trust Codex skips every hook; ``loopwarden doctor`` says so and what to do."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    untrusted = ws.run([ws.poll(t.critical + 2)], trust_hooks=False)
    assert untrusted.executions == t.critical + 2, "hooks ran although not trusted"
    assert untrusted.user_hook_runs == 0
    doctor = ws.loopwarden("doctor", "--agent", AGENT)
    assert doctor.returncode != 0
    assert "Codex does not trust 3 of loopwarden's 3 hooks" in doctor.stdout, doctor.stdout
    assert "/hooks" in doctor.stdout
    assert "[ok] Codex CLI 0.171.0" in doctor.stdout


@pytest.mark.parametrize("before", LOOP_THROUGH_COMPACTION)
def test_a_loop_through_auto_compaction_ends_with_the_compaction_abort(
    make_workspace: Callable[..., Workspace], before: int
) -> None:
    """The same call ``before`` times (the last answer makes Codex compact), then more of
    it, with the default config (every rule on): the model is shown the post-compaction
    abort, no later than the guard alone would end the loop, never another rule's stop,
    and no later call of the turn runs."""
    ws = make_workspace(AGENT, **COMPACT_AT)
    ws.install()
    t = ws.thresholds()
    steps = [ws.poll(before - 1), ws.poll(1, usage=5000), ws.poll(t.window + 8)]
    outcome = ws.run(steps)
    seen = kinds(outcome)
    check_ended_by_the_compaction_abort(ws, outcome, before)
    first = seen.index("stop")
    # The guard alone: the window-th call after the compaction is the last to run.
    assert first < before + t.window, seen
    shown = outcome.results()[first]
    assert shown is not None and "compaction" in shown.everything, shown
    assert all(kind in ("stop", None) for kind in seen[first:]), seen
