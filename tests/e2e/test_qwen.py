"""Qwen Code 0.24.4 with loopwarden's hook, against a scripted Gemini API.

Qwen Code ends a turn by itself at the 5th identical tool call in a row (an
always-on guard), so the identical-loop tests use a config whose stop comes
before that, and the default config is tested on an alternating loop, which
Qwen lets run. A stop denies the call; the run's next ``UserPromptSubmit``
(Qwen fires it before every model request of a turn) is blocked, which ends
the turn before the model is asked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .common import (
    SMALL,
    check_uninstall_restores,
    check_users_hook_kept,
    check_warn_then_block,
    kinds,
)
from .harness import AGENTS, Outcome, Workspace
from .views import classify

pytestmark = pytest.mark.e2e

AGENT = "qwen"
MISSING_TOOL = {"tool": "no_such_tool", "input": {"job": 42}}
TIGHT = {
    "enabled": True,
    "warningThreshold": 1,
    "criticalThreshold": 2,
    "globalCircuitBreakerThreshold": 3,
    "unknownToolThreshold": 2,
}
"""Stops an identical loop at its 4th call, before Qwen's own guard (the 5th)."""
QWEN_IDENTICAL_CALLS = 5
"""Qwen Code 0.24 ends a turn when the model repeats one call this many times in a row."""
# Compact once a prompt reaches 10% of the model's window (the step reports 500k tokens).
COMPACT_EARLY = {"context": {"autoCompactThreshold": 0.1}}


def alternate(ws: Workspace, calls: int) -> list[dict[str, Any]]:
    """Two shell calls taking turns, each printing the same text every time."""
    a = AGENTS[AGENT].shell(f"echo run >> {ws.count_file}; echo pending")
    b = AGENTS[AGENT].shell(f"echo run >> {ws.count_file}; echo waiting")
    return [a if i % 2 == 0 else b for i in range(calls)]


def alternate_progress(ws: Workspace, calls: int) -> list[dict[str, Any]]:
    """Two shell calls taking turns whose output changes every time (a loop that makes
    progress; Qwen's own guard ends five identical calls in a row, whatever they print)."""
    a = AGENTS[AGENT].shell(f"echo run >> {ws.count_file}; wc -l < {ws.count_file}")
    b = AGENTS[AGENT].shell(f"echo run >> {ws.count_file}; cat {ws.count_file} | wc -l")
    return [a if i % 2 == 0 else b for i in range(calls)]


def ended_after(outcome: Outcome, call: int) -> bool:
    """The turn ended at ``call``: the model was never asked again (its result unseen)."""
    return len(outcome.main) == call and outcome.results()[call - 1] is None


def test_alternating_loop_is_warned_blocked_and_ends_the_turn(ws: Workspace) -> None:
    """With the default config two calls taking turns (which Qwen's own guard lets run) are
    warned, then blocked (not run), and the stop ends the turn."""
    outcome = ws.run(alternate(ws, 20))
    seen = kinds(outcome)
    first = next(i for i, k in enumerate(seen) if k is not None)
    assert seen[first] == "warn", seen
    block = seen.index("block")
    assert outcome.executions == block, "blocked calls must not run"
    # The stop is the first call that is neither run nor shown: the turn ends there.
    stopped = len(outcome.main)
    assert stopped < 20 and ended_after(outcome, stopped), seen
    assert all(k == "block" for k in seen[block : stopped - 1]), seen
    shown = outcome.results()[block]
    assert shown is not None and shown.is_error and "loopwarden blocked this call" in shown.text


def test_identical_loop_warns_blocks_and_stops_before_qwens_own_guard(ws: Workspace) -> None:
    """An identical shell loop under a tight config: warned, blocked, and the stop ends the
    turn at the breaker, before Qwen's own guard would."""
    ws.write_config(TIGHT)
    t = ws.thresholds()
    assert t.stop < QWEN_IDENTICAL_CALLS
    outcome = ws.run([ws.poll(t.stop + 4)])
    check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical
    assert ended_after(outcome, t.stop)


