"""``loopwarden install``: merge, idempotence, backups, exact uninstall, clear errors."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loopwarden.hooks import shellhook
from loopwarden.hooks.agents import ADAPTERS
from loopwarden.hooks.fileinstall import FILE_AGENTS
from loopwarden.hooks.settings import split_hook_command
from tests.hooks.conftest import LAUNCHER, LOOPWARDEN, installed_command

EXISTING = {
    "model": "claude-sonnet-4-5",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}


def install(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOOPWARDEN), "install", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def user_file(env: dict[str, str], agent: str) -> Path:
    home = Path(env["HOME"])
    return {
        "claude-code": home / ".claude" / "settings.json",
        "codex": home / ".codex" / "hooks.json",
        "gemini": home / ".gemini" / "settings.json",
        "qwen": home / ".qwen" / "settings.json",
    }[agent]


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.loopwarden-backup-*"))


def ours(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Event -> loopwarden groups in a settings object."""
    return {
        event: [
            g
            for g in groups
            if any("loopwarden" in h.get("command", h.get("url", "")) for h in g["hooks"])
        ]
        for event, groups in data.get("hooks", {}).items()
    }


# Copilot's hooks have a shape of their own (tests/hooks/test_copilot_qwen.py).
@pytest.mark.parametrize("agent", sorted(set(ADAPTERS) - set(FILE_AGENTS) - {"copilot"}))
def test_fresh_install_writes_every_event(hook_env: dict[str, str], agent: str) -> None:
    """A fresh install registers every event of the agent with the absolute hook command
    (Claude Code: its command hooks; its HTTP hooks in tests/hooks/test_http.py)."""
    done = install(hook_env, agent, *(["--command"] if agent == "claude-code" else []))
    assert done.returncode == 0, done.stderr
    path = user_file(hook_env, agent)
    data = json.loads(path.read_text())
    events = [event for event, _ in ADAPTERS[agent].install_events]
    assert list(data["hooks"]) == events
    for event, matcher in ADAPTERS[agent].install_events:
        [group] = data["hooks"][event]
        assert group.get("matcher") == matcher
        [handler] = group["hooks"]
        assert handler["type"] == "command"
        found = split_hook_command(handler["command"])
        assert found is not None and found[1] == [agent]
        launcher = found[0]
        if agent in shellhook.AGENTS and shellhook.bash_path() is not None:
            # The shell hook, then the count and words of the Python hook it falls back to.
            assert launcher[:3] == [shellhook.bash_path(), str(shellhook.SCRIPT), "4"]
            launcher = launcher[3:]
        assert launcher == LAUNCHER
        assert handler["timeout"] == (30000 if agent == "gemini" else 30)
    assert backups(path) == []  # nothing to back up
    assert "check it with: loopwarden doctor" in done.stdout
    if agent == "codex":
        assert "/hooks" in done.stdout  # the trust gate


