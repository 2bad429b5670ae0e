"""The coding agents' settings files: where loopwarden's hook entries go, and how.

Claude Code (``.claude/settings.json``), Codex CLI (``.codex/hooks.json``) and
Gemini CLI (``.gemini/settings.json``) all keep hooks as
``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command", ...}]}]}}``.
loopwarden adds one matcher group per event, holding one command handler, and
recognises its own handlers by their command (``... loopwarden hook AGENT`` or
``... -m loopwarden hook AGENT``), so that installing twice changes nothing and
uninstalling removes exactly those handlers and nothing else.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from .agents import ADAPTERS

__all__ = [
    "AGENT_TITLES",
    "SCOPES",
    "Scope",
    "SettingsError",
    "add_hooks",
    "backup_path",
    "hook_command",
    "installed_hooks",
    "is_loopwarden_command",
    "read_settings",
    "remove_hooks",
    "settings_path",
    "write_settings",
]

Scope = Literal["user", "project"]
SCOPES: tuple[Scope, ...] = ("user", "project")
AGENT_TITLES = {"claude-code": "Claude Code", "codex": "Codex CLI", "gemini": "Gemini CLI"}
JsonObject = dict[str, Any]


class SettingsError(Exception):
    """A settings file cannot be read or changed safely (the message says why and where)."""


def settings_path(agent: str, scope: Scope, env: Mapping[str, str], project: Path) -> Path:
    """The settings file of ``agent`` for ``scope`` (``project`` is the project directory)."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    if agent == "claude-code":
        if scope == "project":
            return project / ".claude" / "settings.json"
        config_dir = env.get("CLAUDE_CONFIG_DIR")
        return (Path(config_dir) if config_dir else home / ".claude") / "settings.json"
    if agent == "codex":
        if scope == "project":
            return project / ".codex" / "hooks.json"
        codex_home = env.get("CODEX_HOME")
        return (Path(codex_home) if codex_home else home / ".codex") / "hooks.json"
    if agent == "gemini":
        base = project if scope == "project" else home
        return base / ".gemini" / "settings.json"
    raise ValueError(f"unknown agent {agent!r}")


def _executable() -> list[str]:
    """The most robust way to start this installation's ``loopwarden`` command."""
    script = Path(sys.executable).parent / ("loopwarden.exe" if os.name == "nt" else "loopwarden")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "loopwarden"]


def hook_command(agent: str, extra: list[str] | None = None) -> str:
    """The shell command the agent runs: absolute paths, quoted for ``sh``."""
    return shlex.join([*_executable(), "hook", agent, *(extra or [])])


