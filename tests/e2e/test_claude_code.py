"""Claude Code 2.1.332 with loopwarden's hook, against a scripted Anthropic API.

``loopwarden install claude-code`` writes HTTP hooks for the tool-call events
(answered by the hook helper, in another network namespace than the CLI's
sandbox: the session-start command hands it the port), so every test here runs
them, unless it installs command hooks (``--command``) itself.

The stop is ``continue: false`` on PreToolUse (or PostToolBatch): the run ends
with ``terminal_reason: hook_stopped`` before another model request, every
time. Calls of a missing tool are seen in PostToolBatch; ``/compact`` arms the
session's next prompt; no PreCompact hook shows its command to the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests._wait import wait_until

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

AGENT = "claude-code"
PROMPT_TOO_LONG = {"error": "prompt is too long: 210000 tokens > 200000 maximum", "status": 400}
MISSING_TOOL = {"tool": "NoSuchTool", "input": {"job": 42}}
# The stop's summary (onStop answer).
SUMMARY = re.compile(
    r"loopwarden stopped this run \(rule \w+, tool Bash, count \d+\): \d+ of its \d+ tool "
    r"calls were not run\."
)
TOKENS_PER_ANSWER = 105  # fakeapi's usage: 100 input + 5 output tokens


def final(outcome: Outcome) -> dict[str, Any]:
    """The ``result`` event of the last run's stream-json output."""
    events = [e for e in outcome.runs[-1].events() if e.get("type") == "result"]
    assert events, outcome.runs[-1].stdout[-2000:]
    return events[-1]


def check_no_progress_loop(ws: Workspace, outcome: Outcome) -> None:
    t = ws.thresholds()
    seen = check_warn_then_block(ws, outcome)
    # Call k is made in answer to request k; its result is shown in request k+1.
    assert len(outcome.main) == t.stop, f"the model was called {len(outcome.main)} times"
    assert seen[t.breaker] is None, "the stopped call's result must never reach the model"
    assert outcome.executions == t.critical, "blocked calls must not run"
    assert final(outcome)["terminal_reason"] == "hook_stopped"


def test_no_progress_loop_warns_blocks_and_stops_at_the_configured_calls(ws: Workspace) -> None:
    """With the default config the identical Bash loop is warned, blocked, then stopped."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 5)])
    check_no_progress_loop(ws, outcome)


@pytest.mark.parametrize("attempt", range(3))
def test_stop_ends_the_run_every_time(ws: Workspace, attempt: int) -> None:
    """Defect 0 was intermittent: the same loop must end with hook_stopped on every run."""
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 5)])
    check_no_progress_loop(ws, outcome)


def test_stop_is_shown_to_the_user_in_text_mode(ws: Workspace) -> None:
    """In ``claude -p`` text mode the user sees the stop reason on stderr (from the
    SessionEnd hook, the only hook output Claude Code prints there)."""
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 5)], text_mode=True)
    run = outcome.runs[-1]
    assert outcome.executions == ws.thresholds().critical
    assert classify(run.stderr) == "stop", (run.stdout, run.stderr)
    assert "loopwarden hook" not in outcome.text()
    # onStop answer (the default in -p): the summary, with the run's tokens (SessionEnd
    # reads them from the transcript).
    assert SUMMARY.search(run.stderr), run.stderr
    tokens = TOKENS_PER_ANSWER * len(outcome.main)
    assert f"were not run. It had used {tokens:,} tokens.\n" in run.stderr, run.stderr


def test_stop_is_shown_to_the_user_in_stream_json(ws: Workspace) -> None:
    """In stream-json output the stop reason comes as a system message, and the run
    ends with ``terminal_reason: hook_stopped``."""
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 5)])
    notices = [
        e.get("content", "")
        for e in outcome.runs[-1].events()
        if e.get("type") == "system" and e.get("subtype") == "informational"
    ]
    assert [classify(n) for n in notices] == ["stop"], notices
    assert SUMMARY.search(notices[0]), notices
    assert final(outcome)["terminal_reason"] == "hook_stopped"


def test_auto_compaction_then_the_same_loop_is_aborted(ws: Workspace) -> None:
    """After an automatic compaction, repeating the same call ends the run within the window."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(2), PROMPT_TOO_LONG, ws.poll(t.window + 5)])
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    boundary = [e for e in outcome.runs[-1].events() if e.get("subtype") == "compact_boundary"]
    assert boundary and boundary[0]["compact_metadata"]["trigger"] == "auto"
    assert outcome.executions == 2 + t.window
    assert len(outcome.main) == 3 + t.window
    assert final(outcome)["terminal_reason"] == "hook_stopped"


