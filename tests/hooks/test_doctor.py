"""``loopwarden doctor``: reports what is installed and proves it works, or says what is broken."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from loopwarden.hooks._protocol import AGENTS
from loopwarden.hooks.daemon import ping
from loopwarden.stores.sqlite import SQLiteStore
from tests.hooks.conftest import LOOPWARDEN, stop_helper
from tests.hooks.test_install import install, user_file


def doctor(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOOPWARDEN), "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_nothing_installed(hook_env: dict[str, str], tmp_path: Path) -> None:
    """With nothing installed doctor says so for every agent and scope and exits 0."""
    done = doctor(hook_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert done.stdout.count("not installed") == 2 * len(AGENTS)  # every agent, two scopes
    assert "[ok] state store: writable and consistent" in done.stdout
    assert "No loopwarden hooks installed" in done.stdout


def test_installed_hooks_are_run(hook_env: dict[str, str], tmp_path: Path) -> None:
    """Doctor runs a test event through every installed hook and leaves no state behind."""
    project = tmp_path / "project"
    project.mkdir()
    assert install(hook_env, "claude-code").returncode == 0
    assert install(hook_env, "gemini", "--project", cwd=project).returncode == 0
    done = doctor(hook_env, cwd=project)
    assert done.returncode == 0, done.stdout
    out = done.stdout
    assert "[ok] user: installed in" in out and "settings.json: PostToolBatch" in out
    assert "[ok] test PreToolUse event allowed" in out
    assert "[ok] test BeforeTool event allowed" in out
    assert "Everything works." in out
    # The synthetic sessions leave nothing behind in the user's state.
    db = Path(hook_env["HOME"]) / ".local" / "share" / "loopwarden" / "state.db"
    store = SQLiteStore(db)
    assert store.keys() == []
    store.close()


def test_missing_executable(hook_env: dict[str, str]) -> None:
    """A hook command whose executable is gone is reported, exit 1."""
    install(hook_env, "codex")
    path = user_file(hook_env, "codex")
    data = json.loads(path.read_text())
    for groups in data["hooks"].values():
        groups[0]["hooks"][0]["command"] = "/gone/venv/bin/loopwarden hook codex"
    path.write_text(json.dumps(data))
    done = doctor(hook_env, "--agent", "codex")
    assert done.returncode == 1
    assert "command not found: '/gone/venv/bin/loopwarden'" in done.stdout


def test_hook_that_misbehaves(hook_env: dict[str, str], tmp_path: Path) -> None:
    """A hook that prints something that is not JSON, and missing events, are reported, exit 1."""
    fake = tmp_path / "bin" / "loopwarden"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'hello from a broken hook'\n")
    fake.chmod(0o755)
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    handler = {"type": "command", "command": f"{fake} hook claude-code"}
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "", "hooks": [handler]}]}}))
    done = doctor(hook_env, "--agent", "claude-code")
    assert done.returncode == 1
    assert "not JSON" in done.stdout
    assert "missing events PostToolBatch" in done.stdout


def test_broken_state_store(hook_env: dict[str, str], tmp_path: Path) -> None:
    """A corrupt state store is reported by doctor, and the hook still allows (fail open)."""
    db = tmp_path / "state.db"
    db.write_bytes(b"not sqlite at all " * 100)
    install(hook_env, "claude-code")
    done = doctor({**hook_env, "LOOPWARDEN_STATE": str(db)}, "--agent", "claude-code")
    assert done.returncode == 1
    assert f"[!!] state store: loopwarden state database {db}" in done.stdout
    # The hook itself still answers (fail open) but reports the problem.
    assert "the hook allowed the test call but reported" in done.stdout


def test_unsettled_settings_file(hook_env: dict[str, str]) -> None:
    """A settings file that is not valid JSON is reported, exit 1."""
    path = user_file(hook_env, "gemini")
    path.parent.mkdir()
    path.write_text("{ broken")
    done = doctor(hook_env, "--agent", "gemini")
    assert done.returncode == 1
    assert "not valid JSON" in done.stdout


def fake_cli(tmp_path: Path, name: str, answer: str) -> str:
    """A directory with an executable ``name`` that prints ``answer`` for ``--version``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(f"#!/bin/sh\necho '{answer}'\n")
    exe.chmod(0o755)
    return str(bin_dir)


