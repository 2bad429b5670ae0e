"""A reader that goes away (``loopwarden ... | head -1``) never causes a traceback, anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopwarden.cli import COMMANDS, EXIT_BROKEN_PIPE

from .conftest import EXAMPLES, ROOT, _env

CONFIG = '{tools: {loopDetection: {enabled: true}}, agents: {list: [{id: "ops"}]}}\n'
EVENT = {
    "session_id": "pipes",
    "transcript_path": "",
    "cwd": str(ROOT),
    "hook_event_name": "PreToolUse",
    "tool_name": "Read",
    "tool_input": {"file_path": "a.py"},
    "prompt_id": "p1",
    "tool_use_id": "t1",
}

# Every command, and the output each one makes most of.
COMMAND_LINES = [
    ["-h"],
    ["--help"],
    ["--version"],
    ["help"],
    *([name, "--help"] for name in COMMANDS),
    ["config", "check", "--help"],
    ["demo", "--no-delay"],
    ["replay", str(EXAMPLES)],
    ["replay", str(EXAMPLES), "--format", "json"],
    ["replay", str(EXAMPLES), "--format", "html"],
    ["tune", str(EXAMPLES)],
    ["config", "check", "{config}"],
    ["config", "check", "{config}", "--format", "json"],
    ["hook", "claude-code", "--no-daemon", "--state", "{state}"],
    ["install", "claude-code", "--dry-run"],
    ["doctor"],
]


def _user_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment: stdout block-buffered (as without PYTHONUNBUFFERED), no helper."""
    env = _env({"HOME": str(tmp_path), "LOOPWARDEN_HOOK_DAEMON": "0"})
    env.pop("PYTHONUNBUFFERED", None)
    return env


def _id(line: list[str]) -> str:
    return " ".join(Path(part).name if part.startswith("/") else part for part in line)


def _args(line: list[str], tmp_path: Path) -> list[str]:
    config = tmp_path / "loopwarden.json5"
    config.write_text(CONFIG, encoding="utf-8")
    values = {"config": str(config), "state": str(tmp_path / "state.db")}
    return [part.format(**values) for part in line]


def _popen(args: list[str], tmp_path: Path, stdout: int) -> subprocess.Popen[bytes]:
    """The command, with a hook event waiting on stdin for the commands that read one."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps(EVENT), encoding="utf-8")
    with event.open("rb") as stdin:
        return subprocess.Popen(
            [sys.executable, "-m", "loopwarden", *args],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=_user_env(tmp_path),
        )


def _quiet(stderr: bytes) -> None:
    text = stderr.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    assert "Exception ignored" not in text, text
    assert "BrokenPipeError" not in text, text


@pytest.mark.parametrize("line", COMMAND_LINES, ids=_id)
def test_a_pipe_closed_before_the_first_write(tmp_path: Path, line: list[str]) -> None:
    """With nobody left to read stdout, every command stops quietly with exit 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE
    try:
        proc = _popen(_args(line, tmp_path), tmp_path, write_end)
    finally:
        os.close(write_end)
    _, stderr = proc.communicate(timeout=120)
    _quiet(stderr)
    assert proc.returncode == EXIT_BROKEN_PIPE, stderr.decode()


@pytest.mark.parametrize("line", COMMAND_LINES, ids=_id)
def test_a_reader_that_takes_one_line(tmp_path: Path, line: list[str]) -> None:
    """``loopwarden ... | head -1``: the first line arrives, then the command stops quietly."""
    with _popen(_args(line, tmp_path), tmp_path, subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    assert first.strip(), stderr.decode()
    _quiet(stderr)
    # The whole output may have fitted in the pipe before it closed (the command's
    # own exit code), or not (141).
    assert proc.returncode in (0, 1, EXIT_BROKEN_PIPE), stderr.decode()


def test_the_shell_pipelines_of_the_issue(tmp_path: Path) -> None:
    """The reported pipelines themselves, through a shell, several times each."""
    script = (
        "for i in 1 2 3 4 5; do "
        f"{sys.executable} -m loopwarden -h | head -1; "
        f"{sys.executable} -m loopwarden --help | head -2; "
        f"{sys.executable} -m loopwarden replay {EXAMPLES} | head -1; "
        "done"
    )
    done = subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        cwd=ROOT,
        env=_user_env(tmp_path),
        timeout=300,
        check=False,
    )
    _quiet(done.stderr)
    assert done.stderr == b""
    assert done.stdout.decode().count("Usage: loopwarden [OPTIONS] COMMAND") == 10
