"""Agents that load loopwarden from files of its own: OpenCode's plugin, Cline's hook files.

Claude Code, Codex and Gemini CLI list their hooks in a settings file, which
``install`` edits (:mod:`.settings`). OpenCode loads every ``*.js`` file in its
plugins directory, and Cline runs every file named after an event in its
hooks directory: for them ``install`` writes loopwarden's own files there and
changes no file of the user's. Each file starts with :data:`MARKER`, so that
loopwarden recognises (and replaces or removes) only its own files; a user's
file that has the name loopwarden wants is never touched.

``--uninstall`` removes the files, and the directories that ``install``
created for them (recorded in the install record) once they are empty, so the
user's configuration directory is back as it was, byte for byte.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from . import installrecord
from .settings import Scope, SettingsError, _executable

__all__ = [
    "FILE_AGENTS",
    "MARKER",
    "InstallResult",
    "OwnFile",
    "find_own",
    "install",
    "own_command",
    "target_dir",
    "uninstall",
    "wanted",
]

FILE_AGENTS = ("opencode", "cline")
MARKER = "loopwarden: stops tool-call loops"
"""On the first lines of every file loopwarden writes (its own files are found by it)."""

_PLUGIN_MODULE = "opencode_plugin.mjs"
_CLINE_EVENTS = ("PreToolUse", "PostToolUse")
# Names Cline runs for an event; a user's file of the first name makes loopwarden use the next.
_CLINE_SUFFIXES = (".sh", ".bash")


class OwnFile(NamedTuple):
    """A file loopwarden wants in the agent's directory."""

    path: Path
    text: str
    executable: bool = False


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def target_dir(agent: str, scope: Scope, env: Mapping[str, str], project: Path) -> Path:
    """Where the agent looks for loopwarden's files (for ``scope``)."""
    if agent == "opencode":
        if scope == "project":
            return project / ".opencode" / "plugins"
        xdg = env.get("XDG_CONFIG_HOME")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else _home(env) / ".config"
        return base / "opencode" / "plugins"
    if agent == "cline":
        if scope == "project":
            return project / ".clinerules" / "hooks"
        cline_dir = env.get("CLINE_DIR")
        return (Path(cline_dir) if cline_dir else _home(env) / ".cline") / "hooks"
    raise ValueError(f"not an agent with files of its own: {agent!r}")


def _hook_words(agent: str, extra: list[str]) -> list[str]:
    return [*_executable(), agent, *extra]


def _ours(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(512)
    except OSError:
        return False
    return MARKER.encode() in head


def _opencode_plugin(agent: str, extra: list[str]) -> str:
    import loopwarden

    module = Path(loopwarden.__file__ or "").resolve().parent / "hooks" / _PLUGIN_MODULE
    words = _hook_words(agent, extra)
    options = {"command": words, "args": [agent, *extra]}
    return (
        f"// {MARKER} (written by `loopwarden install opencode`; remove it with\n"
        "// `loopwarden install opencode --uninstall`). docs: loopwarden docs/hooks.md\n"
        f"import {{ loopwarden }} from {json.dumps(str(module))};\n"
        f"export default loopwarden({json.dumps(options)});\n"
    )


def _cline_hook(agent: str, extra: list[str]) -> str:
    # Cline starts a hook file by its #! line, but swaps an interpreter named python or
    # python3 for the one on PATH: sh keeps this installation's interpreter.
    return (
        "#!/bin/sh\n"
        f"# {MARKER} (written by `loopwarden install cline`; remove it with\n"
        "# `loopwarden install cline --uninstall`). docs: loopwarden docs/hooks.md\n"
        f"exec {shlex.join(_hook_words(agent, extra))}\n"
    )


def wanted(agent: str, directory: Path, extra: list[str]) -> list[OwnFile]:
    """The files loopwarden wants in ``directory``, named so that none is a user's file."""
    if agent == "opencode":
        return [OwnFile(directory / "loopwarden.js", _opencode_plugin(agent, extra))]
    files = []
    for event in _CLINE_EVENTS:
        for suffix in _CLINE_SUFFIXES:
            path = directory / f"{event}{suffix}"
            if not path.exists() or _ours(path):
                files.append(OwnFile(path, _cline_hook(agent, extra), executable=True))
                break
        else:
            taken = ", ".join(f"{event}{s}" for s in _CLINE_SUFFIXES)
            raise SettingsError(
                f"{directory}: {taken} are files of your own; loopwarden does not replace "
                "them. Rename one of them, then run the command again"
            )
    return files


def find_own(directory: Path) -> list[Path]:
    """loopwarden's files in ``directory`` (any name)."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.is_file() and not p.is_symlink() and _ours(p)]


def own_command(path: Path) -> list[str] | None:
    """The hook command written in one of loopwarden's files (None if unreadable)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        if line.startswith("export default loopwarden(") and line.endswith(");"):
            try:
                options = json.loads(line[len("export default loopwarden(") : -2])
            except ValueError:
                return None
            command = options.get("command") if isinstance(options, dict) else None
            return [str(w) for w in command] if isinstance(command, list) else None
        if line.startswith("exec "):
            try:
                return shlex.split(line[len("exec ") :])
            except ValueError:
                return None
    return None


class InstallResult(NamedTuple):
    """What changed: files written or removed, and directories created or removed."""

    files: list[Path]
    dirs: list[Path]


def _missing_parents(directory: Path) -> list[Path]:
    missing = []
    for candidate in [directory, *directory.parents]:
        if candidate.exists():
            break
        missing.append(candidate)
    return missing  # deepest first


def install(env: Mapping[str, str], files: list[OwnFile], directory: Path) -> InstallResult:
    """Write ``files`` (unchanged ones are left alone) and record what was created."""
    created = _missing_parents(directory)
    stale = [p for p in find_own(directory) if p not in {f.path for f in files}]
    written: list[Path] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for own in files:
            data = own.text.encode("utf-8")
            if own.path.exists() and own.path.read_bytes() == data:
                continue
            tmp = own.path.with_name(f".{own.path.name}.loopwarden-{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, 0o755 if own.executable else 0o644)
            os.replace(tmp, own.path)
            written.append(own.path)
        for path in stale:  # e.g. a Cline hook under another name than now
            path.unlink()
            installrecord.forget(env, path)
            written.append(path)
    except OSError as exc:
        raise SettingsError(f"{directory}: cannot write loopwarden's files ({exc})") from None
    for own in files:
        previous = installrecord.load(env, own.path)
        dirs = [str(d) for d in created] + (previous.created if previous else [])
        installrecord.remember(
            env,
            own.path,
            before=None,  # loopwarden's files are its own from the start
            backup=None,
            had_ours=False,
            written=own.text.encode("utf-8"),
            created=dirs,
        )
    return InstallResult(written, created)


def uninstall(env: Mapping[str, str], directory: Path) -> InstallResult:
    """Remove loopwarden's files from ``directory``, then the directories it created."""
    removed: list[Path] = []
    created: set[str] = set()
    for path in find_own(directory):
        record = installrecord.load(env, path)
        if record is not None:
            created.update(record.created)
        try:
            path.unlink()
        except OSError as exc:
            raise SettingsError(f"{path}: cannot remove loopwarden's file ({exc})") from None
        installrecord.forget(env, path)
        removed.append(path)
    dirs: list[Path] = []
    for name in sorted(created, key=len, reverse=True):  # deepest first
        candidate = Path(name)
        try:
            candidate.rmdir()  # only when empty: never a file of the user's
        except OSError:
            continue
        dirs.append(candidate)
    return InstallResult(removed, dirs)
