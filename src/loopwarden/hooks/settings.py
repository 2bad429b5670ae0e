"""The coding agents' settings files: where loopwarden's hook entries go, and how.

Claude Code (``.claude/settings.json``), Codex CLI (``.codex/hooks.json``),
Gemini CLI (``.gemini/settings.json``) and Qwen Code (``.qwen/settings.json``)
all keep hooks as
``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command", ...}]}]}}``;
GitHub Copilot CLI reads ``{"version": 1, "hooks": {EVENT: [{"type": "command",
"bash": ...}]}}`` from every file in its hooks folders, and loopwarden writes a
file of its own there (``loopwarden.json``). Where an agent differs, its adapter
says so (:meth:`~loopwarden.hooks.agents.Adapter.settings_file`, ``hook_entry``).
loopwarden adds one matcher group per event, holding one command handler, and
recognises its own handlers by their command (``... loopwarden hook AGENT`` or
``... -m loopwarden hook AGENT``), so that installing twice changes nothing and
uninstalling removes exactly those handlers and nothing else. Claude Code's
HTTP hooks (``install --http``, :mod:`.httpkeys`) are recognised by their URL
(``http://127.0.0.1:PORT/loopwarden/v1/hook/AGENT``).

Files are edited as text (:mod:`._jsonedit`): only loopwarden's entries are
added or removed, every other byte stays as the user wrote it. A file with a
key written twice is refused: JSON readers differ on which copy wins.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from ..errors import LoopwardenError
from . import _jsonedit, shellhook
from ._protocol import ENV_KEYS
from .agents import ADAPTERS, HandlerKind
from .httpkeys import HEADER_TOKEN, HTTP_TIMEOUT, env_headers, hook_url, parse_hook_url

__all__ = [
    "AGENT_TITLES",
    "SCOPES",
    "Edit",
    "HttpHook",
    "Scope",
    "SettingsError",
    "add_hooks",
    "backup_path",
    "hook_arguments",
    "hook_command",
    "installed_hooks",
    "is_loopwarden_command",
    "is_loopwarden_url",
    "read_settings",
    "read_text",
    "remove_hooks",
    "settings_path",
    "split_hook_command",
    "write_settings",
]

Scope = Literal["user", "project"]
SCOPES: tuple[Scope, ...] = ("user", "project")
AGENT_TITLES = {name: adapter.title for name, adapter in ADAPTERS.items()}
JsonObject = dict[str, Any]


class SettingsError(LoopwardenError):
    """A settings file cannot be read or changed safely (the message says why and where)."""


def settings_path(agent: str, scope: Scope, env: Mapping[str, str], project: Path) -> Path:
    """The settings file of ``agent`` for ``scope`` (``project`` is the project directory)."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    adapter = ADAPTERS.get(agent)
    own = adapter.settings_file(scope, home, env, project) if adapter is not None else None
    if own is not None:
        return own
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
    """The cheapest robust way to start this installation's hook.

    On POSIX: this interpreter without ``site`` (``-S``) running three lines that
    put loopwarden's directory on the path and call the hook's fast path. (A
    missing loopwarden then fails with exit code 1, a non-blocking hook error,
    where a missing script file would be Python's exit code 2, which the agents
    read as "deny every call".) Elsewhere: the ``loopwarden`` script.
    """
    import loopwarden

    python = Path(sys.executable)
    home = Path(loopwarden.__file__ or "").resolve().parent.parent
    if os.name == "posix" and python.is_file():
        code = (
            f"import sys; sys.path[0] = {json.dumps(str(home))}; "
            f"from {_FAST_PATH} import main; raise SystemExit(main(sys.argv[1:]))"
        )
        return [str(python), "-S", "-c", code]
    launcher = python.parent / ("loopwarden.exe" if os.name == "nt" else "loopwarden")
    if launcher.is_file() and os.access(launcher, os.X_OK):
        return [str(launcher), "hook"]
    return [sys.executable, "-m", "loopwarden", "hook"]


