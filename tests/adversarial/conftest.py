"""Fixtures of the adversarial suite: isolated homes, runtime dirs and hook helpers.

Everything is driven through entry points that outlive refactors: the
``loopwarden`` console script as a subprocess, the public Python API, files on
disk. Nothing here imports a private module of loopwarden.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.adversarial._procs import (
    LOOPWARDEN,
    Ran,
    kill_pids,
    processes_mentioning,
    run_bounded,
)
from tests.hooks import payloads

# Warn at 2, block at 3, stop the run at 4 identical no-progress calls.
SMALL: dict[str, Any] = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 2,
            "criticalThreshold": 3,
            "globalCircuitBreakerThreshold": 4,
            "unknownToolThreshold": 2,
        }
    }
}


def leaks(secret: str, text: str | bytes, window: int = 8) -> bool:
    """True if ``text`` holds ``secret`` or any ``window`` characters of it (loggers elide
    the middle of long values, so a partial copy is a leak too)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    raw = secret.encode()
    return any(raw[i : i + window] in data for i in range(max(1, len(raw) - window + 1)))


def short_dir(prefix: str) -> Path:
    """A fresh private directory with a short path (Unix socket paths are limited to 108)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o700)
    return path


def stop_helpers(env: dict[str, str]) -> None:
    """Stop every hook helper that uses this env's runtime dir (ours alone), then kill leftovers."""
    run_bounded([LOOPWARDEN, "hook", "--stop-daemon"], env=env, timeout=20)
    runtime = env["LOOPWARDEN_RUNTIME_DIR"]
    pids: list[int] = []
    for pid_file in Path(runtime).glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pid_file.read_text()))
    pids.extend(processes_mentioning(runtime))
    kill_pids(set(pids))


def base_env(home: Path, runtime: Path) -> dict[str, str]:
    """The environment of a hook: its own HOME and runtime dir, nothing inherited from ours."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_", "CODEX_"))
    }
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.update(HOME=str(home), LOOPWARDEN_RUNTIME_DIR=str(runtime), LOOPWARDEN_HOOK_IDLE="120")
    return env


@pytest.fixture(name="hook_env")
def fixture_hook_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A hook environment of this test alone, with its own helper (stopped afterwards)."""
    home = tmp_path / "home"
    home.mkdir()
    runtime = short_dir("lwadv-run-")
    env = base_env(home, runtime)
    try:
        yield env
    finally:
        stop_helpers(env)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(name="shared_runtime", scope="session")
def fixture_shared_runtime() -> Iterator[Path]:
    """One helper for the fast hook tests of the session (each still has its own HOME)."""
    runtime = short_dir("lwadv-shared-")
    yield runtime
    stop_helpers(base_env(Path("/nonexistent"), runtime))
    shutil.rmtree(runtime, ignore_errors=True)


def state_dir(env: dict[str, str]) -> Path:
    """Where the hook keeps state.db and hook.log by default."""
    return Path(env["HOME"]) / ".local" / "share" / "loopwarden"


def write_config(env: dict[str, str], config: Any) -> Path:
    """Put ``config`` in the default config location of this HOME."""
    path = Path(env["HOME"]) / ".config" / "loopwarden" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(config if isinstance(config, bytes) else orjson.dumps(config))
    return path


class HookAnswer:
    """What one ``loopwarden hook AGENT`` process printed."""

    def __init__(self, ran: Ran) -> None:
        self.ran = ran
        self.code = ran.code
        self.stderr = ran.err
        text = ran.stdout.strip()
        self.json: Any = orjson.loads(text) if text else None

    @property
    def denied(self) -> bool:
        answer = self.json or {}
        specific = answer.get("hookSpecificOutput") or {}
        return (
            specific.get("permissionDecision") == "deny"
            or answer.get("decision") in ("deny", "block")
            or answer.get("continue") is False
        )


def hook(
    env: dict[str, str],
    agent: str,
    event: Any,
    *,
    daemon: bool = False,
    timeout: float = 60.0,
) -> HookAnswer:
    """One hook event through the real console script (``--no-daemon`` unless ``daemon``)."""
    payload = event if isinstance(event, bytes) else orjson.dumps(event)
    argv = [LOOPWARDEN, "hook", agent]
    if not daemon:
        argv.append("--no-daemon")
    ran = run_bounded(argv, stdin=payload, env=env, timeout=timeout)
    assert not ran.timed_out, f"the hook did not answer within {timeout} s"
    return HookAnswer(ran)


# -- hook events with the fields the real agents send (tests/hooks/payloads.py) -----------
def claude_event(
    name: str,
    n: int,
    *,
    session: str = "sess-claude",
    prompt: str = "prompt-1",
    tool: str = "Bash",
    tool_input: Any = None,
    transcript: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """A Claude Code event ``name`` for call ``n``; ``extra`` adds or replaces fields."""
    event = payloads.claude_pre(n, session=session, prompt=prompt, tool=tool, transcript=transcript)
    event["hook_event_name"] = name
    if tool_input is not None:
        event["tool_input"] = tool_input
    return {**event, **extra}


def codex_event(
    name: str,
    n: int,
    *,
    session: str = "sess-codex",
    turn: str = "turn-1",
    tool_input: Any = None,
    transcript: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """A Codex CLI event ``name`` for call ``n``; ``extra`` adds or replaces fields."""
    event = payloads.codex_pre(n, session=session, turn=turn, transcript=transcript)
    event["hook_event_name"] = name
    if tool_input is not None:
        event["tool_input"] = tool_input
    return {**event, **extra}


def gemini_event(
    name: str, *, session: str = "sess-gemini", tool_input: Any = None, **extra: Any
) -> dict[str, Any]:
    """A Gemini CLI event ``name`` (no call ids); ``extra`` adds or replaces fields."""
    event = payloads.gemini_event(
        name,
        session=session,
        tool_name="run_shell_command",
        tool_input={"command": "ls"} if tool_input is None else tool_input,
    )
    event["transcript_path"] = "/nonexistent/chats/session.json"
    return {**event, **extra}


@pytest.fixture(name="redis_server", scope="session")
def fixture_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real redis-server of this session (the Redis store tests' own server class)."""
    from tests.stores.redis._servers import Server, require_redis

    require_redis()
    server = Server(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()
