"""OpenCode 1.18.33 with loopwarden's plugin, against a scripted Anthropic API.

The plugin throws in ``tool.execute.before`` to block (the call does not run; the
model gets the text as the call's error), appends warnings to the output in
``tool.execute.after``, and stops a run by refusing its next model request
(``chat.params``). OpenCode answers calls of missing tools through its own
``invalid`` tool, which goes through the plugin: those calls can be blocked too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from .common import SMALL, check_progressing_loop, check_warn_then_block, kinds
from .harness import Outcome, Workspace
from .harness_files import tree
from .views import classify

pytestmark = pytest.mark.e2e

AGENT = "opencode"
MISSING_TOOL = {"tool": "no_such_tool", "input": {"job": 42}}
# A context window small enough that one answer reporting 30000 tokens overflows it.
COMPACT_AT = {"limit": {"context": 20000, "output": 1000}}


def errors(outcome: Outcome) -> list[str]:
    """The messages of the ``error`` events of the last run (``--format json``)."""
    found = []
    for event in outcome.runs[-1].events():
        if event.get("type") == "error":
            found.append(json.dumps(event.get("error")))
    return found


def check_stopped(ws: Workspace, outcome: Outcome, calls_run: int) -> None:
    """No model request after the stopped call; the user is told why."""
    t = ws.thresholds()
    assert len(outcome.main) == t.stop, f"the model was called {len(outcome.main)} times"
    assert kinds(outcome)[t.breaker] is None, "the stopped call's result never reaches the model"
    assert outcome.executions == calls_run, "blocked calls must not run"
    assert any(classify(e) == "stop" for e in errors(outcome)), outcome.runs[-1].stdout[-2000:]


def test_no_progress_loop_warns_blocks_and_stops_at_the_configured_calls(ws: Workspace) -> None:
    """With the default config the identical bash loop is warned, blocked, then stopped."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 5)])
    check_warn_then_block(ws, outcome)
    block = outcome.results()[t.critical]
    assert block is not None and block.is_error is True
    assert block.text.startswith("CRITICAL: loopwarden blocked this call")
    check_stopped(ws, outcome, t.critical)


def test_stop_is_shown_to_the_user_in_text_mode(ws: Workspace) -> None:
    """``opencode run`` (text) prints the failed call and the stop reason on stderr."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 5)], text_mode=True)
    run = outcome.runs[-1]
    assert len(outcome.main) == t.stop
    shown = [line.partition("Error: ")[2] for line in run.stderr.splitlines() if "Error: " in line]
    assert [classify(line) for line in shown][-2:] == ["stop", "stop"], run.stderr[-2000:]
    assert "block" in [classify(line) for line in shown]


def test_calls_of_a_missing_tool_are_blocked_then_the_run_stops(ws: Workspace) -> None:
    """OpenCode's ``invalid`` stand-in is checked under the missing tool's name: blocked
    from the unknown-tool threshold on, and the run stopped when the model keeps on."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([{**MISSING_TOOL, "repeat": 3 * t.breaker}])
    seen = kinds(outcome)
    assert seen[: t.unknown] == [None] * t.unknown, seen
    first = outcome.results()[0]
    assert first is not None and "unavailable tool 'no_such_tool'" in first.text
    assert seen[t.unknown] == "block", seen
    assert "stop" not in seen, "the stopped call's result never reaches the model"
    assert len(outcome.main) < 3 * t.breaker, "the run was not stopped"
    assert any(classify(e) == "stop" for e in errors(outcome))


def test_auto_compaction_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After OpenCode compacts the session, the repeated call is aborted within the
    post-compaction window, and no model request follows."""
    ws = make_workspace(AGENT, **COMPACT_AT)
    ws.install()
    t = ws.thresholds()
    outcome = ws.run([ws.progress(2), ws.poll(1, usage=30000), ws.poll(t.window + 4)])
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    assert outcome.executions == 3 + t.window
    assert any("loopwarden aborted the run" in e for e in errors(outcome)), errors(outcome)
    after = [r for r in outcome.main if r["step"] is not None and r["step"] >= 3]
    assert len(after) == t.window, "a model request followed the abort"


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A repeated call whose output changes every time is never blocked or stopped."""
    check_progressing_loop(ws, ws.thresholds().stop + 5)


def test_the_users_own_plugin_is_kept_and_still_runs(make_workspace: Callable[..., Any]) -> None:
    """install adds one file next to the user's plugin and changes no file of theirs;
    both plugins see every call."""
    ws = make_workspace(AGENT)
    config = ws.home / ".config" / "opencode"
    before = tree(config)
    ws.install()
    after = tree(config)
    assert {k: v for k, v in after.items() if k != "plugins/loopwarden.js"} == before
    outcome = ws.run([ws.poll(3)])
    assert outcome.executions == 3
    assert outcome.user_hook_runs == 3


def test_uninstall_gives_back_the_directory_byte_for_byte(
    make_workspace: Callable[..., Any],
) -> None:
    """install, a session, then uninstall leave OpenCode's config directory as it was."""
    ws = make_workspace(AGENT)
    before = tree(ws.home / ".config")
    ws.install()
    ws.run([ws.poll(2)])
    done = ws.loopwarden("install", AGENT, "--uninstall")
    assert done.returncode == 0, done.stderr
    assert tree(ws.home / ".config") == before


def test_doctor_checks_the_plugin(ws: Workspace) -> None:
    """``loopwarden doctor`` finds the plugin, runs a test event and knows the version."""
    doctor = ws.loopwarden("doctor", "--agent", AGENT)
    assert doctor.returncode == 0, doctor.stdout
    assert "[ok] user: installed in" in doctor.stdout and "loopwarden.js" in doctor.stdout
    assert "[ok] test tool.execute.before event allowed" in doctor.stdout
    assert "[ok] OpenCode 1.18.33" in doctor.stdout
