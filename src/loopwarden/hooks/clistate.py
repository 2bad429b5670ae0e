"""What ``loopwarden doctor`` can learn from the coding-agent CLIs themselves.

The hooks rely on what each CLI really does with them (docs/hooks.md); those
facts were observed with the versions in :data:`TESTED`. ``doctor`` asks the
installed CLI for its version, and asks Codex (``codex app-server``, method
``hooks/list``) whether it trusts loopwarden's hooks: Codex skips untrusted
hooks without a word, and a reinstall from another virtualenv changes the
command and with it the hash Codex trusted.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["TESTED", "Cli", "codex_hooks", "find_cli", "parse_version", "version"]


class Cli(NamedTuple):
    """A CLI's command name and the version loopwarden's hooks were tested with."""

    binary: str
    tested: tuple[int, int, int]
    needs: str
    """What the hooks need from that version (said when an older one is found)."""


TESTED: Mapping[str, Cli] = {
    "claude-code": Cli("claude", (2, 1, 332), "the PostToolBatch and SessionEnd hook events"),
    "codex": Cli("codex", (0, 171, 0), "hooks, PostCompact and trust through /hooks"),
    "gemini": Cli("gemini", (0, 61, 0), "the BeforeModel hook and the JSONL session transcript"),
    "opencode": Cli("opencode", (1, 18, 33), "the plugin hooks tool.execute.* and chat.params"),
    "cline": Cli("cline", (3, 0, 65), "the PreToolUse/PostToolUse hook files with JSON answers"),
    "copilot": Cli("copilot", (1, 0, 102), "hooks in ~/.copilot/hooks and postToolUse context"),
    "qwen": Cli("qwen", (0, 24, 4), "the PostToolBatch and UserPromptSubmit hook events"),
}
"""Per agent: the versions of the e2e suite (tests/e2e/clis.json must agree)."""

_QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "GEMINI_CLI_NO_RELAUNCH": "true",
    "NO_COLOR": "1",
}
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def find_cli(agent: str, env: Mapping[str, str]) -> str | None:
    """The agent's CLI on ``PATH``, if any."""
    return shutil.which(TESTED[agent].binary, path=env.get("PATH"))


def parse_version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch = (int(x) for x in match.groups())
    return major, minor, patch


def version(exe: str, env: Mapping[str, str]) -> tuple[int, int, int] | None:
    """``exe --version``, parsed; None when it does not answer with a version."""
    try:
        done = subprocess.run(
            [exe, "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, **_QUIET},
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(done.stdout) if done.returncode == 0 else None


def codex_hooks(exe: str, env: Mapping[str, str], cwd: str) -> list[dict[str, Any]] | str:
    """Codex's view of the hooks for ``cwd`` (``hooks/list``), or why it could not be had."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "loopwarden-doctor", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [cwd]}},
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(
            [exe, "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**env, **_QUIET},
            cwd=cwd,
            text=True,
        )
    except OSError as exc:
        return f"cannot start codex app-server ({exc})"
    # The server answers while stdin is open; a timer ends it if it never does.
    watchdog = threading.Timer(60.0, proc.kill)
    watchdog.start()
    stdin, stdout = proc.stdin, proc.stdout
    try:
        if stdin is None or stdout is None:  # pragma: no cover - both are pipes
            return "codex app-server has no pipes"
        stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        stdin.flush()
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or message.get("id") != 2:
                continue
            if "error" in message:
                return f"codex app-server: {message['error']}"
            data = message.get("result", {}).get("data", [])
            return [h for item in data if isinstance(item, dict) for h in item.get("hooks", [])]
    except OSError as exc:
        return f"codex app-server failed ({exc})"
    finally:
        watchdog.cancel()
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return "codex app-server gave no answer to hooks/list"
