"""Cline CLI 3.0.65 with loopwarden's hook files, against a scripted Anthropic API.

A hook file cannot make Cline skip one call: ``cancel`` ends the run before the
call runs. So on Cline loopwarden's first block is the end of the run (the model
is told nothing more). Cline also stops by itself at the 5th identical call in a
row (its own rule, not configurable from the CLI), so the loops here vary what
Cline compares: they alternate two calls, which only loopwarden catches.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from .common import SMALL, kinds
from .harness import AGENTS, Outcome, Workspace
from .harness_files import tree

pytestmark = pytest.mark.e2e

AGENT = "cline"
CLINE_OWN_STOP = "consecutive identical calls to `run_commands`; stopping to avoid a loop"


def cycle(ws: Workspace, rounds: int) -> list[dict[str, Any]]:
    """Two shell calls taking turns, each answering the same as the round before."""
    first = ws.poll()
    second = shell(ws, f"echo run >> {ws.count_file}; echo 'job 42: pending'")
    return [first, second] * rounds


def shell(ws: Workspace, command: str) -> dict[str, Any]:
    return AGENTS[ws.agent].shell(command)


def verdicts(outcome: Outcome) -> list[str]:
    """loopwarden's verdicts in what the model saw, without the plain results."""
    return [k for k in kinds(outcome) if k is not None]


def run_ended(outcome: Outcome, calls: int) -> None:
    """The run ended at call ``calls`` (made by the model, never run): no more requests."""
    assert len(outcome.main) == calls, f"the model was called {len(outcome.main)} times"
    assert kinds(outcome)[calls - 1] is None, "the ended call's result never reaches the model"
    assert outcome.executions == calls - 1, "the call loopwarden refused must not run"


def test_cycle_is_warned_then_the_run_ends_at_the_block(ws: Workspace) -> None:
    """Two calls taking turns without progress: the model gets loopwarden's warning
    (Cline's ``<hook_context>``); where loopwarden blocks, Cline ends the run."""
    outcome = ws.run(cycle(ws, 10))
    seen = kinds(outcome)
    assert verdicts(outcome) == ["warn"], seen
    warned = seen.index("warn")
    shown = outcome.results()[warned]
    assert shown is not None and '<hook_context source="PostToolUse"' in shown.context
    run_ended(outcome, len(outcome.main))
    assert warned < len(outcome.main) - 1
    assert "loopwarden" in outcome.hook_log and "cycle" in outcome.hook_log


def test_the_same_call_in_a_row_is_stopped_by_cline_itself(ws: Workspace) -> None:
    """Cline's own rule ends the run at the 5th identical call in a row, before
    loopwarden's rule for it (warning with the 5th result) shows the model anything."""
    outcome = ws.run([ws.poll(12)])
    assert CLINE_OWN_STOP in outcome.runs[-1].stdout
    assert verdicts(outcome) == []
    assert len(outcome.main) == 5


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A shell call whose output changes every time is never warned or blocked (the
    command changes too, or Cline's own rule would end it)."""
    calls = 12
    steps = [shell(ws, f"echo run >> {ws.count_file}; echo step {i}") for i in range(calls)]
    outcome = ws.run(steps)
    assert outcome.executions == calls
    assert verdicts(outcome) == []


def test_auto_compaction_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After Cline compacts (noticed through the session's compaction file), repeating
    one call with the same result ends the run within the post-compaction window."""
    env = {"CLINE_MESSAGE_BUILDER_MAX_TOOL_RESULT_CHARS": "200000"}
    # An unknown model id: Cline assumes a 128k window and compacts at ~29k tokens.
    ws = make_workspace(AGENT, model="claude-e2e", env=env)
    ws.install()
    t = ws.thresholds()
    big = ws.work / "big.txt"
    words = ("alpha", "beta", "gamma", "delta", "eps")
    rng = random.Random(1)
    lines = (" ".join(rng.choice(words) for _ in range(10)) for _ in range(800))
    big.write_text("\n".join(lines))
    read = {"tool": "read_files", "input": {"files": [{"path": str(big)}]}, "usage": 200000}
    # Cline compacts after the second big read, before the next model request.
    outcome = ws.run([{**read, "repeat": 2}, ws.poll(t.window + 3)])
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    assert "post-compaction guard armed" in outcome.hook_log
    assert "compaction_loop_persisted" in outcome.hook_log
    assert outcome.executions == t.window, "the aborted call ran; none may run after it"
    assert len(outcome.main) == 2 + t.window, "a model request followed the abort"


def test_the_users_own_hook_is_kept_and_still_runs(make_workspace: Callable[..., Any]) -> None:
    """install adds two files next to the user's PreToolUse hook and changes none of
    theirs; the user's hook still sees every call."""
    ws = make_workspace(AGENT)
    hooks = ws.home / ".cline" / "hooks"
    before = tree(hooks)
    ws.install()
    after = tree(hooks)
    assert set(after) == {*before, "PreToolUse.sh", "PostToolUse.sh"}
    assert {k: after[k] for k in before} == before
    outcome = ws.run(cycle(ws, 1))
    assert outcome.executions == 2
    assert outcome.user_hook_runs == 2


def test_uninstall_gives_back_the_directory_byte_for_byte(
    make_workspace: Callable[..., Any],
) -> None:
    """install, a session, then uninstall leave Cline's hooks directory as it was."""
    ws = make_workspace(AGENT)
    hooks = ws.home / ".cline" / "hooks"
    before = tree(hooks)
    ws.install()
    ws.run(cycle(ws, 1))
    done = ws.loopwarden("install", AGENT, "--uninstall")
    assert done.returncode == 0, done.stderr
    assert tree(hooks) == before


def test_small_thresholds_end_the_run_at_the_first_block(ws: Workspace) -> None:
    """With low thresholds a cycle is warned and the run ended sooner; the refused call
    never runs."""
    ws.write_config(SMALL)
    outcome = ws.run(cycle(ws, 10))
    run_ended(outcome, len(outcome.main))
    assert len(outcome.main) < 20
    # The pair's warning (ping-pong wording) came with an earlier result, as hook context.
    shown = [s for s in outcome.results() if s is not None]
    warned = [s for s in shown if "WARNING: the last 3 tool calls repeat the same two" in s.context]
    assert len(warned) == 1 and "<hook_context" in warned[0].context, [s.context for s in shown]


def test_doctor_checks_the_hook_files(ws: Workspace) -> None:
    """``loopwarden doctor`` finds both hook files, runs a test event and knows the version."""
    doctor = ws.loopwarden("doctor", "--agent", AGENT)
    assert doctor.returncode == 0, doctor.stdout
    assert "PreToolUse.sh" in doctor.stdout and "PostToolUse.sh" in doctor.stdout
    assert "[ok] test tool_call event allowed" in doctor.stdout
    assert "[ok] Cline CLI 3.0.65" in doctor.stdout


def test_what_the_user_sees_when_the_run_ends(ws: Workspace) -> None:
    """Text mode: Cline prints its own ``[abort]`` line and exits 0; the reason is in
    loopwarden's hook log (Cline shows no hook output to the user)."""
    ws.write_config(SMALL)
    outcome = ws.run(cycle(ws, 10), text_mode=True)
    run = outcome.runs[-1]
    assert run.code == 0
    assert "[abort]" in run.stdout + run.stderr, (run.stdout[-1000:], run.stderr[-1000:])
    assert "loopwarden" not in run.stdout + run.stderr
    assert "loopwarden block" in outcome.hook_log or "loopwarden stop" in outcome.hook_log
