"""``loopwarden hook copilot`` and ``loopwarden hook qwen`` with the events the real CLIs send.

The events below are the ones GitHub Copilot CLI 1.0.102 and Qwen Code 0.24.4
sent to a capturing hook (tests/e2e runs both CLIs with loopwarden installed);
only paths, ids and timestamps are shortened. Thresholds: the shared small
config (warn after 2 identical calls, block at the 4th, stop at the 5th).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.hooks.conftest import LAUNCHER, Hook
from tests.hooks.test_doctor import doctor
from tests.hooks.test_install import install

pytestmark = pytest.mark.usefixtures("small_config")

COPILOT_EVENTS = [
    "preToolUse",
    "postToolUse",
    "postToolUseFailure",
    "preCompact",
    "userPromptSubmitted",
]
COPILOT_STOP = "No tool call will run again in this turn"

# -- GitHub Copilot CLI: camelCase fields, no event name, no call or prompt ids ------------
CP_SESSION = "7bba2a95-c115-47d1-9365-959b2049e2f6"
CP_ARGS = {"command": "echo pending", "description": "check job 42"}


def cp_base(session: str = CP_SESSION) -> dict[str, Any]:
    return {"sessionId": session, "timestamp": 1796233046989, "cwd": "/work/project"}


def cp_prompt(text: str = "Poll job 42 until it is done.", at: int = 0) -> dict[str, Any]:
    """A user prompt; its timestamp (milliseconds) names the run it starts."""
    return {**cp_base(), "timestamp": 1796233046897 + at, "prompt": text}


def cp_pre(tool: str = "bash", args: Any = None) -> dict[str, Any]:
    return {**cp_base(), "toolName": tool, "toolArgs": CP_ARGS if args is None else args}


def cp_post(shell_id: int, text: str = "pending") -> dict[str, Any]:
    """A bash result: Copilot numbers every shell it starts, so the id changes each run."""
    result = f"{text}\n<shellId: {shell_id} completed with exit code 0>"
    return {**cp_pre(), "toolResult": {"resultType": "success", "textResultForLlm": result}}


def cp_missing(tool: str = "no_such_tool") -> dict[str, Any]:
    return {**cp_pre(tool, {"job": 42}), "error": f"Tool '{tool}' does not exist."}


def cp_compact() -> dict[str, Any]:
    path = f"/home/u/.copilot/session-state/{CP_SESSION}/events.jsonl"
    return {**cp_base(), "transcriptPath": path, "trigger": "auto", "customInstructions": ""}


class Copilot:
    """``loopwarden hook copilot --event NAME``, as the installed command runs it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.hook = Hook(env, "copilot")

    def __call__(self, event_name: str, event: dict[str, Any]) -> Any:
        answer = self.hook(event, "--event", event_name)
        assert answer.code == 0, answer.stderr
        return answer.json


