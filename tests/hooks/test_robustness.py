"""Bad input, broken state and concurrency: the hook never breaks the agent."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from tests.hooks import payloads as p
from tests.hooks.conftest import LOOPWARDEN, SMALL, Hook
from tests.stores.test_sqlite import unwritable

BAD_EVENTS = [
    pytest.param(b"", "not JSON", id="empty"),
    pytest.param(b"{not json", "not JSON", id="garbage"),
    pytest.param(b"\xff\xfe\x00", "not JSON", id="binary"),
    pytest.param(b"[1, 2]", "not an object", id="array"),
    pytest.param(
        b'{"hook_event_name": "PreToolUse", "tool_name": "Bash"}',
        "without session_id",
        id="no-session",
    ),
    pytest.param(
        b'{"hook_event_name": "PreToolUse", "session_id": "s"}', "without tool_name", id="no-tool"
    ),
    pytest.param(
        b'{"hook_event_name": "PostToolUse", "session_id": "s", "tool_name": "Bash"}',
        "without tool_response",
        id="no-response",
    ),
    pytest.param(b'{"hook_event_name": "Notification", "session_id": "s"}', None, id="other-event"),
    pytest.param(b'{"hook_event_name": 7, "session_id": "s"}', None, id="odd-event-name"),
    pytest.param(
        orjson.dumps({**p.claude_pre(1), "tool_input": {"deep": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]}}),
        None,
        id="nested-params",
    ),
]


@pytest.mark.parametrize(("payload", "problem"), BAD_EVENTS)
def test_bad_events_are_allowed(hook_env: dict[str, str], payload: bytes, problem: str) -> None:
    """Events that are not JSON objects or lack fields are allowed, with problems on stderr only."""
    answer = Hook(hook_env, "claude-code")(payload)
    assert answer.code == 0
    assert answer.json == {}
    if problem is None:
        assert answer.stderr == ""
    else:
        assert problem in answer.stderr  # shown to the user, not the model


def test_bad_event_in_process(hook_env: dict[str, str]) -> None:
    """Without the helper a bad event is allowed too, and the problem goes to the hook log."""
    answer = Hook(hook_env, "codex")(b"{not json", daemon=False)
    assert (answer.code, answer.json) == (0, {})
    assert "not JSON" in answer.stderr
    log = Path(hook_env["HOME"]) / ".local" / "share" / "loopwarden" / "hook.log"
    assert "not JSON" in log.read_text()


def test_huge_result(hook_env: dict[str, str]) -> None:
    """A multi-megabyte tool result is hashed and recorded like any other."""
    hook = Hook(hook_env, "claude-code")
    big = {"stdout": "x" * 3_000_000, "stderr": "", "interrupted": False}
    assert hook(p.claude_pre(1)).json == {}
    assert hook(p.claude_post(1, big)).json == {}
    assert hook.state("1ec9a2f4-sess", "prompt-1").window.last.result_hash is not None


@pytest.mark.parametrize(
    ("argv", "code", "stdout", "stderr"),
    [
        (["hook", "cursor"], 1, b"", "invalid choice: 'cursor'"),
        (["hook"], 1, b"", "name the agent"),
        (["hook", "claude-code", "--bogus"], 1, b"", "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_never_exit_2(
    hook_env: dict[str, str], argv: list[str], code: int, stdout: bytes, stderr: str
) -> None:
    """Exit code 2 would make the agent block the call and show the command to the model."""
    done = subprocess.run(
        [str(LOOPWARDEN), *argv], input=b"{}", env=hook_env, capture_output=True, check=False
    )
    assert (done.returncode, done.stdout) == (code, stdout)
    assert stderr in done.stderr.decode()


def test_help(hook_env: dict[str, str]) -> None:
    """hook --help prints its options and exits 0."""
    done = subprocess.run(
        [str(LOOPWARDEN), "hook", "--help"], env=hook_env, capture_output=True, check=False
    )
    assert done.returncode == 0
    assert b"--no-daemon" in done.stdout and b"claude-code" in done.stdout


@pytest.mark.parametrize("daemon", [True, False], ids=["helper", "in-process"])
def test_corrupt_state_fails_open(hook_env: dict[str, str], tmp_path: Path, daemon: bool) -> None:
    """A corrupt state file allows the call (fail open) and says why on stderr."""
    db = tmp_path / "broken.db"
    db.write_bytes(b"this is no database " * 300)
    hook = Hook({**hook_env, "LOOPWARDEN_STATE": str(db)}, "claude-code")
    answer = hook(p.claude_pre(1), daemon=daemon)
    assert (answer.code, answer.json) == (0, {})
    assert str(db) in answer.stderr and "corrupt" in answer.stderr


def test_corrupt_state_fails_closed(hook_env: dict[str, str], tmp_path: Path) -> None:
    """With failMode closed a corrupt state file denies the call, still with exit 0."""
    db = tmp_path / "broken.db"
    db.write_bytes(b"this is no database " * 300)
    config = tmp_path / "closed.json"
    config.write_bytes(orjson.dumps({**SMALL, "loopwarden": {"failMode": "closed"}}))
    hook = Hook(hook_env, "claude-code", "--config", str(config), "--state", str(db))
    answer = hook(p.claude_pre(1))
    deny = answer.json["hookSpecificOutput"]
    assert deny["permissionDecision"] == "deny"
    assert "fail closed" in deny["permissionDecisionReason"]
    assert answer.code == 0


def test_unwritable_state_directory(hook_env: dict[str, str], tmp_path: Path) -> None:
    """A state directory that cannot be written allows the call and says so."""
    locked = tmp_path / "locked"
    hook = Hook({**hook_env, "LOOPWARDEN_STATE": f"sqlite://{locked}/state.db"}, "claude-code")
    with unwritable(locked):
        answer = hook(p.claude_pre(1))
    assert (answer.code, answer.json) == (0, {})
    assert "writable" in answer.stderr


def test_invalid_config_fails_open(hook_env: dict[str, str], tmp_path: Path) -> None:
    """An invalid config allows every call and names the problem with a suggestion."""
    config = tmp_path / "typo.json"
    config.write_text('{"tools": {"loopDetection": {"warningTreshold": 3}}}')
    answer = Hook(hook_env, "claude-code", "--config", str(config))(p.claude_pre(1))
    assert (answer.code, answer.json) == (0, {})
    assert "warningTreshold" in answer.stderr and "warningThreshold" in answer.stderr


@pytest.mark.usefixtures("small_config")
def test_parallel_hooks_count_every_call_once(hook_env: dict[str, str]) -> None:
    """Parallel tool calls: hook processes of one run at once, via the helper and not."""
    hook = Hook({**hook_env}, "claude-code")
    hook(p.claude_pre(0, command="warm up"))  # the helper is running from here on
    events = [(p.claude_pre(n, command=f"job {n}"), n % 4 != 0) for n in range(1, 13)]
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda e: hook(e[0], daemon=e[1]), events))
    assert all(a.code == 0 and a.json == {} for a in answers)
    records = list(hook.state("1ec9a2f4-sess", "prompt-1").window)
    ids = sorted(r.call_id for r in records)
    assert ids == sorted(f"toolu_{n:04d}" for n in range(13))