def test_qwens_own_guard_ends_an_identical_loop_first(ws: Workspace) -> None:
    """With the default config Qwen ends an identical loop at its 5th call, before
    loopwarden's thresholds; loopwarden says nothing."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 5)])
    # The 5th call is refused when the model makes it: loopwarden would warn with its result.
    assert len(outcome.main) == QWEN_IDENTICAL_CALLS <= t.first_warning
    assert outcome.executions == QWEN_IDENTICAL_CALLS - 1
    assert not set(kinds(outcome)) - {None}


def test_stop_is_shown_to_the_user_in_text_mode(ws: Workspace) -> None:
    """In text mode Qwen prints the denied call with loopwarden's stop reason on stderr."""
    ws.write_config(TIGHT)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 2)], text_mode=True)
    run = outcome.runs[-1]
    assert run.code == 0
    assert classify(run.stderr) == "stop", run.stderr[-800:]


def test_auto_compaction_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After Qwen compresses the chat (PostCompact), the call made just before the
    compression, repeated with the same result, ends the turn at the window's last attempt."""
    ws = make_workspace(AGENT, **COMPACT_EARLY)
    ws.install()
    t = ws.thresholds()
    # One identical call before the compression and the window's after it stay under
    # Qwen's own guard; the first calls progress, so only the post-compaction guard decides.
    assert 1 + t.window < QWEN_IDENTICAL_CALLS
    steps = [ws.progress(2), ws.poll(1, usage=500000), ws.poll(t.window + 3)]
    outcome = ws.run(steps)
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compression happened"
    assert "detector=compaction_loop_persisted" in outcome.hook_log
    assert outcome.executions == 3 + t.window
    assert ended_after(outcome, 3 + t.window), kinds(outcome)


def test_loop_on_a_missing_tool_is_noted_and_ends_the_turn(ws: Workspace) -> None:
    """Calls of a missing tool fire no PreToolUse in Qwen; PostToolBatch reports them: past
    the unknown-tool threshold the model is told, and at the breaker the turn ends."""
    ws.write_config(TIGHT)
    outcome = ws.run([{**MISSING_TOOL, "repeat": 8}])
    seen = kinds(outcome)
    assert seen[0] is None, seen
    assert "miss" in seen, seen
    assert len(outcome.main) < QWEN_IDENTICAL_CALLS, "loopwarden must end the turn first"
    assert ended_after(outcome, len(outcome.main)), seen


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """Two calls taking turns whose output changes every time are never blocked or stopped
    (a single repeated call cannot pass Qwen's own guard, whatever it prints)."""
    ws.write_config(SMALL)
    calls = ws.thresholds().stop + 3
    outcome = ws.run(alternate_progress(ws, calls))
    assert outcome.executions == calls
    assert not {"block", "stop"} & set(kinds(outcome))


def test_the_users_own_hook_is_kept_and_still_runs(ws: Workspace) -> None:
    """install adds loopwarden next to the user's PreToolUse hook, which keeps firing."""
    check_users_hook_kept(ws, "PreToolUse")


def test_uninstall_gives_back_the_file_byte_for_byte(
    make_workspace: Callable[..., Workspace],
) -> None:
    """install, a session, then uninstall leave the user's settings.json as it was.

    Qwen adds ``"$version": 4`` to a settings file on its first start (its own
    migration), so the file is taken once Qwen has seen it.
    """
    ws = make_workspace(AGENT)
    ws.run([{"text": "Hello."}])
    ws.original = ws.settings.read_bytes()
    assert b'"$version"' in ws.original
    ws.install()
    check_uninstall_restores(ws, ws.poll(2))


def test_doctor_checks_the_installed_hook(ws: Workspace) -> None:
    """``loopwarden doctor`` finds the hooks, runs a test call and knows the CLI's version."""
    doctor = ws.loopwarden("doctor", "--agent", AGENT)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "test PreToolUse event allowed" in doctor.stdout, doctor.stdout
    assert "[ok] Qwen Code 0.24.4" in doctor.stdout, doctor.stdout