class TestCopilot:
    def test_warn_block_stop_and_a_new_prompt_is_a_new_run(self, hook_env: dict[str, str]) -> None:
        """The shell id does not hide the loop; the warning rides on postToolUse, the block
        and the stop are denials, the stop holds for every later call until the next prompt."""
        hook = Copilot(hook_env)
        assert hook("userPromptSubmitted", cp_prompt()) == {}
        answers = []
        for n in range(3):
            answers.append(hook("preToolUse", cp_pre()))
            answers.append(hook("postToolUse", cp_post(n)))
        assert answers[:5] == [{}] * 5
        assert set(answers[5]) == {"additionalContext"}
        assert answers[5]["additionalContext"].startswith("WARNING: bash has been called")
        block = hook("preToolUse", cp_pre())
        assert block["permissionDecision"] == "deny"
        assert "loopwarden blocked this call" in block["permissionDecisionReason"]
        stop = hook("preToolUse", cp_pre())
        assert stop["permissionDecision"] == "deny"
        assert "stopped this run" in stop["permissionDecisionReason"]
        # A hook cannot end a Copilot turn: the stop denies every later call of the run,
        # whatever it is, and says so to the model.
        assert COPILOT_STOP in stop["permissionDecisionReason"]
        later = hook("preToolUse", cp_pre(args={"command": "ls"}))
        assert later["permissionDecision"] == "deny"
        first = stop["permissionDecisionReason"].split("\n\n")[0]
        assert later["permissionDecisionReason"].split("\n\n")[0] == first
        assert hook("userPromptSubmitted", cp_prompt("Try again.", at=60000)) == {}
        assert hook("preToolUse", cp_pre()) == {}

    def test_a_missing_tool_is_denied_by_name(self, hook_env: dict[str, str]) -> None:
        """A missing tool fires preToolUse and postToolUseFailure: past the unknown-tool
        threshold its calls are denied with a reason naming the tool."""
        hook = Copilot(hook_env)
        hook("userPromptSubmitted", cp_prompt())
        answers = []
        for _ in range(4):
            answers.append(hook("preToolUse", cp_pre("no_such_tool", {"job": 42})))
            if answers[-1] == {}:
                hook("postToolUseFailure", cp_missing())
        assert answers[:2] == [{}, {}]
        denied = answers[2]
        assert denied["permissionDecision"] == "deny"
        assert "no_such_tool" in denied["permissionDecisionReason"]

    def test_pre_compact_arms_the_guard_and_its_abort_holds(self, hook_env: dict[str, str]) -> None:
        """After preCompact the same call with the same result, three times, ends the run:
        the third result carries the abort and every later call is denied."""
        hook = Copilot(hook_env)
        hook("userPromptSubmitted", cp_prompt())
        hook("preToolUse", cp_pre())
        hook("postToolUse", cp_post(0, "1"))
        assert hook("preCompact", cp_compact()) == {}
        answers = []
        for n in range(1, 4):
            hook("preToolUse", cp_pre())
            answers.append(hook("postToolUse", cp_post(n)))
        abort = answers[-1]["additionalContext"]
        assert "compaction" in abort and COPILOT_STOP in abort
        later = hook("preToolUse", cp_pre())
        assert later["permissionDecision"] == "deny"
        assert "compaction" in later["permissionDecisionReason"]

    def test_a_failed_call_counts_as_a_failure(self, hook_env: dict[str, str]) -> None:
        """A result Copilot marks as failed is an error outcome (no warning of its own)."""
        hook = Copilot(hook_env)
        hook("userPromptSubmitted", cp_prompt())
        hook("preToolUse", cp_pre())
        failed = {**cp_pre(), "toolResult": {"resultType": "failure", "textResultForLlm": ""}}
        assert hook("postToolUse", failed) == {}

    def test_bad_events_are_allowed(self, hook_env: dict[str, str]) -> None:
        """An event that is not JSON, or has no tool, is allowed with a note on stderr."""
        hook = Hook(hook_env, "copilot")
        for payload in (b"garbage", json.dumps(cp_base()).encode()):
            answer = hook(payload, "--event", "preToolUse")
            assert (answer.code, answer.json) == (0, {}), answer.stderr
            assert "allowed" in answer.stderr

    def test_install_writes_a_file_of_its_own(self, hook_env: dict[str, str]) -> None:
        """install adds loopwarden.json to Copilot's hooks folder, next to the user's own
        hooks file (untouched); each command names its event and never fails the call;
        uninstall leaves the folder as it was."""
        folder = Path(hook_env["HOME"]) / ".copilot" / "hooks"
        folder.mkdir(parents=True)
        theirs = folder / "audit.json"
        theirs.write_text('{"version": 1, "hooks": {"preToolUse": []}}')
        done = install(hook_env, "copilot")
        assert done.returncode == 0, done.stderr
        data = json.loads((folder / "loopwarden.json").read_text())
        assert data["version"] == 1
        assert list(data["hooks"]) == COPILOT_EVENTS
        for event, entries in data["hooks"].items():
            [entry] = entries
            assert set(entry) == {"type", "bash", "timeoutSec"}
            assert (entry["type"], entry["timeoutSec"]) == ("command", 30)
            words = shlex.split(entry["bash"])
            assert words == [*LAUNCHER, "copilot", "--event", event, "||", "true"]
        # Copilot denies a call whose hook exits non-zero: the command cannot.
        broken = data["hooks"]["preToolUse"][0]["bash"].replace(LAUNCHER[0], "/nonexistent/py")
        ran = subprocess.run(["bash", "-c", broken], input=b"{}", capture_output=True, check=False)
        assert ran.returncode == 0
        assert install(hook_env, "copilot").returncode == 0  # again: nothing changes
        assert sorted(p.name for p in folder.iterdir()) == ["audit.json", "loopwarden.json"]
        assert install(hook_env, "copilot", "--uninstall").returncode == 0
        assert [p.name for p in folder.iterdir()] == ["audit.json"]
        assert theirs.read_text() == '{"version": 1, "hooks": {"preToolUse": []}}'

    def test_copilot_home_and_project_scope(self, hook_env: dict[str, str], tmp_path: Path) -> None:
        """$COPILOT_HOME moves the user folder; --project writes .github/hooks/."""
        env = {**hook_env, "COPILOT_HOME": str(tmp_path / "copilot-home")}
        assert install(env, "copilot").returncode == 0
        assert (tmp_path / "copilot-home" / "hooks" / "loopwarden.json").exists()
        project = tmp_path / "project"
        project.mkdir()
        assert install(env, "copilot", "--project", cwd=project).returncode == 0
        assert (project / ".github" / "hooks" / "loopwarden.json").exists()

    def test_doctor_runs_a_test_call(self, hook_env: dict[str, str], tmp_path: Path) -> None:
        install(hook_env, "copilot")
        done = doctor(hook_env, "--agent", "copilot", cwd=tmp_path)
        assert "[ok] test preToolUse event allowed" in done.stdout, done.stdout


