"""GitHub Copilot CLI 1.0.102 with loopwarden's hook, against a scripted Responses API.

Copilot runs offline (``COPILOT_OFFLINE``) with a BYOK provider pointed at our
fake API. A hook cannot end a Copilot turn (``continue: false`` is ignored), so
after a stop every later call of the run is denied and the tests count real
executions. loopwarden's hooks live in a file of their own in Copilot's hooks
folder, next to the user's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .common import SMALL, check_progressing_loop, check_warn_then_block, kinds
from .harness import Workspace
from .views import classify

pytestmark = pytest.mark.e2e

AGENT = "copilot"
MISSING_TOOL = {"tool": "no_such_tool", "input": {"job": 42}}
# Compact once a prompt reaches 90% of a 100,000-token window.
SMALL_WINDOW = {"env": {"COPILOT_PROVIDER_MAX_PROMPT_TOKENS": "100000"}}


def ours(ws: Workspace) -> Path:
    return ws.home / ".copilot" / "hooks" / "loopwarden.json"


def folder(ws: Workspace) -> dict[str, bytes]:
    """Every file of Copilot's user hooks folder, with its bytes."""
    base = ws.home / ".copilot" / "hooks"
    return {p.name: p.read_bytes() for p in sorted(base.iterdir())} if base.exists() else {}


def test_no_progress_loop_warns_then_blocks_at_the_configured_calls(ws: Workspace) -> None:
    """With the default config an identical shell loop is warned once, then blocked; the
    blocked calls do not run, and the model reads Copilot's denial with the reason."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.breaker)])
    check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical, "blocked calls must not run"
    block = outcome.results()[t.critical]
    assert block is not None and block.text.startswith("Denied by preToolUse hook: CRITICAL")
    warn = outcome.results()[t.first_warning - 1]
    assert warn is not None and "Additional guidance from postToolUse hooks" in warn.text


def test_stop_denies_the_call_and_every_later_call(ws: Workspace) -> None:
    """From the circuit breaker on, no call of the run runs and the model is told to stop."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 3)])
    seen = check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical
    assert seen[t.breaker] == "stop"
    assert all(kind == "stop" for kind in seen[t.stop : t.stop + 3]), seen
    stop = outcome.results()[t.breaker]
    assert stop is not None and "No tool call will run again in this turn" in stop.text


def test_a_new_prompt_is_a_new_run(ws: Workspace) -> None:
    """After a stop, the user's next prompt (same session) starts with a clean run."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run(
        [ws.poll(t.stop), {"text": "I stopped."}, ws.progress(2)],
        ["Poll job 42.", "Now count the runs."],
    )
    assert kinds(outcome)[-3:] == [None, None, None]
    assert outcome.executions == t.critical + 2


def test_stop_is_shown_to_the_user(ws: Workspace) -> None:
    """In text mode Copilot prints the denied call with loopwarden's stop reason."""
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 1)], text_mode=True)
    run = outcome.runs[-1]
    assert run.code == 0
    assert classify(run.stdout + run.stderr) == "stop", (run.stdout[-1500:], run.stderr[-800:])


def test_auto_compaction_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After an automatic compaction (preCompact) the repeated call is aborted within the
    window, and no later call of the run runs."""
    ws = make_workspace(AGENT, **SMALL_WINDOW)
    ws.install()
    t = ws.thresholds()
    # The third answer reports 95,000 tokens: Copilot compacts before the next request.
    # The first calls progress, so only the post-compaction guard decides here.
    outcome = ws.run([ws.progress(2), ws.poll(1, usage=95000), ws.poll(t.window + 4)])
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    assert outcome.executions == 3 + t.window
    seen = kinds(outcome)
    assert "stop" in seen
    # Every later call is denied with the stop (the last call's answer is never shown).
    assert all(kind in ("stop", None) for kind in seen[seen.index("stop") :]), seen


def test_a_loop_on_a_missing_tool_is_noted_blocked_and_stopped(ws: Workspace) -> None:
    """A missing tool fires preToolUse and postToolUseFailure in Copilot (unlike Claude
    Code, Codex and Gemini): past the unknown-tool threshold its calls are denied with a
    reason naming the missing tool, up to the stop."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([{**MISSING_TOOL, "repeat": t.stop + 2}])
    seen = kinds(outcome)
    assert seen[: t.unknown] == [None] * t.unknown, seen
    assert seen[t.unknown] == "block", seen
    assert "stop" in seen, seen
    assert all(k in ("block", "stop", None) for k in seen[t.unknown :]), seen
    block = outcome.results()[t.unknown]
    assert block is not None and "no_such_tool" in block.text, block


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A repeated shell call whose output changes every time is never blocked or stopped."""
    ws.write_config(SMALL)
    check_progressing_loop(ws, ws.thresholds().stop + 3)


def test_the_users_own_hook_is_kept_and_still_runs(ws: Workspace) -> None:
    """install adds loopwarden.json next to the user's own hooks file, which keeps its bytes
    and keeps firing."""
    assert ws.settings.read_bytes() == ws.original
    data = json.loads(ours(ws).read_text())
    assert data["version"] == 1
    assert sorted(data["hooks"]) == sorted(
        ["preToolUse", "postToolUse", "postToolUseFailure", "preCompact", "userPromptSubmitted"]
    )
    outcome = ws.run([ws.poll(3)])
    assert outcome.executions == 3
    assert outcome.user_hook_runs == 3


def test_uninstall_gives_back_the_hooks_folder_byte_for_byte(
    make_workspace: Callable[..., Workspace],
) -> None:
    """install, a session, then uninstall: the hooks folder holds exactly what it held."""
    ws = make_workspace(AGENT)
    before = folder(ws)
    ws.install()
    assert set(folder(ws)) == {*before, "loopwarden.json"}
    ws.run([ws.poll(2)])
    done = ws.loopwarden("install", AGENT, "--uninstall")
    assert done.returncode == 0, done.stderr
    assert folder(ws) == before


def test_doctor_checks_the_installed_hook(ws: Workspace) -> None:
    """``loopwarden doctor`` finds the hooks, runs a test call through preToolUse and
    knows the CLI's version."""
    doctor = ws.loopwarden("doctor", "--agent", AGENT)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "test preToolUse event allowed" in doctor.stdout, doctor.stdout
    assert "[ok] GitHub Copilot CLI 1.0.102" in doctor.stdout, doctor.stdout
