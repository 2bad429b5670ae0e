"""Gemini CLI 0.61.0 with loopwarden's hook, against a scripted Gemini API.

The workspace switches Gemini's own loop detection off (it ends a run at the 5th
identical call, long before loopwarden's thresholds), except in the test that
checks how the two interact. ``read_file`` loops give identical results;
``run_shell_command`` results carry a PGID that changes every call. Outcomes,
misses and compressions are read by BeforeModel from the session transcript.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

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

AGENT = "gemini"
MISSING_TOOL = {"tool": "no_such_tool", "input": {"job": 42}}
# Compress once the last prompt reported 0.1% of the context window (about 1000 tokens).
COMPRESS_EARLY = {"model": {"compressionThreshold": 0.001}}


def read(ws: Workspace, repeat: int = 1, **extra: Any) -> dict[str, Any]:
    """A read_file call of the same unchanging file (identical result every time)."""
    path = ws.work / "job-42.txt"
    if not path.exists():
        path.write_text("job 42: pending\n")
    return {"tool": "read_file", "input": {"file_path": str(path)}, "repeat": repeat, **extra}


def stopped_by_hook(outcome: Outcome) -> list[str]:
    """The messages of Gemini's ``stop_execution`` errors in the stream-json output."""
    return [
        e["error"]["message"]
        for e in outcome.runs[-1].events()
        if isinstance(e.get("error"), dict) and e["error"].get("type") == "stop_execution"
    ]


def aborted(outcome: Outcome) -> bool:
    """The post-compaction guard ended the run (before the next model request: BeforeModel
    reads the outcomes, so stream-json shows no reason; the hook log has it)."""
    return "detector=compaction_loop_persisted" in outcome.hook_log


def compressed(outcome: Outcome) -> bool:
    """Gemini really rewrote the history: the first main request after a summary carries
    fewer contents than the one before it (a summary request alone may come to nothing)."""
    last: int | None = None
    summarized = False
    for request in outcome.requests:
        if request["kind"] == "summary":
            summarized = True
        elif request["kind"] == "main":
            size = len(request["body"].get("contents", []))
            if summarized and last is not None and size < last:
                return True
            last, summarized = size, False
    return False


def test_no_progress_loop_warns_blocks_and_stops_at_the_configured_calls(ws: Workspace) -> None:
    """With the default config an identical read_file loop is warned, blocked, then stopped."""
    t = ws.thresholds()
    outcome = ws.run([read(ws, t.stop + 5)])
    check_warn_then_block(ws, outcome)
    assert len(outcome.main) == t.stop
    assert [classify(m) for m in stopped_by_hook(outcome)] == ["stop"]


def test_shell_loop_is_blocked_and_stopped(ws: Workspace) -> None:
    """An identical shell command printing the same text is blocked, then stopped."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    outcome = ws.run([ws.poll(t.stop + 3)])
    check_warn_then_block(ws, outcome)
    assert outcome.executions == t.critical
    assert len(outcome.main) == t.stop


def test_a_fresh_session_is_not_aborted_as_if_after_compaction(ws: Workspace) -> None:
    """PreCompress fires before every request; without a compression no abort follows."""
    t = ws.thresholds()
    outcome = ws.run([read(ws, t.window + 3)])
    assert "stop" not in kinds(outcome)
    assert stopped_by_hook(outcome) == []
    assert len(outcome.main) == t.window + 4


def test_real_compression_then_the_same_loop_is_aborted(
    make_workspace: Callable[..., Workspace],
) -> None:
    """After Gemini really compresses the chat, repeating the same call ends the run."""
    ws = make_workspace(AGENT, **COMPRESS_EARLY)
    ws.install()
    t = ws.thresholds()
    # Gemini can only compress up to a user message: a second prompt, whose first
    # answer reports enough tokens to compress before the next request.
    steps = [
        read(ws, 2),
        {"text": "Still pending."},
        read(ws, 1, usage=5000),
        read(ws, t.window + 4),
    ]
    outcome = ws.run(steps, ["Poll job 42.", "Poll job 42 again."])
    assert sum(r["kind"] == "summary" for r in outcome.requests) >= 1, "no compression happened"
    assert compressed(outcome), "Gemini asked for a summary but kept the whole history"
    assert len(outcome.main) == 4 + t.window, "the model must not be called after the abort"
    assert aborted(outcome)


def test_manual_compress_then_the_same_loop_is_aborted(ws: Workspace) -> None:
    """``gemini -p /compress`` compresses (and, in 0.61, goes on with the model); the
    identical calls after it end the run within the window."""
    t = ws.thresholds()
    steps = [read(ws, 2), {"text": "Still pending."}, read(ws, t.window + 4)]
    outcome = ws.run(steps, ["Poll job 42.", "/compress"])
    assert sum(r["kind"] == "summary" for r in outcome.requests) >= 1, "no compression happened"
    assert len(outcome.main) == 3 + t.window, "the model must not be called after the abort"
    assert aborted(outcome)


def test_stop_is_shown_to_the_user_in_text_mode(ws: Workspace) -> None:
    """In text mode Gemini prints the hook's stop reason on stderr (exit code 0)."""
    ws.write_config(SMALL)
    outcome = ws.run([read(ws, ws.thresholds().stop + 3)], text_mode=True)
    run = outcome.runs[-1]
    assert run.code == 0
    assert classify(run.stderr) == "stop"
    # onStop answer: the stop's summary follows the rule's text.
    summary = "loopwarden stopped this run (rule global_circuit_breaker, tool read_file, count"
    assert summary in run.stderr, run.stderr[-1500:]
    # With the run's tokens from Gemini's session file (fakeapi: 100 per answer).
    tokens = re.search(r"It had used ([\d,]+) tokens\.", run.stderr)
    assert tokens is not None, run.stderr[-1500:]
    assert int(tokens[1].replace(",", "")) == 100 * len(outcome.main), run.stderr[-1500:]