# -- Qwen Code: Claude Code's events; prompt_id is the turn; tool_call_id the model's id ----
QW_SESSION = "96cc0c04-0c2b-4bb3-bc66-cb2254c379d4"
QW_TURN = f"{QW_SESSION}########0"
QW_MISSING = (
    'Tool "no_such_tool" not found in registry. Tools must use the exact names that are '
    'registered. Did you mean one of: "get_goal", "update_goal", "tool_call"?'
)


def qw_base(name: str, turn: str = QW_TURN) -> dict[str, Any]:
    return {
        "session_id": QW_SESSION,
        "transcript_path": f"/home/u/.qwen/projects/-work/chats/{QW_SESSION}.jsonl",
        "cwd": "/work/project",
        "hook_event_name": name,
        "timestamp": "2026-12-02T17:37:20.822Z",
        "permission_mode": "yolo",
        "prompt_id": turn,
    }


def qw_prompt(text: str, turn: str = QW_TURN) -> dict[str, Any]:
    """Qwen fires UserPromptSubmit for the user's prompt, then again (empty prompt, same
    prompt_id) before every later model request of the turn."""
    event = {**qw_base("UserPromptSubmit", turn), "prompt": text}
    return {**event, "submitted_prompt": text} if text else event


def qw_pre(n: int, command: str = "echo pending", turn: str = QW_TURN) -> dict[str, Any]:
    return {
        **qw_base("PreToolUse", turn),
        "tool_name": "run_shell_command",
        "tool_input": {"command": command},
        "tool_use_id": f"toolu_17962330408{n:02d}_96ztnr51r",  # Qwen's own id
        "tool_call_id": f"call_{n:04d}",  # the model's, the one PostToolBatch reports
    }


def qw_shell(n: int, command: str = "echo pending", turn: str = QW_TURN) -> dict[str, Any]:
    """A PostToolBatch with one shell call; the process group id changes every run."""
    output = (
        f"Command: {command}\nDirectory: (root)\nOutput: pending\nError: (none)\n"
        f"Exit Code: 0\nSignal: (none)\nProcess Group PGID: {4100 + n}"
    )
    part = {"functionResponse": {"id": f"call_{n:04d}", "name": "run_shell_command",
                                 "response": {"output": output}}}  # fmt: skip
    call = {
        "tool_name": "run_shell_command",
        "tool_input": {"command": command},
        "tool_use_id": f"call_{n:04d}",
        "tool_call_id": f"call_{n:04d}",
        "status": "success",
        "tool_response": {
            "response_parts": [part],
            "result_display": "pending",
            "execution_status": "success",
            "content_length": 176,
        },
    }
    return {**qw_base("PostToolBatch", turn), "tool_calls": [call]}


def qw_missing(n: int) -> dict[str, Any]:
    response = {"error": QW_MISSING}
    part = {
        "functionResponse": {"id": f"call_{n:04d}", "name": "no_such_tool", "response": response}
    }
    call = {
        "tool_name": "no_such_tool",
        "tool_input": {"job": 42},
        "tool_use_id": f"call_{n:04d}",
        "tool_call_id": f"call_{n:04d}",
        "status": "error",
        "tool_response": {
            "response_parts": [part],
            "result_display": QW_MISSING,
            "error": QW_MISSING,
            "error_type": "tool_not_registered",
            "execution_status": "not_started",
            "content_length": 155,
        },
    }
    return {**qw_base("PostToolBatch"), "tool_calls": [call]}


def qw_compact() -> dict[str, Any]:
    summary = "<state_snapshot>The user asked to poll job 42.</state_snapshot>"
    return {**qw_base("PostCompact"), "trigger": "auto", "compact_summary": summary}


class Qwen:
    def __init__(self, env: dict[str, str]) -> None:
        self.hook = Hook(env, "qwen")

    def __call__(self, event: dict[str, Any]) -> Any:
        answer = self.hook(event)
        assert answer.code == 0, answer.stderr
        return answer.json


def context(answer: Any) -> str:
    return str(answer["hookSpecificOutput"]["additionalContext"])


def decision(answer: Any) -> tuple[str, str]:
    out = answer["hookSpecificOutput"]
    return out["permissionDecision"], out["permissionDecisionReason"]


