"""``loopwarden install claude-code|codex|gemini``: add (or remove) the hook entries.

Merges with the hooks already in the agent's settings file, changes nothing
when the entries are already there, copies the file to a timestamped backup
before changing it, and ``--uninstall`` removes exactly loopwarden's entries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..hooks.agents import ADAPTERS
from ..hooks.settings import (
    AGENT_TITLES,
    Scope,
    SettingsError,
    add_hooks,
    hook_command,
    read_settings,
    remove_hooks,
    settings_path,
    write_settings,
)

__all__ = ["main"]

_NOTES = {
    "codex": (
        "Codex CLI runs new hooks only once they are trusted: start codex in this project "
        "and approve them with /hooks (until then they are silently skipped)."
    ),
    "gemini": (
        'Gemini CLI releases that do not enable hooks by default need "hooksConfig": '
        '{"enabled": true} in settings.json.'
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwarden install",
        description=(
            "Add loopwarden's hook to a coding agent's settings (or remove it with "
            "--uninstall). Existing hooks are kept; the file is backed up before a change."
        ),
    )
    parser.add_argument("agent", choices=sorted(ADAPTERS), help="the coding agent")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--user",
        dest="scope",
        action="store_const",
        const="user",
        help="the user's settings, for every project (default)",
    )
    scope.add_argument(
        "--project",
        dest="scope",
        action="store_const",
        const="project",
        help="the settings of the project in --dir (default: the current directory)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="project directory for --project")
    parser.add_argument(
        "--uninstall", action="store_true", help="remove loopwarden's entries instead"
    )
    parser.add_argument(
        "--config", metavar="FILE", help="config file the hook should use (made absolute)"
    )
    parser.add_argument(
        "--state", metavar="URL_OR_PATH", help="state store the hook should use (a SQLite path)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resulting file instead of writing it"
    )
    return parser


def _hook_args(args: argparse.Namespace) -> list[str]:
    extra: list[str] = []
    if args.config:
        extra += ["--config", os.path.abspath(os.path.expanduser(args.config))]
    if args.state:
        state = args.state
        extra += [
            "--state",
            state if "://" in state else os.path.abspath(os.path.expanduser(state)),
        ]
    return extra


def _precompile_hook_path() -> None:
    """Write the byte code of the modules every hook call imports.

    ``pip install`` does this for regular installs; editable installs and
    environments with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile
    them from source on every tool call. Best effort: a read-only install
    simply stays as it is.
    """
    import importlib.util
    import py_compile

    import loopwarden.cli.hook  # noqa: F401 - imports the whole hot path below

    hot_path = [
        "loopwarden",
        "loopwarden.cli",
        "loopwarden.cli.hook",
        "loopwarden.hooks",
        "loopwarden.hooks._protocol",
    ]
    for module in [sys.modules[name] for name in hot_path]:
        source = getattr(module, "__file__", None)
        if not source or not source.endswith(".py"):
            continue
        try:
            py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)
        except Exception:  # nothing to gain from failing an install over byte code
            continue


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    scope: Scope = "project" if args.scope == "project" else "user"
    project = (args.dir or Path.cwd()).resolve()
    path = settings_path(args.agent, scope, os.environ, project)
    title = AGENT_TITLES[args.agent]
    try:
        data = read_settings(path)
        if args.uninstall:
            new, changed = remove_hooks(data, args.agent, path)
        else:
            new, changed = add_hooks(
                data, args.agent, hook_command(args.agent, _hook_args(args)), path
            )
        if args.dry_run:
            print(json.dumps(new, indent=2, ensure_ascii=False))
            return 0
        if not changed:
            state = "not installed" if args.uninstall else "already installed"
            print(f"loopwarden hooks for {title} are {state} in {path}; nothing changed.")
            return 0
        backup = write_settings(path, new)
    except SettingsError as exc:
        print(f"loopwarden install: error: {exc}", file=sys.stderr)
        return 1
    verb = "Removed loopwarden hooks for" if args.uninstall else "Installed loopwarden hooks for"
    print(f"{verb} {title} in {path}")
    print(f"  events: {', '.join(changed)}")
    if backup is not None:
        print(f"  backup of the previous file: {backup}")
    if not args.uninstall:
        _precompile_hook_path()
        print(f"  command: {hook_command(args.agent, _hook_args(args))}")
        note = _NOTES.get(args.agent)
        if note:
            print(f"  note: {note}")
        print("  check it with: loopwarden doctor")
    return 0