def is_loopwarden_command(command: object, agent: str | None = None) -> bool:
    """True for a command that runs ``loopwarden hook`` (for ``agent``, if given)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for index, word in enumerate(words):
        name = os.path.basename(word)
        if name in ("loopwarden", "loopwarden.exe"):
            rest = words[index + 1 :]
        elif word == "-m" and index + 1 < len(words) and words[index + 1] == "loopwarden":
            rest = words[index + 2 :]
        else:
            continue
        if rest[:1] == ["hook"]:
            return agent is None or rest[1:2] == [agent]
    return False


def read_settings(path: Path) -> JsonObject | None:
    """The file's JSON object, or None when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the settings file ({exc})") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            import json5

            json5.loads(text)
        except ValueError:
            raise SettingsError(
                f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); fix the file "
                "or move it away, then run the command again"
            ) from None
        raise SettingsError(
            f"{path}: the file has comments or other JSON5 syntax, which loopwarden cannot "
            "rewrite without losing them; add the entries shown by --dry-run by hand"
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _hooks_table(data: JsonObject, path: Path) -> JsonObject:
    hooks = data.get("hooks")
    if hooks is None:
        return {}
    if not isinstance(hooks, dict):
        raise SettingsError(f"{path}: 'hooks' should be an object, found {type(hooks).__name__}")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise SettingsError(
                f"{path}: hooks.{event} should be a list, found {type(groups).__name__}"
            )
    return hooks


def _handlers(group: Any) -> list[Any]:
    if isinstance(group, dict) and isinstance(group.get("hooks"), list):
        return list(group["hooks"])
    return []


def _ours(handler: Any, agent: str) -> bool:
    return isinstance(handler, dict) and is_loopwarden_command(handler.get("command"), agent)


def _group(agent: str, matcher: str | None, command: str) -> JsonObject:
    handler: JsonObject = {"type": "command", "command": command}
    adapter = ADAPTERS[agent]
    if agent == "gemini":
        handler["name"] = "loopwarden"
        handler["description"] = "loopwarden: stop tool-call loops"
    handler["timeout"] = adapter.timeout
    group: JsonObject = {} if matcher is None else {"matcher": matcher}
    group["hooks"] = [handler]
    return group


def _strip(groups: list[Any], agent: str) -> tuple[list[Any], int]:
    """``groups`` without loopwarden's handlers for ``agent`` (emptied groups dropped)."""
    kept: list[Any] = []
    removed = 0
    for group in groups:
        handlers = _handlers(group)
        mine = [h for h in handlers if _ours(h, agent)]
        if not mine:
            kept.append(group)
            continue
        removed += len(mine)
        rest = [h for h in handlers if not _ours(h, agent)]
        if rest:
            kept.append({**group, "hooks": rest})
    return kept, removed


def add_hooks(
    data: JsonObject | None, agent: str, command: str, path: Path
) -> tuple[JsonObject, list[str]]:
    """``data`` with loopwarden's entries for ``agent``; also the events that changed."""
    result = copy.deepcopy(data) if data is not None else {}
    hooks = _hooks_table(result, path)
    wanted = dict(ADAPTERS[agent].install_events)
    changed: list[str] = []
    for event in list(hooks):
        if event not in wanted:  # left over from an older loopwarden: remove ours only
            kept, removed = _strip(hooks[event], agent)
            if removed:
                changed.append(event)
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]
    for event, matcher in wanted.items():
        desired = _group(agent, matcher, command)
        groups = hooks.get(event, [])
        count = sum(_ours(h, agent) for g in groups for h in _handlers(g))
        if count == 1 and desired in groups:
            continue  # already exactly as we would write it
        kept, _ = _strip(groups, agent)
        hooks[event] = [*kept, desired]
        changed.append(event)
    if changed:
        result["hooks"] = hooks
    return result, changed


def remove_hooks(data: JsonObject | None, agent: str, path: Path) -> tuple[JsonObject, list[str]]:
    """``data`` without loopwarden's handlers for ``agent``; also the events that changed.

    Event lists and the ``hooks`` object are removed when only ours were in them,
    so installing and then uninstalling gives back the original file content.
    """
    result = copy.deepcopy(data) if data is not None else {}
    if "hooks" not in result:
        return result, []
    hooks = _hooks_table(result, path)
    changed: list[str] = []
    for event in list(hooks):
        kept, removed = _strip(hooks[event], agent)
        if removed:
            changed.append(event)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if changed and not hooks:
        del result["hooks"]
    return result, changed


def installed_hooks(data: JsonObject | None, agent: str, path: Path) -> dict[str, list[str]]:
    """Event -> loopwarden commands found for ``agent``."""
    if not data:
        return {}
    found: dict[str, list[str]] = {}
    for event, groups in _hooks_table(data, path).items():
        for group in groups:
            for handler in _handlers(group):
                if _ours(handler, agent):
                    found.setdefault(event, []).append(str(handler["command"]))
    return found


def backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.loopwarden-backup-{stamp}")
    number = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.loopwarden-backup-{stamp}-{number}")
        number += 1
    return candidate


def write_settings(path: Path, data: JsonObject) -> Path | None:
    """Write ``data`` atomically; an existing file is first copied to a timestamped backup.

    Returns the backup's path (None when there was no file).
    """
    backup: Path | None = None
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o644
        if path.exists():
            mode = path.stat().st_mode & 0o777
            backup = backup_path(path)
            backup.write_bytes(path.read_bytes())
            os.chmod(backup, mode)
        tmp = path.with_name(f".{path.name}.loopwarden-{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise SettingsError(f"{path}: cannot write the settings file ({exc})") from None
    return backup