_FAST_PATH = "loopwarden.hooks._protocol"
# Where a hook command's own arguments end (Copilot's commands end in "|| true").
_SHELL_OPERATORS = frozenset({"||", "&&", ";", "|", "&"})


def hook_command(agent: str, extra: list[str] | None = None) -> str:
    """The shell command the agent runs: absolute paths, quoted for ``sh``. Codex CLI and
    Gemini CLI get the shell hook around it where bash can run it (:mod:`.shellhook`)."""
    launcher = _executable()
    hook = [agent, *(extra or [])]
    if agent in shellhook.AGENTS and "-S" in launcher:
        shell = shellhook.shell_command(launcher, hook)
        if shell is not None:
            return shell
    return shlex.join([*launcher, *hook])


def hook_arguments(command: object) -> list[str] | None:
    """The hook's own arguments (``AGENT [options]``) in a loopwarden hook command;
    None when ``command`` does not run loopwarden's hook."""
    found = split_hook_command(command)
    return None if found is None else found[1]


def split_hook_command(command: object) -> tuple[list[str], list[str]] | None:
    """(the launcher's words, the hook's own arguments) of a loopwarden hook command;
    None when ``command`` does not run loopwarden's hook."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for index, word in enumerate(words):
        name = os.path.basename(word)
        if (
            word == "-c"
            and index + 1 < len(words)
            and f"from {_FAST_PATH} import" in words[index + 1]
        ):
            start = index + 2
        elif name in ("loopwarden", "loopwarden.exe"):
            if words[index + 1 : index + 2] != ["hook"]:
                continue
            start = index + 2
        elif word == "-m" and words[index + 1 : index + 3] == ["loopwarden", "hook"]:
            start = index + 3
        else:
            continue
        end = next((i for i in range(start, len(words)) if words[i] in _SHELL_OPERATORS), None)
        return words[:start], words[start:end]
    return None


def is_loopwarden_command(command: object, agent: str | None = None) -> bool:
    """True for a command that runs ``loopwarden hook`` (for ``agent``, if given)."""
    args = hook_arguments(command)
    return args is not None and (agent is None or args[:1] == [agent])


def is_loopwarden_url(url: object, agent: str | None = None) -> bool:
    """True for the URL of one of loopwarden's HTTP hooks (for ``agent``, if given)."""
    found = parse_hook_url(url)
    return found is not None and (agent is None or found[1] == agent)


class HttpHook(NamedTuple):
    """What ``install --http`` writes into HTTP hook entries: the port, the key, and the
    hook's own options (``--config FILE`` ...)."""

    port: int
    token: str
    args: list[str]

    def handler(self, agent: str) -> JsonObject:
        """The HTTP hook handler: Claude Code POSTs the event there, with the key and
        (filled in from its own environment) the variables the hook's answer depends on."""
        return {
            "type": "http",
            "url": hook_url(self.port, agent, self.args),
            "headers": {HEADER_TOKEN: self.token, **env_headers()},
            "allowedEnvVars": list(ENV_KEYS),
            "timeout": HTTP_TIMEOUT,
            "onFailure": "continue",
        }


def read_text(path: Path) -> str | None:
    """The file's text, checked to be one JSON object without repeated keys; None when
    the file does not exist."""
    try:
        text = path.read_bytes().decode("utf-8")  # as it is: no newline translation
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the settings file ({exc})") from None
    if not text.strip():
        return text
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
    repeated = _jsonedit.duplicate_keys(_jsonedit.parse(text))
    if repeated:
        key, offset = repeated[0]
        line = text.count("\n", 0, offset) + 1
        raise SettingsError(
            f"{path}:{line}: the key {key!r} appears more than once; the agent reads only "
            "one of them. Merge them into one, then run the command again"
        )
    return text


def read_settings(path: Path) -> JsonObject | None:
    """The file's JSON object, or None when it does not exist."""
    text = read_text(path)
    if text is None:
        return None
    return json.loads(text) if text.strip() else {}


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
    if isinstance(group, dict) and "bash" in group:  # Copilot: the entry is the handler
        return [group]
    return []


