"""An interactive CLI session in tmux, inside the sandbox, driven from the test.

The sandbox (``sandbox.py``, in a network namespace with only ``lo``) runs one
command: it starts a tmux server on a socket in the workspace and waits until
the session is gone. The tmux server lives in the namespace with the CLI; its
socket is a file, so the test (outside) types into the session and reads the
screen with ``send-keys`` and ``capture-pane``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._wait import wait_until

from .harness import AGENTS, REQUIRED, SANDBOX, Workspace, cli_path

TMUX = shutil.which("tmux")


def need_tmux() -> None:
    """Skip without tmux (fail in CI, ``LOOPWARDEN_E2E_REQUIRED=1``)."""
    if TMUX is None:
        if REQUIRED:
            pytest.fail("tmux is not installed (LOOPWARDEN_E2E_REQUIRED=1)", pytrace=False)
        pytest.skip("tmux is not installed")


class Session:
    """``cli_args`` of the workspace's CLI in tmux (160x50), against the scripted model."""

    def __init__(
        self, ws: Workspace, steps: list[dict[str, Any]], cli_args: list[str], after: str
    ) -> None:
        assert TMUX is not None, "tmux is not installed"
        self.ws = ws
        self.socket = ws.root / "tmux.sock"
        self.log = ws.root / "tmux-requests.jsonl"
        env = {**ws.env(), "TERM": "xterm-256color"}
        inner = shlex.join([str(cli_path(ws.agent)), *cli_args])
        start = shlex.join(
            [TMUX, "-S", str(self.socket), "new-session", "-d", "-x", "160", "-y", "50", inner]
        )
        waiter = (
            f"{start} && while {shlex.quote(TMUX)} -S {shlex.quote(str(self.socket))} "
            "has-session 2>/dev/null; do sleep 0.2; done"
        )
        agent = AGENTS[ws.agent]
        spec = {
            "script": {"api": agent.api, "steps": steps, "after": after, **agent.script},
            "log": str(self.log),
            "result": str(ws.root / "tmux-result.json"),
            "runs": [{"argv": ["sh", "-c", waiter], "env": env, "cwd": str(ws.work)}],
        }
        spec_path = ws.root / "tmux-spec.json"
        spec_path.write_text(json.dumps(spec))
        self.proc = subprocess.Popen([*ws.netns, sys.executable, str(SANDBOX), str(spec_path)])

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run(
            [TMUX, "-S", str(self.socket), *args], capture_output=True, text=True, timeout=30
        )
        return done.stdout if done.returncode == 0 else ""

    def screen(self) -> str:
        """The visible screen, without the blank lines."""
        lines = self.tmux("capture-pane", "-p").splitlines()
        return "\n".join(line for line in lines if line.strip())

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """Wait until ``text`` is on the screen; the screen."""
        try:
            return wait_until(
                lambda: (lambda s: s if text in s else "")(self.screen()),
                timeout,
                interval=0.1,
                what=f"{text!r} on the screen of {self.ws.agent}",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", *(("-l",) if literal else ()), *keys)

    def requests(self) -> list[dict[str, Any]]:
        """The main-conversation requests the model got so far."""
        if not self.log.exists():
            return []
        found = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [r for r in found if r["kind"] == "main"]

    def close(self) -> None:
        self.tmux("kill-server")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def trust_workspace(ws: Workspace, api_key: str) -> None:
    """What an interactive Claude Code asks once, answered: onboarding done, the API key
    in the environment approved, the project folder trusted."""
    state = {
        "hasCompletedOnboarding": True,
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "projects": {str(ws.work): {"hasTrustDialogAccepted": True}},
    }
    (Path(ws.home) / ".claude.json").write_text(json.dumps(state))