class TestQwen:
    def test_warn_block_stop_ends_the_turn(self, hook_env: dict[str, str]) -> None:
        """The process group id does not hide the loop; the warning rides on PostToolBatch,
        the block and the stop deny PreToolUse, and the turn's next UserPromptSubmit is
        blocked (Qwen ends the turn); a new prompt is a new run."""
        hook = Qwen(hook_env)
        assert hook(qw_prompt("Poll job 42 until it is done.")) == {}
        answers = []
        for n in range(1, 4):
            answers.append(hook(qw_pre(n)))
            answers.append(hook(qw_shell(n)))
            answers.append(hook(qw_prompt("")))
        assert answers[:7] == [{}] * 7
        assert context(answers[7]).startswith("WARNING: run_shell_command has been called")
        assert answers[8] == {}  # a warning does not end the turn
        kind, reason = decision(hook(qw_pre(4)))
        assert (kind, "loopwarden blocked this call" in reason) == ("deny", True)
        assert hook(qw_prompt("")) == {}  # a block does not end the turn either
        kind, reason = decision(hook(qw_pre(5)))
        assert (kind, "stopped this run" in reason) == ("deny", True)
        assert hook(qw_prompt("")) == {"decision": "block", "reason": reason}
        # Every outcome was paired with its call through tool_call_id, the PGID scrubbed.
        records = list(hook.hook.state(QW_SESSION, QW_TURN).window)
        assert len(records) == 5 and len({r.result_hash for r in records[:3]}) == 1
        assert records[0].result_hash is not None
        # The user's next prompt has the next prompt_id: a run of its own.
        turn = f"{QW_SESSION}########1"
        assert hook(qw_prompt("Try again.", turn)) == {}
        assert hook(qw_pre(6, turn=turn)) == {}

    def test_a_missing_tool_is_noted_then_ends_the_turn(self, hook_env: dict[str, str]) -> None:
        """Calls of a missing tool fire no PreToolUse in Qwen; PostToolBatch reports them:
        past the unknown-tool threshold the model is told, at the stop the turn ends."""
        hook = Qwen(hook_env)
        hook(qw_prompt("Poll job 42."))
        notes, turns = [], []
        for n in range(1, 6):
            notes.append(hook(qw_missing(n)))
            turns.append(hook(qw_prompt("")))
        assert notes[:2] == [{}, {}]
        assert "there is no tool named 'no_such_tool'" in context(notes[2])
        assert turns[:4] == [{}] * 4  # notes do not end the turn
        assert turns[4]["decision"] == "block"
        assert "stopped this run" in turns[4]["reason"] and "no_such_tool" in turns[4]["reason"]

    def test_post_compact_arms_the_guard(self, hook_env: dict[str, str]) -> None:
        """PostCompact arms the post-compaction guard; the same call three times after it
        ends the turn with the compaction abort."""
        hook = Qwen(hook_env)
        hook(qw_prompt("Poll job 42."))
        hook(qw_pre(1, "wc -l log"))
        hook(qw_shell(1, "wc -l log"))
        assert hook(qw_compact()) == {}
        assert hook.hook.state(QW_SESSION, QW_TURN).guard.remaining_attempts == 3
        for n in range(2, 5):
            hook(qw_pre(n))
            hook(qw_shell(n))
        turn = hook(qw_prompt(""))
        assert turn["decision"] == "block" and "compaction" in turn["reason"]

    def test_install_keeps_the_users_settings_byte_for_byte(
        self, hook_env: dict[str, str], tmp_path: Path
    ) -> None:
        """install merges into the settings.json Qwen migrated ("$version": 4) next to the
        user's hook; uninstall gives the bytes back; $QWEN_HOME moves the file."""
        env = {**hook_env, "QWEN_HOME": str(tmp_path / "qwen-home")}
        path = tmp_path / "qwen-home" / "settings.json"
        path.parent.mkdir()
        user = {"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "a"}]}
        original = json.dumps({"hooks": {"PreToolUse": [user]}, "$version": 4}, indent=4)
        path.write_text(original)
        assert install(env, "qwen").returncode == 0
        data = json.loads(path.read_text())
        assert list(data["hooks"]) == [
            "PreToolUse",
            "PostToolBatch",
            "PostCompact",
            "UserPromptSubmit",
        ]
        assert data["hooks"]["PreToolUse"][0] == user
        [ours] = data["hooks"]["PreToolUse"][1]["hooks"]
        assert ours["timeout"] == 30  # seconds: Qwen reads 1000 and more as milliseconds
        assert install(env, "qwen", "--uninstall").returncode == 0
        assert path.read_text() == original

    def test_doctor_runs_a_test_call(self, hook_env: dict[str, str], tmp_path: Path) -> None:
        install(hook_env, "qwen")
        done = doctor(hook_env, "--agent", "qwen", cwd=tmp_path)
        assert "[ok] test PreToolUse event allowed" in done.stdout, done.stdout