def manual_compaction(ws: Workspace, steps_after: int) -> Outcome:
    """Poll, ``/compact`` the session, then a new prompt that polls the same way."""
    steps = [ws.poll(2), {"text": "Still pending."}, ws.poll(steps_after)]
    prompts = ["Poll job 42.", "/compact", "Poll job 42 again."]
    outcome = ws.run(steps, prompts)
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    return outcome


def test_manual_compaction_then_a_new_prompt_is_guarded(ws: Workspace) -> None:
    """After ``/compact``, the next prompt's identical calls are aborted within the window."""
    t = ws.thresholds()
    outcome = manual_compaction(ws, t.window + 5)
    assert outcome.executions == 2 + t.window
    assert final(outcome)["terminal_reason"] == "hook_stopped"


def test_compaction_never_shows_the_hook_command_to_the_model(ws: Workspace) -> None:
    """No request the model receives around a ``/compact`` contains the hook's command line."""
    outcome = manual_compaction(ws, 3)
    assert "loopwarden hook" not in outcome.text()


def test_loop_on_a_missing_tool_is_noted_and_stopped(ws: Workspace) -> None:
    """Repeated calls of a tool that does not exist (PostToolBatch reports them): a note
    with each miss's result from past the unknown-tool threshold, then the run ends."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    stop = max(t.breaker, t.unknown) + 1
    outcome = ws.run([{**MISSING_TOOL, "repeat": stop + 5}])
    seen = kinds(outcome)
    assert seen[: t.unknown] == [None] * t.unknown
    assert seen[t.unknown : stop - 1] == ["miss"] * (stop - 1 - t.unknown), seen
    assert len(outcome.main) == stop, "the model must not be called after the stop"
    assert final(outcome)["terminal_reason"] == "hook_stopped"


def misses_then_real_calls(ws: Workspace) -> Outcome:
    """``unknownToolThreshold + 2`` misses in a row, then real calls (whose hooks read them)."""
    # Repeat thresholds far above the misses: only the unknown-tool guard can speak.
    ws.write_config({**SMALL, "warningThreshold": 20, "criticalThreshold": 25,
                     "globalCircuitBreakerThreshold": 30})  # fmt: skip
    misses = ws.thresholds().unknown + 2
    return ws.run([{**MISSING_TOOL, "repeat": misses}, ws.progress(3)])


def test_each_missing_tool_call_is_counted_once(ws: Workspace) -> None:
    """Each note about the missing tool counts exactly the misses the model made so far."""
    outcome = misses_then_real_calls(ws)
    t = ws.thresholds()
    misses = t.unknown + 2
    notes = [s.everything for s in outcome.results()[:misses] if s is not None]
    counts = [int(n) for note in notes for n in re.findall(r"has been called (\d+) times", note)]
    assert counts == list(range(t.unknown + 1, misses + 1)), counts
    assert "alternate between NoSuchTool and NoSuchTool" not in outcome.text()


def test_missing_tool_notes_describe_what_happened(ws: Workspace) -> None:
    """Notes about a missing tool come with that tool's own results, name it as the
    model did, and never claim that a call was blocked."""
    outcome = misses_then_real_calls(ws)
    assert outcome.executions == 3
    for shown in outcome.results():
        if shown is None:
            continue
        assert "blocked this call" not in shown.everything, shown.everything
        if "No such tool" not in shown.text:
            assert classify(shown.everything) is None, shown.everything
    assert "'NoSuchTool'" in outcome.text()
    assert "'nosuchtool'" not in outcome.text()


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A repeated call whose output changes every time is never blocked or stopped."""
    outcome = check_progressing_loop(ws, ws.thresholds().stop + 5)
    assert final(outcome)["terminal_reason"] == "completed"


