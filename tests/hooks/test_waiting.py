"""Waiting is not looping (issue 9), through ``loopwarden hook claude-code`` as a subprocess.

A session that waits for CI asks the same thing 19 times and gets the same
"running" answer, then success: with the defaults (``enabled: true``, every
extra detector on) nothing is blocked before OpenClaw's thresholds would block
it (the 21st identical call), while a spin of the same command is blocked early.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.hooks import payloads as p
from tests.hooks.conftest import Hook

ENABLED = {"tools": {"loopDetection": {"enabled": True}}}


@pytest.fixture(name="enabled_config")
def fixture_enabled_config(hook_env: dict[str, str]) -> Path:
    path = Path(hook_env["HOME"]) / ".config" / "loopwarden" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(orjson.dumps(ENABLED))
    return path


def session(hook: Hook, tool: str, command: str, outputs: list[str]) -> list[Any]:
    """One PreToolUse and one PostToolBatch per output; the PreToolUse answers."""
    answers: list[Any] = []
    for n, output in enumerate(outputs, start=1):
        event = p.claude_pre(n, tool=tool, command=command)
        pre = hook(event, daemon=False)
        assert pre.code == 0, pre.stderr
        answers.append(pre.json)
        if pre.json:
            break  # denied or stopped: the wait is over for this test
        batch = p.claude_batch([(n, tool, output)], command=command)
        batch["tool_calls"][0]["tool_input"] = event["tool_input"]  # the call as it was made
        post = hook(batch, daemon=False)
        assert post.code == 0, post.stderr
    return answers


WAIT = ["in_progress"] * 19 + ["completed: success"]


@pytest.mark.usefixtures("enabled_config")
@pytest.mark.parametrize(
    ("tool", "command"),
    [
        ("BashOutput", "bash_3"),  # Claude Code's poll of a background shell
        ("Bash", "sleep 30 && gh run view 4242 --json status -q .status"),
    ],
    ids=["BashOutput", "sleep"],
)
def test_a_19_poll_wait_is_never_blocked(hook_env: dict[str, str], tool: str, command: str) -> None:
    answers = session(Hook(hook_env, "claude-code"), tool, command, WAIT)
    assert len(answers) == 20
    assert all(a.get("hookSpecificOutput", {}).get("permissionDecision") != "deny" for a in answers)


@pytest.mark.usefixtures("enabled_config")
def test_a_spin_of_the_same_command_is_blocked_early(hook_env: dict[str, str]) -> None:
    answers = session(Hook(hook_env, "claude-code"), "Bash", "gh run view 4242", WAIT)
    assert len(answers) == 6  # calls 1-5 allowed, the 6th denied
    assert answers[-1]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "6 times in a row" in answers[-1]["hookSpecificOutput"]["permissionDecisionReason"]


@pytest.mark.usefixtures("enabled_config")
def test_a_poll_that_keeps_saying_running_gets_the_wait_wording(hook_env: dict[str, str]) -> None:
    """Polls of a running job (Claude Code's BashOutput) are warned with the wait wording,
    through the hook's own events: the job is still running, and how often it was polled."""
    hook = Hook(hook_env, "claude-code")
    notes: list[str] = []
    for n in range(1, 13):
        event = p.claude_pre(n, tool="BashOutput", command="bash_3")
        assert hook(event, daemon=False).json == {}
        batch = p.claude_batch([(n, "BashOutput", "status: running")], command="bash_3")
        batch["tool_calls"][0]["tool_input"] = event["tool_input"]
        answer = hook(batch, daemon=False).json
        notes += [answer["hookSpecificOutput"]["additionalContext"]] if answer else []
    assert notes, "no warning reached the model"
    assert notes[0].startswith("WARNING: the job is still running: BashOutput has been polled")