def _command(handler: dict[str, Any]) -> Any:
    if handler.get("type") == "http":
        return handler.get("url")
    return handler.get("command", handler.get("bash"))


def _ours(handler: Any, agent: str) -> bool:
    if not isinstance(handler, dict):
        return False
    if handler.get("type") == "http":
        return is_loopwarden_url(handler.get("url"), agent)
    return is_loopwarden_command(_command(handler), agent)


def _group(
    agent: str,
    event: str,
    matcher: str | None,
    command: str,
    how: HandlerKind = "command",
    http: HttpHook | None = None,
) -> JsonObject:
    adapter = ADAPTERS[agent]
    own = adapter.hook_entry(event, matcher, command)
    if own is not None:
        return own
    if how == "http" and http is not None:
        group: JsonObject = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [http.handler(agent)]
        return group
    if how == "serve" and http is not None:
        command = f"{command} --http-port {http.port}"
    handler: JsonObject = {"type": "command", "command": command}
    if agent == "gemini":
        handler["name"] = "loopwarden"
        handler["description"] = "loopwarden: stop tool-call loops"
    handler["timeout"] = adapter.timeout
    group = {} if matcher is None else {"matcher": matcher}
    group["hooks"] = [handler]
    return group


class Edit(NamedTuple):
    """A settings file's new text, the events that changed, and the containers
    (``hooks``, event lists) that loopwarden created in it."""

    text: str
    changed: list[str]
    created: list[str]


def _target(
    text: str, agent: str, events: set[str] | None, changed: list[str], drop: set[str] | None
) -> tuple[_jsonedit.Node, int] | None:
    """The next of loopwarden's entries to remove (a handler, a group of only ours, or an
    event list that only ours were in when it is in ``drop``; None: all of them)."""
    root = _jsonedit.parse(text)
    hooks = root.get("hooks")
    if hooks is None or hooks.kind != "object":
        return None
    for index, (event, _) in enumerate(hooks.keys):
        groups = hooks.items[index]
        if (events is not None and event not in events) or groups.kind != "array":
            continue
        for position, group in enumerate(json.loads(text[groups.start : groups.end])):
            handlers = _handlers(group)
            mine = [i for i, handler in enumerate(handlers) if _ours(handler, agent)]
            if not mine:
                continue
            if event not in changed:
                changed.append(event)
            if len(mine) == len(handlers):
                return groups, position
            node = groups.items[position].get("hooks")
            return (node, mine[0]) if node is not None else None
        if not groups.items and event in changed and (drop is None or event in drop):
            return hooks, index
    if not hooks.items and changed and (drop is None or "hooks" in drop):
        return root, root.index("hooks")
    return None


def _remove(
    text: str, agent: str, events: set[str] | None, drop: set[str] | None
) -> tuple[str, list[str]]:
    """``text`` without loopwarden's handlers for ``agent`` (in ``events``; None: all),
    and without the containers in ``drop`` that only they were in."""
    changed: list[str] = []
    while (found := _target(text, agent, events, changed, drop)) is not None:
        text = _jsonedit.remove_item(text, *found)
    return text, changed


def _crlf(edit: Callable[..., Edit]) -> Callable[..., Edit]:
    """Edit a file with Windows line ends as if it had ``\\n`` ones, and keep its ``\\r\\n``."""

    @functools.wraps(edit)
    def wrapper(text: str | None, *args: Any, **kwargs: Any) -> Edit:
        if text is None or "\r\n" not in text:
            return edit(text, *args, **kwargs)
        done = edit(text.replace("\r\n", "\n"), *args, **kwargs)
        return done._replace(text=done.text.replace("\n", "\r\n"))

    return wrapper


