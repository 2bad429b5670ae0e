"""The shell hook of Codex CLI and Gemini CLI: the installed command, run as the agents
run it (a shell, the event on stdin), against a real helper."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopwarden.hooks import shellhook
from loopwarden.hooks._protocol import socket_path
from loopwarden.hooks.httpkeys import load_keys, probe
from loopwarden.hooks.settings import split_hook_command
from tests.hooks import payloads as p
from tests.hooks.conftest import Answer, Hook, helper_ready, stop_helper
from tests.hooks.test_install import install, user_file

pytestmark = [
    pytest.mark.usefixtures("small_config"),
    pytest.mark.skipif(shellhook.bash_path() is None, reason="no bash with /dev/tcp here"),
]


@pytest.fixture(name="env")
def fixture_env(hook_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A HOME and a private runtime directory: each test starts and stops its own helper."""
    env = {**hook_env, "LOOPWARDEN_RUNTIME_DIR": str(tmp_path / "run")}
    yield env
    stop_helper(env)


class Installed:
    """The command ``loopwarden install AGENT`` wrote, run as the agent runs it."""

    def __init__(self, env: dict[str, str], agent: str, *args: str) -> None:
        done = install(env, agent, *args)
        assert done.returncode == 0, done.stderr
        data = json.loads(user_file(env, agent).read_text())
        event = "PreToolUse" if agent == "codex" else "BeforeTool"
        self.command: str = data["hooks"][event][0]["hooks"][0]["command"]
        assert shellhook.SCRIPT.name in self.command
        self.env = env

    def __call__(self, event: Any, command: str | None = None, **env: str) -> Answer:
        done = subprocess.run(
            command or self.command,
            shell=True,
            input=event if isinstance(event, bytes) else orjson.dumps(event),
            env={**self.env, **env},
            capture_output=True,
            timeout=120,
        )
        parsed = orjson.loads(done.stdout) if done.stdout.strip() else None
        return Answer(done.returncode, parsed, done.stdout, done.stderr.decode())

    def without_fallback(self) -> str:
        """The same shell hook with a Python hook command that fails: it can only answer
        through the helper's HTTP port."""
        found = split_hook_command(self.command)
        assert found is not None
        bash, script = found[0][:2]
        return shlex.join([bash, script, "1", "/bin/false", *found[1]])


def codex_loop(hook: Any, session: str) -> list[Any]:
    """Identical Codex shell calls until the turn is stopped: every answer."""
    answers = []
    for n in range(1, 7):
        answers.append(hook(p.codex_pre(n, session=session)).json)
        answers.append(hook(p.codex_post(n, f"c{n}", "0.001", session=session)).json)
    return answers


def test_the_shell_hook_answers_as_the_hook_command(env: dict[str, str]) -> None:
    """The same Codex loop gets the same warning, blocks and stop from the shell hook as
    from the Python hook command."""
    shell = Installed(env, "codex")
    over_http = codex_loop(shell, "shell-sess")
    by_python = codex_loop(Hook(env, "codex"), "python-sess")
    assert over_http == by_python
    kinds = [json.dumps(a) for a in over_http]
    assert any("WARNING" in k for k in kinds) and any("circuit breaker" in k for k in kinds)


def test_after_the_first_event_no_python_starts(env: dict[str, str]) -> None:
    """The first event starts the helper (through the Python hook command, which hands it
    the port); later ones are answered over HTTP: with a Python command that fails, the
    shell hook still answers every event of a loop, warning and stop included."""
    shell = Installed(env, "codex")
    assert shell(p.codex_pre(1, session="first")).json == {}
    assert helper_ready(env)
    keys = load_keys(env)
    assert keys is not None and probe(keys.port, keys.token).kind == "served"
    alone = shell.without_fallback()
    answers = codex_loop(lambda event: shell(event, alone), "http-only")
    assert answers == codex_loop(Hook(env, "codex"), "python")