def test_an_older_cli_is_a_problem(hook_env: dict[str, str], tmp_path: Path) -> None:
    """A Claude Code older than the tested version is reported with what to do, exit 1."""
    install(hook_env, "claude-code")
    env = {
        **hook_env,
        "PATH": fake_cli(tmp_path, "claude", "2.0.1 (Claude Code)") + ":/usr/bin:/bin",
    }
    done = doctor(env, "--agent", "claude-code", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "Claude Code 2.0.1 is older than 2.1.332" in done.stdout
    assert "upgrade Claude Code" in done.stdout


def test_the_tested_cli_is_fine(hook_env: dict[str, str], tmp_path: Path) -> None:
    """The tested Gemini CLI version is reported as fine; a missing CLI only noted."""
    install(hook_env, "gemini")
    env = {**hook_env, "PATH": fake_cli(tmp_path, "gemini", "0.61.0") + ":/usr/bin:/bin"}
    done = doctor(env, "--agent", "gemini", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "[ok] Gemini CLI 0.61.0\n" in done.stdout
    install(hook_env, "codex")
    done = doctor({**env, "PATH": "/usr/bin:/bin"}, "--agent", "codex", cwd=tmp_path)
    assert "codex is not on PATH" in done.stdout


def test_a_hook_of_another_installation_is_noted(hook_env: dict[str, str]) -> None:
    """A hook command from another virtualenv is pointed out, with how to switch it."""
    install(hook_env, "codex")
    path = user_file(hook_env, "codex")
    other = str(Path(hook_env["HOME"]) / "other-venv" / "bin" / "loopwarden")
    data = json.loads(path.read_text())
    for groups in data["hooks"].values():
        for group in groups:
            for handler in group["hooks"]:
                handler["command"] = f"{other} hook codex"
    path.write_text(json.dumps(data))
    done = doctor(hook_env, "--agent", "codex")
    assert f"this hook runs {other} hook, not this installation" in done.stdout
    assert "/hooks" in done.stdout


def test_doctor_says_it_leaves_the_helper_running(hook_env: dict[str, str], tmp_path: Path) -> None:
    """The test event starts the hook helper; doctor says so, for how long, and how to stop it."""
    runtime = tmp_path / "run"  # a helper of this test's own, not the session's
    runtime.mkdir(mode=0o700)
    env = {**hook_env, "LOOPWARDEN_RUNTIME_DIR": str(runtime), "LOOPWARDEN_HOOK_IDLE": "900"}
    try:
        assert install(env, "claude-code").returncode == 0
        assert ping(env) is None
        done = doctor(env, "--agent", "claude-code")
        assert done.returncode == 0, done.stdout
        pid = ping(env)
        assert pid is not None
        assert (
            f"[ok] hook helper: running (started by the test events above), pid {pid}"
            in done.stdout
        )
        assert (
            "it stays running to answer hook calls, and exits after 15 minutes without one "
            "($LOOPWARDEN_HOOK_IDLE seconds; at least an hour while it serves HTTP hooks); "
            "stop it now with 'loopwarden hook --stop-daemon'"
        ) in done.stdout
        again = doctor({**env, "LOOPWARDEN_HOOK_IDLE": "90"}, "--agent", "claude-code")
        assert f"[ok] hook helper: running, pid {pid}," in again.stdout  # not started again
        assert "exits after 90 seconds without one" in again.stdout
        stopped = subprocess.run(
            [str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True, text=True
        )
        assert stopped.stdout.strip() == "loopwarden: hook helper stopped"
        assert ping(env) is None
    finally:
        stop_helper(env)