def _wanted(agent: str, http: HttpHook | None) -> dict[str, tuple[str | None, HandlerKind]]:
    """Event -> (matcher, how) of the entries ``install`` writes for ``agent``."""
    adapter = ADAPTERS[agent]
    if http is not None:
        return {event: (matcher, how) for event, matcher, how in adapter.http_install_events}
    return {event: (matcher, "command") for event, matcher in adapter.install_events}


@_crlf
def add_hooks(
    text: str | None, agent: str, command: str, path: Path, http: HttpHook | None = None
) -> Edit:
    """``text`` with loopwarden's entries for ``agent`` (None: no file yet); ``http``:
    Claude Code's HTTP hooks for the tool-call events (command hooks where it has none)."""
    if text is None or not text.strip():
        text = json.dumps(dict(ADAPTERS[agent].fresh_settings))
        fresh = True
    else:
        fresh = False
    data = json.loads(text)
    hooks = _hooks_table(data, path)
    wanted = _wanted(agent, http)
    # Left over from an older loopwarden: remove ours only (and lists only ours were in).
    stale = set(hooks) - set(wanted)
    text, changed = _remove(text, agent, stale, stale)
    created: list[str] = []
    for event, (matcher, how) in wanted.items():
        desired = _group(agent, event, matcher, command, how, http)
        groups = json.loads(text).get("hooks", {}).get(event, [])
        count = sum(_ours(h, agent) for g in groups for h in _handlers(g))
        if count == 1 and desired in groups:
            continue  # already exactly as we would write it
        text, _ = _remove(text, agent, {event}, set())
        root = _jsonedit.parse(text)
        if root.get("hooks") is None:
            text = _jsonedit.set_member(text, root, "hooks", {})
            created.append("hooks")
            root = _jsonedit.parse(text)
        table = root.get("hooks")
        if table is None:  # pragma: no cover - added just above
            raise SettingsError(f"{path}: could not add the hooks table")
        groups_node = table.get(event)
        if groups_node is None:
            text = _jsonedit.set_member(text, table, event, [desired])
            created.append(event)
        else:
            text = _jsonedit.append_item(text, groups_node, desired)
        changed.append(event)
    if fresh:
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"
    return Edit(text, changed, created)


@_crlf
def remove_hooks(
    text: str | None, agent: str, path: Path, created: list[str] | None = None
) -> Edit:
    """``text`` without loopwarden's handlers for ``agent``.

    Event lists and the ``hooks`` object are removed when only ours were in them
    and loopwarden created them (``created``, from the install record); without a
    record, emptied event lists and an emptied ``hooks`` object go.
    """
    if text is None or not text.strip():
        return Edit(text or "", [], [])
    _hooks_table(json.loads(text), path)
    new, changed = _remove(text, agent, None, None if created is None else set(created))
    return Edit(new, changed, [])


def installed_hooks(data: JsonObject | None, agent: str, path: Path) -> dict[str, list[str]]:
    """Event -> loopwarden commands found for ``agent``."""
    if not data:
        return {}
    found: dict[str, list[str]] = {}
    for event, groups in _hooks_table(data, path).items():
        for group in groups:
            for handler in _handlers(group):
                if _ours(handler, agent):
                    found.setdefault(event, []).append(str(_command(handler)))
    return found


def backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.loopwarden-backup-{stamp}")
    number = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.loopwarden-backup-{stamp}-{number}")
        number += 1
    return candidate


def write_settings(path: Path, text: str | bytes, *, private: bool = False) -> Path | None:
    """Write ``text`` atomically; an existing file is first copied to a timestamped backup.

    A new file gets mode 0644, or 0600 when ``private`` (it holds the HTTP hooks' key);
    an existing one keeps its mode. Returns the backup's path (None when there was no file).
    """
    backup: Path | None = None
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o600 if private else 0o644
        if path.exists():
            mode = path.stat().st_mode & 0o777
            backup = backup_path(path)
            backup.write_bytes(path.read_bytes())
            os.chmod(backup, mode)
        tmp = path.with_name(f".{path.name}.loopwarden-{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise SettingsError(f"{path}: cannot write the settings file ({exc})") from None
    return backup