def test_exit_code_and_stderr_come_through(env: dict[str, str]) -> None:
    """A bad command line gets the hook command's exit code 1 and its usage text, over HTTP
    too; a problem report on stderr (an event that is not JSON) too, with exit code 0."""
    shell = Installed(env, "codex")
    shell(p.codex_pre(1))
    assert helper_ready(env)
    alone = shell.without_fallback()
    bad = shell(p.codex_pre(2), f"{alone} --bogus")
    assert (bad.code, bad.stdout) == (1, b"")
    assert "unrecognized arguments: --bogus" in bad.stderr
    garbage = shell(b"{not json", alone)
    assert (garbage.code, garbage.json) == (0, {})
    assert "not JSON" in garbage.stderr


def test_a_program_on_the_port_never_gets_the_event(env: dict[str, str]) -> None:
    """A program that took the port (while no helper ran) and plays along gets the request
    head but never the event: without the helper's proof the shell hook runs the Python
    hook command, which answers and says the port is taken."""
    shell = Installed(env, "codex")
    keys = load_keys(env)
    assert keys is not None
    received: list[bytes] = []
    squatter = socket.create_server(("127.0.0.1", keys.port))

    def serve() -> None:
        conn, _ = squatter.accept()
        with conn:
            conn.settimeout(10)
            data = conn.recv(65536)
            conn.sendall(b"HTTP/1.1 100 Continue\r\nX-Loopwarden-Proof: 00\r\n\r\n")
            while chunk := conn.recv(65536):
                data += chunk
            received.append(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        marker = "secret-argument-31337"
        event = p.codex_pre(1)
        event["tool_input"] = {"command": f"echo {marker}"}
        answer = shell(event)
        assert (answer.code, answer.json) == (0, {})
        assert f"127.0.0.1:{keys.port}" in answer.stderr  # said on stderr (and in the log)
        thread.join(30)
        assert received and b"X-Loopwarden-Token" in received[0]
        assert marker.encode() not in received[0]
    finally:
        squatter.close()


def test_a_frozen_helper_is_passed_over(env: dict[str, str]) -> None:
    """A helper that accepts but does not answer (stopped) gets no event: the shell hook,
    then the Python hook command, hand it over to the hook process itself."""
    shell = Installed(env, "codex")
    shell(p.codex_pre(1))
    assert helper_ready(env)
    pid = int(Path(socket_path(env) + ".pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        answer = shell(p.codex_pre(2))
        assert (answer.code, answer.json) == (0, {})
    finally:
        os.kill(pid, signal.SIGCONT)
    # Both calls were counted once each.
    assert len(list(Hook(env, "codex").state("019a-codex-sess", "turn-1").window)) == 2


def test_with_the_helper_off_the_hook_command_answers(env: dict[str, str]) -> None:
    """LOOPWARDEN_HOOK_DAEMON=0: the shell hook hands every event to the hook command, which
    answers it itself and starts no helper."""
    shell = Installed(env, "codex")
    answers = [shell(p.codex_pre(n), LOOPWARDEN_HOOK_DAEMON="0").json for n in range(1, 3)]
    assert answers == [{}, {}]
    assert not Path(env["LOOPWARDEN_RUNTIME_DIR"]).exists()


def test_paths_that_need_quoting(env: dict[str, str], tmp_path: Path) -> None:
    """A config path with spaces, quotes and non-ASCII letters reaches the helper intact
    (in the URL), and so does a working directory like that."""
    odd = tmp_path / "dïr with 'quotes' & spaces"
    odd.mkdir()
    config = odd / "lw config.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": False}}}))
    shell = Installed(env, "codex", "--config", str(config))
    shell(p.codex_pre(1))
    assert helper_ready(env)
    alone = shell.without_fallback()
    done = subprocess.run(
        alone,
        shell=True,
        cwd=odd,
        input=orjson.dumps(p.codex_pre(2)),
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"{}", b"")
    # Detection is off in that config: nothing was recorded for the session.
    assert Hook(env, "codex").state("019a-codex-sess", "turn-1") is None