GEMINI_IDENTICAL_CALLS = 5
"""Gemini CLI 0.61 ends a run when the model repeats one call this many times in a row."""


def test_geminis_own_loop_detection_ends_the_run_first(
    make_workspace: Callable[..., Workspace],
) -> None:
    """With its loop detection on, Gemini ends an identical loop before loopwarden speaks."""
    ws = make_workspace(AGENT, model={"disableLoopDetection": False})
    ws.install()
    t = ws.thresholds()
    outcome = ws.run([read(ws, t.stop + 5)])
    # Gemini ends the run at its 5th identical call: a request for each call, and one more.
    assert len(outcome.main) <= GEMINI_IDENTICAL_CALLS + 1 < t.stop
    assert not set(kinds(outcome)) - {None}


def test_loop_on_a_missing_tool_is_noted_and_stopped(ws: Workspace) -> None:
    """Calls of a tool that does not exist fire no tool hook; BeforeModel reads them from
    the transcript, tells the model past the unknown-tool threshold, and ends the run
    before the next request once they reach the circuit breaker (text mode: the reason
    is on stderr; stream-json shows no reason, only the end of the run)."""
    ws.write_config(SMALL)
    t = ws.thresholds()
    stop = max(t.breaker, t.unknown) + 1
    outcome = ws.run([{**MISSING_TOOL, "repeat": stop + 3}], text_mode=True)
    seen = kinds(outcome)
    assert seen[: t.unknown] == [None] * t.unknown, seen
    assert seen[t.unknown : stop - 1] == ["miss"] * (stop - 1 - t.unknown), seen
    assert len(outcome.main) == stop, "the model must not be called after the stop"
    assert classify(outcome.runs[-1].stderr) == "stop", outcome.runs[-1].stderr[-800:]


def test_progressing_loop_is_never_blocked(ws: Workspace) -> None:
    """A repeated shell call whose output changes every time is never blocked or stopped."""
    ws.write_config(SMALL)
    check_progressing_loop(ws, ws.thresholds().stop + 3)


def test_the_users_own_hook_is_kept_and_still_runs(ws: Workspace) -> None:
    """install adds loopwarden next to the user's BeforeTool hook, which keeps firing."""
    check_users_hook_kept(ws, "BeforeTool")


def test_uninstall_gives_back_the_file_byte_for_byte(
    make_workspace: Callable[..., Workspace],
) -> None:
    """A settings file with an empty hooks table survives install + uninstall unchanged."""
    ws = make_workspace(AGENT, hooks={})
    ws.install()
    check_uninstall_restores(ws, read(ws, 2))


@pytest.mark.parametrize("before", LOOP_THROUGH_COMPACTION)
def test_a_loop_through_real_compression_ends_with_the_compaction_abort(
    make_workspace: Callable[..., Workspace], before: int
) -> None:
    """The same shell call ``before`` times in one prompt (the last answer makes Gemini
    compress), then more of it, with loopwarden's default config (every rule on): the run
    ends with the post-compaction abort before another model request, no later than the
    guard alone would end it, and never with another rule's stop. (A shell call, so that
    its real executions are counted; the hook ignores the PGID that changes each time.)"""
    ws = make_workspace(AGENT, **COMPRESS_EARLY)
    ws.install()
    t = ws.thresholds()
    # The first prompt gives Gemini history to compress (and is a run of its own).
    steps = [
        read(ws, 2),
        {"text": "Still pending."},
        ws.poll(before - 1),
        ws.poll(1, usage=5000),
        ws.poll(t.window + 8),
    ]
    outcome = ws.run(steps, ["Poll job 42.", "Poll job 42 again."])
    assert compressed(outcome), "Gemini asked for a summary but kept the whole history"
    check_ended_by_the_compaction_abort(ws, outcome, before)
    assert aborted(outcome)
    # The guard alone: the window-th call after the compression is the last one made.
    assert len(outcome.main) <= 3 + before + t.window, "the model was called after the abort"
