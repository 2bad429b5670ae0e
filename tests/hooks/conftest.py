"""Run the real ``loopwarden`` console script as the coding agents do: one process per event."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest

from loopwarden.config import load_config
from loopwarden.engine.state import RunState
from loopwarden.guard import LoopGuard
from loopwarden.hooks._protocol import socket_path
from loopwarden.hooks.settings import hook_command
from loopwarden.stores.sqlite import SQLiteStore
from tests._wait import wait_until

LOOPWARDEN = shutil.which("loopwarden", path=str(Path(sys.executable).parent))
if LOOPWARDEN is None:  # pragma: no cover - the dev install always has it
    raise RuntimeError("the loopwarden console script is not installed next to the interpreter")

LAUNCHER = shlex.split(hook_command("claude-code"))[:-1]
"""The start of the hook command ``loopwarden install`` writes (python -S -c ...)."""


def installed_command(agent: str) -> str:
    """The hook command ``loopwarden install AGENT`` writes from this virtualenv (Codex
    CLI and Gemini CLI: the shell hook around it, where bash can run it)."""
    return hook_command(agent)


SMALL = {
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


class Answer(NamedTuple):
    code: int
    json: Any
    stdout: bytes
    stderr: str


def stop_helper(env: dict[str, str]) -> None:
    """Stop the helper these tests started (by its pid file if it does not answer)."""
    subprocess.run(
        [str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True, check=False
    )
    pid_file = Path(socket_path(env) + ".pid")
    if pid_file.exists():
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def helper_ready(env: dict[str, str], timeout: float = 30.0) -> bool:
    """Wait until the helper listens (the first hook call starts it in the background)."""
    from loopwarden.hooks.daemon import ping

    return wait_until(lambda: ping(env) is not None, timeout, what="the hook helper to listen")


@pytest.fixture(name="runtime_dir", scope="session")
def fixture_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One helper for the whole session; every test still has its own HOME and state."""
    path = tmp_path_factory.mktemp("run")
    path.chmod(0o700)
    yield path
    stop_helper({**os.environ, "LOOPWARDEN_RUNTIME_DIR": str(path)})


@pytest.fixture(name="hook_env")
def fixture_hook_env(tmp_path: Path, runtime_dir: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_", "CODEX_"))
    }
    env.pop("CLAUDE_CONFIG_DIR", None)
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        LOOPWARDEN_RUNTIME_DIR=str(runtime_dir),
        LOOPWARDEN_HOOK_IDLE="300",
    )
    return env


class Hook:
    """``loopwarden hook AGENT`` as a subprocess; ``daemon=False`` adds ``--no-daemon``."""

    def __init__(self, env: dict[str, str], agent: str, *args: str) -> None:
        self.env = env
        self.agent = agent
        self.args = list(args)

    def __call__(
        self, event: Any, *extra: str, daemon: bool = True, cwd: Path | None = None
    ) -> Answer:
        payload = event if isinstance(event, bytes) else orjson.dumps(event)
        argv = [str(LOOPWARDEN), "hook", self.agent, *self.args, *extra]
        if not daemon:
            argv.append("--no-daemon")
        done = subprocess.run(
            argv, input=payload, env=self.env, capture_output=True, timeout=120, cwd=cwd
        )
        parsed = orjson.loads(done.stdout) if done.stdout.strip() else None
        return Answer(done.returncode, parsed, done.stdout, done.stderr.decode())

    @property
    def state_db(self) -> Path:
        return Path(self.env["HOME"]) / ".local" / "share" / "loopwarden" / "state.db"

    def state(self, session: str, run: str, config: Any = None, agent_id: str | None = None) -> Any:
        """The run's stored state, read straight from the SQLite file."""
        cfg = load_config(config if config is not None else SMALL).for_agent(None)
        key = LoopGuard(cfg).run(run, session_id=session, agent_id=agent_id or self.agent).key
        store = SQLiteStore(self.state_db)
        try:
            state: RunState | None = store.load(key, cfg)
        finally:
            store.close()
        return state


@pytest.fixture(name="small_config")
def fixture_small_config(hook_env: dict[str, str]) -> Path:
    """Low thresholds in the default config location: warn at 3, block at 4, stop at 5."""
    path = Path(hook_env["HOME"]) / ".config" / "loopwarden" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(orjson.dumps(SMALL))
    return path
