"""What the hooks leave on disk: no raw arguments, and private files whoever creates them.

Issue 11, defects 2 and 3. The SQLite file is read as bytes (with its WAL and
shared-memory files), so a secret is found wherever SQLite put it.
"""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import orjson
import pytest

from tests.adversarial._procs import umask
from tests.adversarial.conftest import SMALL, claude_event, codex_event, hook, state_dir

pytestmark = pytest.mark.timeout(120)


def holding(directory: Path, secret: str) -> list[str]:
    """Files under ``directory`` (state.db, -wal, -shm, hook.log) whose bytes hold ``secret``."""
    needle = secret.encode()
    return [
        p.name for p in sorted(directory.rglob("*")) if p.is_file() and needle in p.read_bytes()
    ]


def claude_transcript(path: Path, secret: str) -> None:
    """A session whose last assistant turn asked for a tool that has no result yet."""
    records = [
        {
            "type": "user",
            "sessionId": "sess-claude",
            "uuid": "u1",
            "promptId": "prompt-1",
            "message": {"role": "user", "content": "deploy it"},
        },
        {
            "type": "assistant",
            "sessionId": "sess-claude",
            "uuid": "a1",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_0001",
                        "name": "Bash",
                        "input": {"command": f"curl -H 'Authorization: Bearer {secret}' x"},
                    }
                ],
            },
        },
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def codex_rollout(path: Path, secret: str) -> None:
    """A rollout whose last function call has no output yet."""
    arguments = orjson.dumps({"command": ["bash", "-lc", f"export TOKEN={secret}"]}).decode()
    records = [
        {"type": "session_meta", "payload": {"id": "sess-codex"}},
        {
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell",
                "arguments": arguments,
                "call_id": "call_1",
            },
        },
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


# Claude Code's transcript is not read since its PostToolBatch hook (issue 10).
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_unpaired_transcript_calls_leave_no_raw_arguments(
    hook_env: dict[str, str], tmp_path: Path, agent: str
) -> None:
    """A secret in a transcript's pending tool call never reaches state.db or its WAL."""
    secret = f"sk-live-{uuid.uuid4().hex}"
    path = tmp_path / "transcript.jsonl"
    if agent == "claude-code":
        claude_transcript(path, secret)
        event = claude_event("PreToolUse", 2, transcript=str(path))
    else:
        codex_rollout(path, secret)
        event = codex_event("PreToolUse", 2, transcript=str(path))
    answer = hook(hook_env, agent, event)
    assert answer.code == 0
    assert (state_dir(hook_env) / "state.db").exists()
    assert not holding(state_dir(hook_env), secret)


def modes(directory: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(directory.stat().st_mode)}
    for path in directory.iterdir():
        found[path.name] = stat.S_IMODE(path.stat().st_mode)
    return found


@pytest.mark.parametrize("order", ["log-first", "store-first"])
def test_state_dir_is_private(hook_env: dict[str, str], order: str) -> None:
    """The state directory is 0700 whether a log line or the store creates it first."""
    with umask(0o022):
        if order == "log-first":  # an event without session_id only logs a warning
            hook(hook_env, "claude-code", {"hook_event_name": "PreToolUse", "tool_name": "Bash"})
        hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert modes(state_dir(hook_env))["."] == 0o700


@pytest.mark.parametrize("order", ["log-first", "store-first"])
def test_state_files_are_private(hook_env: dict[str, str], order: str) -> None:
    """state.db, its WAL and shared-memory files and hook.log are 0600 under umask 022."""
    from tests.adversarial.conftest import write_config

    write_config(hook_env, SMALL)
    with umask(0o022):
        if order == "log-first":
            hook(hook_env, "claude-code", {"hook_event_name": "PreToolUse", "tool_name": "Bash"})
        for n in range(3):  # the third call warns: hook.log gets a line either way
            hook(hook_env, "claude-code", claude_event("PreToolUse", n))
            hook(
                hook_env,
                "claude-code",
                claude_event("PostToolUse", n, tool_response={"stdout": "same"}),
            )
    found = modes(state_dir(hook_env))
    assert {"state.db", "hook.log"} <= set(found)
    loose = {name: oct(mode) for name, mode in found.items() if name != "." and mode & 0o077}
    assert not loose, f"readable by others: {loose}"


def test_run_record_is_private(tmp_path: Path) -> None:
    """A run record (raw params when logParams is on) is created 0600, its new dir 0700."""
    import loopwarden as lw

    record = tmp_path / "records" / "run.jsonl"
    with umask(0o022):
        guard = lw.LoopGuard(SMALL, run_record=record, log_params=True)
        guard.run("r").before_call("tool", {"token": "x"})
        guard.close()
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700
