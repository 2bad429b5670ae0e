"""The hook helper process: started on demand, stoppable, exits when idle, replaceable."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import orjson
import pytest

from loopwarden.cli import hook as client
from loopwarden.hooks import daemon
from loopwarden.hooks._protocol import socket_path
from loopwarden.hooks.daemon import ping
from tests._wait import wait_until
from tests.hooks import payloads as p
from tests.hooks.conftest import LAUNCHER, LOOPWARDEN, Hook, helper_ready, stop_helper


@pytest.fixture(name="own_env")
def fixture_own_env(hook_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A private runtime directory: these tests start and stop their own helper."""
    runtime = tmp_path / "run"
    env = {**hook_env, "LOOPWARDEN_RUNTIME_DIR": str(runtime)}
    yield env
    stop_helper(env)


def wait_gone(path: str, timeout: float = 15.0) -> bool:
    """Wait until ``path`` no longer exists (the helper removes its socket when it exits)."""
    return wait_until(lambda: not os.path.exists(path), timeout, what=f"{path} to go away")


def test_started_on_demand_and_stopped(own_env: dict[str, str]) -> None:
    """The first hook call starts the helper, later calls use it, and --stop-daemon stops it."""
    hook = Hook(own_env, "claude-code")
    assert ping(own_env) is None
    assert hook(p.claude_pre(1)).json == {}  # handled in process; helper started
    assert helper_ready(own_env)
    runtime = Path(own_env["LOOPWARDEN_RUNTIME_DIR"])
    assert runtime.stat().st_mode & 0o777 == 0o700
    pid = ping(own_env)
    assert hook(p.claude_pre(2)).json == {}
    assert ping(own_env) == pid  # the same helper answered
    done = subprocess.run(
        [str(LOOPWARDEN), "hook", "--stop-daemon"], env=own_env, capture_output=True, check=True
    )
    assert b"stopped" in done.stdout
    assert wait_gone(socket_path(own_env))
    assert ping(own_env) is None


def test_exits_when_idle(own_env: dict[str, str]) -> None:
    """The helper exits after its idle time without events."""
    env = {**own_env, "LOOPWARDEN_HOOK_IDLE": "1"}
    Hook(env, "gemini")(p.gemini_before())
    assert helper_ready(env)
    assert wait_gone(socket_path(env))


def test_disabled_by_environment(own_env: dict[str, str]) -> None:
    """With LOOPWARDEN_HOOK_DAEMON=0 the hook handles the event itself and starts no helper."""
    env = {**own_env, "LOOPWARDEN_HOOK_DAEMON": "0"}
    runtime = Path(env["LOOPWARDEN_RUNTIME_DIR"])
    assert not runtime.exists()
    # Hook() returns once the hook process has exited. Starting a helper creates the
    # runtime directory inside that process, before it exits: so no directory, no helper.
    assert Hook(env, "codex")(p.codex_pre(1)).json == {}
    assert not runtime.exists()
    assert ping(env) is None


def test_stale_socket_is_replaced(own_env: dict[str, str]) -> None:
    """A helper killed without cleanup leaves its socket behind; nothing breaks."""
    path = socket_path(own_env)
    os.makedirs(os.path.dirname(path), mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()  # the file stays, nobody listens
    hook = Hook(own_env, "claude-code")
    assert hook(p.claude_pre(1)).json == {}
    assert helper_ready(own_env)
    assert hook(p.claude_pre(2)).json == {}


def test_foreign_runtime_directory_is_not_used(
    own_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket in a directory others can write to could be anyone's: never talk to it."""
    hook = Hook(own_env, "claude-code")
    hook(p.claude_pre(1))
    assert helper_ready(own_env)
    for key, value in own_env.items():
        monkeypatch.setenv(key, value)
    payload = orjson.dumps(p.claude_pre(2))
    answer = client._forward(["claude-code"], payload)
    assert answer is not None and answer[:2] == (0, b"{}")  # private directory: used
    runtime = Path(own_env["LOOPWARDEN_RUNTIME_DIR"])
    runtime.chmod(0o777)
    try:
        assert client._forward(["claude-code"], payload) is None  # handled in process instead
    finally:
        runtime.chmod(0o700)


def test_outdated_code_is_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an upgrade the helper must stop answering with the old code."""
    module_file = tmp_path / "fake_module.py"
    module_file.write_text("x = 1\n")
    fake = types.ModuleType("loopwarden._upgrade_probe")
    fake.__file__ = str(module_file)
    monkeypatch.setitem(sys.modules, "loopwarden._upgrade_probe", fake)
    watch = daemon._SourceWatch()
    assert str(module_file) in watch.files
    watch.checked = 0.0
    assert not watch.changed()
    stat = module_file.stat()
    os.utime(module_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert not watch.changed()  # checked at most every few seconds
    watch.checked = 0.0
    assert watch.changed()


def imports_of_one_call(own_env: dict[str, str], argv: list[str]) -> set[str]:
    """The modules one hook call imports (``argv``), with the helper running."""
    hook = Hook(own_env, "claude-code")
    hook(p.claude_pre(1))
    assert helper_ready(own_env)
    done = subprocess.run(
        argv,
        input=orjson.dumps(p.claude_pre(2)),
        env={**own_env, "PYTHONPROFILEIMPORTTIME": "1"},
        capture_output=True,
        check=True,
    )
    assert done.stdout == b"{}"
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:")
    }


def test_fast_path_imports_nothing_heavy(own_env: dict[str, str]) -> None:
    """With the helper running, the hook process imports no engine, JSON or SQLite module."""
    imported = imports_of_one_call(own_env, [str(LOOPWARDEN), "hook", "claude-code"])
    assert "_socket" in imported
    ours = {name for name in imported if name.split(".")[0] == "loopwarden"}
    assert ours == {
        "loopwarden",
        "loopwarden.cli",
        "loopwarden.cli.hook",
        "loopwarden.hooks",
        "loopwarden.hooks._protocol",
    }
    heavy = {"orjson", "json", "sqlite3", "typing", "socket", "argparse", "logging", "re"}
    heavy.add("__future__")  # `from __future__ import annotations` costs a module import
    assert not heavy & imported, sorted(heavy & imported)


def test_installed_command_imports_only_the_protocol(own_env: dict[str, str]) -> None:
    """The command install writes (python -S -c ...) imports neither site nor os,
    and of loopwarden only the package, hooks and hooks._protocol, with the helper up."""
    imported = imports_of_one_call(own_env, [*LAUNCHER, "claude-code"])
    ours = {name for name in imported if name.split(".")[0] == "loopwarden"}
    assert ours == {"loopwarden", "loopwarden.hooks", "loopwarden.hooks._protocol"}
    assert not {"site", "os", "typing", "__future__"} & imported