def test_the_users_own_hook_is_kept_and_still_runs(ws: Workspace) -> None:
    """install adds loopwarden next to the user's PreToolUse hook, which keeps firing."""
    check_users_hook_kept(ws, "PreToolUse")


def test_uninstall_gives_back_the_file_byte_for_byte(ws: Workspace) -> None:
    """install, a session, then uninstall leave the user's settings file as it was."""
    check_uninstall_restores(ws, ws.poll(2))


@pytest.mark.parametrize("before", LOOP_THROUGH_COMPACTION)
def test_a_loop_through_auto_compaction_ends_with_the_compaction_abort(
    ws: Workspace, before: int
) -> None:
    """The same call ``before`` times, an automatic compaction, then more of it, with the
    default config (every rule on): the turn ends with the post-compaction abort, no later
    than the guard alone would end it, and never with another rule's stop."""
    t = ws.thresholds()
    outcome = ws.run([ws.poll(before), PROMPT_TOO_LONG, ws.poll(t.window + 8)])
    check_ended_by_the_compaction_abort(ws, outcome, before)
    # The guard alone: window calls after the compaction, the last one's batch ends the turn.
    assert len(outcome.main) <= before + 1 + t.window
    result = final(outcome)
    assert result["terminal_reason"] == "hook_stopped"
    notices = [
        e.get("content", "")
        for e in outcome.runs[-1].events()
        if e.get("type") == "system" and e.get("subtype") == "informational"
    ]
    assert [classify(n) for n in notices] == ["stop"], notices
    assert "compaction" in notices[0], notices


def informational(outcome: Outcome) -> list[str]:
    """The ``system`` notices of the last run's stream-json output."""
    return [
        e.get("content", "")
        for e in outcome.runs[-1].events()
        if e.get("type") == "system" and e.get("subtype") == "informational"
    ]


def test_the_hooks_are_http_hooks(ws: Workspace) -> None:
    """The default install hooks the tool calls over HTTP: no hook process runs for a tool
    call, and the helper's answers still reach the model."""
    hooks = json.loads(ws.settings.read_text())["hooks"]
    assert [h["type"] for g in hooks["PreToolUse"] for h in g["hooks"]] == ["command", "http"]
    assert [h["type"] for g in hooks["PostToolBatch"] for h in g["hooks"]] == ["http"]
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 5)])
    check_no_progress_loop(ws, outcome)


def test_command_hooks_still_work(ws: Workspace) -> None:
    """``install --command`` (the project default) replaces the HTTP hooks by command hooks,
    with the same warnings, blocks and stop."""
    ws.install("--command")
    assert '"type": "http"' not in ws.settings.read_text()
    ws.write_config(SMALL)
    outcome = ws.run([ws.poll(ws.thresholds().stop + 5)])
    check_no_progress_loop(ws, outcome)
    notices = [e.get("content", "") for e in outcome.runs[-1].events() if e.get("type") == "system"]
    assert any(SUMMARY.search(n) for n in notices), notices  # onStop answer's summary


def test_without_a_helper_every_call_runs_and_the_user_is_told(ws: Workspace) -> None:
    """With the hook helper switched off nothing answers the HTTP hooks: Claude Code runs
    every call (the hooks fail open), and the prompt's hook tells the user why."""
    ws.environment["LOOPWARDEN_HOOK_DAEMON"] = "0"
    ws.write_config(SMALL)
    calls = ws.thresholds().stop + 2
    outcome = ws.run([ws.poll(calls)])
    assert outcome.executions == calls
    assert set(kinds(outcome)) == {None}  # no warning, block or stop reached the model
    assert final(outcome)["terminal_reason"] == "completed"
    notices = informational(outcome)
    assert any("helper is switched off" in n and "not checked" in n for n in notices), notices
    assert any("didn't check this action" in n for n in notices), notices