def test_merge_idempotence_and_exact_uninstall(hook_env: dict[str, str]) -> None:
    """Install keeps other settings, changes nothing twice; uninstall removes only its entries."""
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    original = json.dumps(EXISTING, indent=4)
    path.write_text(original)

    first = install(hook_env, "claude-code")
    assert first.returncode == 0, first.stderr
    data = json.loads(path.read_text())
    assert data["model"] == EXISTING["model"] and data["permissions"] == EXISTING["permissions"]
    assert data["hooks"]["PreToolUse"][0] == EXISTING["hooks"]["PreToolUse"][0]  # kept, first
    assert data["hooks"]["Stop"] == EXISTING["hooks"]["Stop"]
    assert len(ours(data)["PreToolUse"]) == 1
    [backup] = backups(path)
    assert backup.read_text() == original
    assert str(backup) in first.stdout

    installed = path.read_bytes()
    second = install(hook_env, "claude-code")
    assert second.returncode == 0
    assert "already installed" in second.stdout
    assert path.read_bytes() == installed and len(backups(path)) == 1

    removed = install(hook_env, "claude-code", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert path.read_text() == original  # untouched since install: the very same bytes
    assert "exactly as it was" in removed.stdout
    assert len(backups(path)) == 2
    again = install(hook_env, "claude-code", "--uninstall")
    assert "not installed" in again.stdout


def test_install_changes_only_its_own_entries(hook_env: dict[str, str]) -> None:
    """Install adds its entries in the file's own style; every other byte stays."""
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    original = json.dumps(EXISTING, indent=4)  # 4 spaces, no final newline
    path.write_text(original)
    assert install(hook_env, "claude-code").returncode == 0
    text = path.read_text()
    assert not text.endswith("\n")
    assert '\n    "model": "claude-sonnet-4-5",\n' in text
    assert text.startswith(original[: original.index('"PreToolUse"')])
    lines = iter(text.splitlines())
    assert all(line in lines for line in original.splitlines())  # in order, unchanged
    command = json.dumps({"command": installed_command("claude-code")})[1:-1]
    assert f"\n                        {command},\n" in text  # ours, indented alike


def test_uninstall_after_an_edit_removes_only_ours(hook_env: dict[str, str]) -> None:
    """A file edited since install keeps the edit and its layout; only ours go, and a
    hooks table the user had (even empty) stays."""
    path = user_file(hook_env, "gemini")
    path.parent.mkdir()
    path.write_text('{\n\t"hooks": {},\n\t"theme": "dark"\n}')
    assert install(hook_env, "gemini").returncode == 0
    path.write_text(path.read_text().replace('"dark"', '"light"'))  # the user's edit
    done = install(hook_env, "gemini", "--uninstall")
    assert done.returncode == 0, done.stderr
    assert "exactly as it was" not in done.stdout
    assert path.read_text() == '{\n\t"hooks": {},\n\t"theme": "light"\n}'


def test_windows_line_ends_are_kept(hook_env: dict[str, str]) -> None:
    """A settings file with \\r\\n line ends keeps them; edited after install, uninstall
    gives back its text as edited."""
    path = user_file(hook_env, "codex")
    path.parent.mkdir()
    path.write_bytes(b'{\r\n  "hooks": {\r\n    "Stop": []\r\n  }\r\n}\r\n')
    assert install(hook_env, "codex").returncode == 0
    data = path.read_bytes()
    assert b"\n" not in data.replace(b"\r\n", b"") and b"PreToolUse" in data
    path.write_bytes(data + b"\r\n")  # an edit: the original bytes are not restored
    assert install(hook_env, "codex", "--uninstall").returncode == 0
    assert path.read_bytes() == b'{\r\n  "hooks": {\r\n    "Stop": []\r\n  }\r\n}\r\n\r\n'


def test_uninstall_of_a_fresh_install_removes_the_file(hook_env: dict[str, str]) -> None:
    """There was no settings file before install: after uninstall there is none again."""
    install(hook_env, "gemini")
    assert user_file(hook_env, "gemini").exists()
    done = install(hook_env, "gemini", "--uninstall")
    assert done.returncode == 0, done.stderr
    assert not user_file(hook_env, "gemini").exists()


def test_uninstall_without_a_record_still_removes_ours(hook_env: dict[str, str]) -> None:
    """An install made by an older loopwarden (no record): only ours are removed, and the
    containers only they were in."""
    path = user_file(hook_env, "codex")
    path.parent.mkdir()
    handler = {"type": "command", "command": "loopwarden hook codex"}
    old = {"hooks": {"PreCompact": [{"hooks": [handler]}]}, "x": 1}
    path.write_text(json.dumps(old, indent=2))
    assert install(hook_env, "codex", "--uninstall").returncode == 0
    assert path.read_text() == '{\n  "x": 1\n}'


def test_repeated_keys_are_refused(hook_env: dict[str, str]) -> None:
    """A settings file with a key written twice is left alone, with the line of the repeat."""
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    content = '{\n  "hooks": {},\n  "model": "a",\n  "hooks": {"Stop": []}\n}'
    path.write_text(content)
    done = install(hook_env, "claude-code")
    assert done.returncode == 1
    assert f"{path}:4:" in done.stderr and "'hooks' appears more than once" in done.stderr
    assert path.read_text() == content


def test_reinstall_replaces_an_old_command(hook_env: dict[str, str]) -> None:
    """Installing again replaces loopwarden's old command and keeps other hooks."""
    path = user_file(hook_env, "codex")
    path.parent.mkdir()
    old = "/old/venv/bin/loopwarden hook codex"
    path.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "", "hooks": [{"type": "command", "command": old}]},
                        {"matcher": "", "hooks": [{"type": "command", "command": "x.sh"}]},
                    ],
                    "SessionStart": [{"hooks": [{"type": "command", "command": old}]}],
                }
            }
        )
    )
    assert install(hook_env, "codex").returncode == 0
    data = json.loads(path.read_text())
    commands = [h["command"] for g in data["hooks"]["PreToolUse"] for h in g["hooks"]]
    assert commands == ["x.sh", installed_command("codex")]
    assert "SessionStart" not in data["hooks"]  # not installed for Codex any more