def test_a_refused_key_fails_open(ws: Workspace) -> None:
    """A key the helper refuses (401) leaves Claude Code running every call, unchecked."""
    path = ws.settings
    key = json.loads(path.read_text())["hooks"]["PostToolBatch"][0]["hooks"][0]["headers"]
    path.write_text(path.read_text().replace(key["X-Loopwarden-Token"], "0" * 64))
    ws.write_config(SMALL)
    calls = ws.thresholds().stop + 2
    outcome = ws.run([ws.poll(calls)])
    assert outcome.executions == calls
    assert final(outcome)["terminal_reason"] == "completed"
    assert any("didn't check this action" in n for n in informational(outcome))


def tool_result(request: dict[str, Any]) -> dict[str, Any]:
    """The last tool result of a main request (what the model got for its last call)."""
    for message in reversed(request["body"]["messages"]):
        content = message.get("content")
        if isinstance(content, list):
            found = [c for c in content if c.get("type") == "tool_result"]
            if found:
                return found[-1]
    raise AssertionError("no tool result in the request")


def test_ask_in_an_interactive_session(ws: Workspace) -> None:
    """In an interactive session (tmux) the stopped call is put to the person in Claude
    Code's permission prompt: "Yes" runs it once (its result reaches the model), "No" with
    a note lets the run go on with the note, Esc ends the turn with the run stopped."""
    from .tmux import Session, need_tmux, trust_workspace

    need_tmux()
    ws.write_config(SMALL)
    trust_workspace(ws, "sk-ant-e2e")
    t = ws.thresholds()
    answer = "I will read the status file instead."
    steps = [ws.poll(t.stop + 1), {"text": answer}, ws.poll(t.stop)]
    model = [
        "--model",
        "claude-sonnet-4-6",
        "--permission-mode",
        "default",
        "--allowedTools",
        "Bash",
    ]
    session = Session(ws, steps, [*model, "--", "Poll job 42 until it is done."], "done")
    try:
        screen = session.wait_for("requires confirmation")
        assert "loopwarden stopped this run (rule " in screen, screen
        assert len(session.requests()) == t.stop
        assert ws.stored_stops() != []
        session.keys("1")  # Yes: the call runs once, and the next repeat is asked again
        wait_until(lambda: len(session.requests()) == t.stop + 1, 60, what="the next request")
        ran = tool_result(session.requests()[-1])
        assert ran.get("is_error") is not True and "pending" in json.dumps(ran), ran
        wait_until(ws.stored_stops, 60, what="the next repeat stopped (and asked) again")
        session.wait_for("requires confirmation")
        session.keys("Down")  # No, with a note (Tab to amend)
        session.keys("Tab")
        session.wait_for("tell Claude what to do differently")
        session.keys("read the status file instead", literal=True)
        session.keys("Enter")
        session.wait_for(answer)
        seen = json.dumps(tool_result(session.requests()[-1]))
        assert "read the status file instead" in seen, seen
        assert "the user decided the run should go on" in seen, seen
        assert ws.stored_stops() == []  # the run went on
        assert len(session.requests()) == t.stop + 2
        ran_before = len(ws.count_file.read_text().splitlines())
        assert ran_before == t.critical + 1  # the call allowed once; none refused ran
        session.keys("Poll it again.", literal=True)  # a new prompt: a new run
        session.keys("Enter")
        session.wait_for("requires confirmation")
        session.keys("Escape")  # the turn ends; the run stays stopped
        session.wait_for("Interrupted")
        assert len(session.requests()) == 2 * t.stop + 2
        assert len(ws.count_file.read_text().splitlines()) == ran_before + t.critical
        assert ws.stored_stops() == ["global_circuit_breaker"]
    finally:
        session.close()