def test_upgrade_removes_claude_pre_compact(hook_env: dict[str, str]) -> None:
    """Older installs hooked Claude Code's PreCompact (whose command line Claude Code shows
    the model); installing again removes that entry and keeps the user's own."""
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    ours_old = {"hooks": [{"type": "command", "command": f"{LOOPWARDEN} hook claude-code"}]}
    mine = {"hooks": [{"type": "command", "command": "echo compacting"}]}
    path.write_text(json.dumps({"hooks": {"PreCompact": [ours_old, mine]}}))
    assert install(hook_env, "claude-code").returncode == 0
    data = json.loads(path.read_text())
    assert data["hooks"]["PreCompact"] == [mine]
    assert "PostToolBatch" in data["hooks"]


def test_project_scope_and_options(hook_env: dict[str, str], tmp_path: Path) -> None:
    """--project writes the project's settings, with --config and --state made absolute."""
    project = tmp_path / "project"
    project.mkdir()
    config = project / "lw.json5"
    done = install(
        hook_env,
        "claude-code",
        "--project",
        "--config",
        "lw.json5",
        "--state",
        "state/lw.db",
        cwd=project,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((project / ".claude" / "settings.json").read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert shlex.split(command)[len(LAUNCHER) + 1 :] == [
        "--config",
        str(config),
        "--state",
        str(project / "state" / "lw.db"),
    ]
    assert not user_file(hook_env, "claude-code").exists()


def test_dry_run_writes_nothing(hook_env: dict[str, str]) -> None:
    """--dry-run prints the resulting settings and writes nothing."""
    done = install(hook_env, "gemini", "--dry-run")
    assert done.returncode == 0
    assert "BeforeTool" in json.loads(done.stdout)["hooks"]
    assert not user_file(hook_env, "gemini").exists()


def test_codex_home(hook_env: dict[str, str], tmp_path: Path) -> None:
    """Codex settings go to $CODEX_HOME when it is set."""
    env = {**hook_env, "CODEX_HOME": str(tmp_path / "codex-home")}
    assert install(env, "codex").returncode == 0
    assert (tmp_path / "codex-home" / "hooks.json").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"hooks": {"PreToolUse": [}', "not valid JSON"),
        ('{\n  // my settings\n  "theme": "dark",\n}', "comments"),
        ('["not", "an", "object"]', "expected a JSON object"),
        ('{"hooks": []}', "'hooks' should be an object"),
        ('{"hooks": {"BeforeTool": {}}}', "hooks.BeforeTool should be a list"),
    ],
)
def test_bad_settings_are_left_alone(hook_env: dict[str, str], content: str, message: str) -> None:
    """A settings file install cannot understand is left as it is, exit 1 with the reason."""
    path = user_file(hook_env, "gemini")
    path.parent.mkdir()
    path.write_text(content)
    done = install(hook_env, "gemini")
    assert done.returncode == 1
    assert message in done.stderr and str(path) in done.stderr
    assert path.read_text() == content and backups(path) == []


def test_json_error_names_the_line(hook_env: dict[str, str]) -> None:
    """A JSON error in the settings file is reported with its line."""
    path = user_file(hook_env, "claude-code")
    path.parent.mkdir()
    path.write_text('{\n  "model": "x",\n  "hooks": {,\n}\n')
    done = install(hook_env, "claude-code")
    assert f"{path}:3:" in done.stderr


def test_install_byte_compiles_the_hook_path(hook_env: dict[str, str]) -> None:
    """Every hook call imports these modules; install leaves their byte code in place."""
    import importlib.util

    import loopwarden.cli.hook
    import loopwarden.hooks._protocol

    modules = (loopwarden.cli.hook, loopwarden.hooks._protocol)
    targets = [Path(importlib.util.cache_from_source(m.__file__ or "")) for m in modules]
    for target in targets:
        target.unlink(missing_ok=True)
    done = install(hook_env, "claude-code")
    assert done.returncode == 0, done.stderr
    assert all(target.exists() for target in targets)
