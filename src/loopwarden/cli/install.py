"""``loopwarden install AGENT``: add (or remove) the hook entries.

Merges with the hooks already in the agent's settings file (as a text edit: the
rest of the file keeps its bytes), changes nothing when the entries are already
there, copies the file to a timestamped backup before changing it, and refuses
a file with a repeated key. ``--uninstall`` gives back the file as it was before
the install when nobody changed it since, and otherwise removes exactly
loopwarden's entries.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from ..hooks import fileinstall, installrecord, shellhook
from ..hooks._protocol import AGENTS, socket_path
from ..hooks.agents import ADAPTERS
from ..hooks.httpkeys import HttpKeys, KeysError, ensure_keys, helper_name, probe, record_path
from ..hooks.settings import (
    AGENT_TITLES,
    Edit,
    HttpHook,
    Scope,
    SettingsError,
    add_hooks,
    hook_command,
    installed_hooks,
    read_text,
    remove_hooks,
    settings_path,
    write_settings,
)
from ._clickutil import CONTEXT, EXIT_OK, CommandFailure, UsageFailure, run_command

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
    "opencode": (
        "OpenCode loads the plugin when it starts: restart running OpenCode sessions. "
        "OPENCODE_PURE=1 or --pure skips it."
    ),
    "cline": (
        "Cline has no way to refuse one call and go on: where loopwarden would block a "
        "call, Cline ends the run (see docs/hooks.md)."
    ),
    "copilot": (
        "Copilot CLI reads this file at the start of each session; project hooks "
        "(.github/hooks) run only in folders you trust."
    ),
    "qwen": (
        "Qwen Code itself ends a turn at the 5th identical tool call in a row; loopwarden "
        "catches the loops it lets through (changing arguments, cycles, failures, "
        "missing tools, loops after compaction)."
    ),
}


@click.command(
    name="install",
    help=(
        "Add loopwarden's hook to a coding agent's settings (or remove it with "
        "--uninstall). Existing hooks are kept; the file is backed up before a change."
    ),
    context_settings=CONTEXT,
)
@click.argument("agent", type=click.Choice(sorted(AGENTS)), metavar="AGENT")
@click.option("--user", is_flag=True, help="The user's settings, for every project (default).")
@click.option(
    "--project",
    is_flag=True,
    help="The settings of the project in --dir (default: the current directory).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="Project directory for --project.",
)
@click.option("--uninstall", is_flag=True, help="Remove loopwarden's entries instead.")
@click.option("--config", metavar="FILE", help="Config file the hook should use (made absolute).")
@click.option(
    "--state", metavar="URL_OR_PATH", help="State store the hook should use (a SQLite path)."
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="The hook helper serves Prometheus metrics there (needs loopwarden[prometheus]).",
)
@click.option(
    "--http/--command",
    "http",
    default=None,
    help=(
        "Claude Code: HTTP hooks for tool calls, answered by the hook helper without a "
        "process (default for --user), or command hooks (default for --project)."
    ),
)
@click.option("--dry-run", is_flag=True, help="Print the resulting file instead of writing it.")
def install_command(
    agent: str,
    user: bool,
    project: bool,
    directory: Path | None,
    uninstall: bool,
    config: str | None,
    state: str | None,
    metrics: str | None,
    http: bool | None,
    dry_run: bool,
) -> int:
    if user and project:
        raise UsageFailure("--user and --project cannot be used together")
    if http and not ADAPTERS[agent].http_install_events:
        raise UsageFailure(f"--http: {AGENT_TITLES[agent]} has no HTTP hooks (Claude Code has)")
    if http and project:
        raise UsageFailure(
            "--http cannot be used with --project: HTTP hooks carry your own port and key, "
            "which do not belong in a project's shared settings file; install them for your "
            "user (the default), or use command hooks in the project"
        )
    if metrics is not None:
        from ..telemetry.prometheus import parse_address

        try:
            parse_address(metrics)
        except ValueError as exc:
            raise UsageFailure(f"--metrics: {exc}") from None
    scope: Scope = "project" if project else "user"
    extra = _hook_args(config, state, metrics)
    if agent in fileinstall.FILE_AGENTS:
        return _install_files(agent, scope, directory, uninstall, extra, dry_run)
    path = settings_path(agent, scope, os.environ, (directory or Path.cwd()).resolve())
    title = AGENT_TITLES[agent]
    command = hook_command(agent, extra)
    env = os.environ
    restored = False
    if http is None:
        http = scope == "user" and bool(ADAPTERS[agent].http_install_events)
    keys: HttpKeys | None = None
    try:
        text = read_text(path)
        if uninstall:
            edit = remove_hooks(text, agent, path, _created(env, path))
        else:
            if http or shellhook.SCRIPT.name in command:
                keys = _http_keys(env)  # the shell hook reads them at every event
            spec = HttpHook(keys.port, keys.token, extra) if http and keys is not None else None
            edit = add_hooks(text, agent, command, path, spec)
        if dry_run:
            click.echo(edit.text, nl=not edit.text.endswith("\n"))
            return EXIT_OK
        if not edit.changed:
            status = "not installed" if uninstall else "already installed"
            click.echo(f"loopwarden hooks for {title} are {status} in {path}; nothing changed.")
            return EXIT_OK
        if uninstall:
            backup, restored = _uninstall(env, path, text, edit)
        else:
            backup = _install(env, path, text, edit, agent, private=bool(http))
    except (SettingsError, KeysError) as exc:
        raise CommandFailure(str(exc)) from None
    changed = edit.changed
    verb = "Removed loopwarden hooks for" if uninstall else "Installed loopwarden hooks for"
    click.echo(f"{verb} {title} in {path}")
    click.echo(f"  events: {', '.join(changed)}")
    if restored:
        click.echo("  the file is back exactly as it was before the install")
    if backup is not None:
        click.echo(f"  backup of the previous file: {backup}")
    if not uninstall:
        _precompile_hook_path()
        click.echo(f"  command: {command}")
        if keys is not None and not http:
            click.echo(
                f"  the shell hook sends events to the helper at http://127.0.0.1:{keys.port} "
                f"(no Python start per event; key in {record_path(env)})"
            )
        if keys is not None and http:
            click.echo(
                f"  HTTP hooks: http://127.0.0.1:{keys.port} (key in {record_path(env)}, "
                "readable by you only; the settings file holds it too)"
            )
            if os.name == "posix" and path.stat().st_mode & 0o044:
                click.echo(
                    f"  note: other users can read {path}, which holds the key: "
                    f"'chmod 600 {path}' keeps it yours"
                )
        note = _NOTES.get(agent)
        if note:
            click.echo(f"  note: {note}")
        click.echo("  check it with: loopwarden doctor")
    return EXIT_OK


def _http_keys(env: Mapping[str, str]) -> HttpKeys:
    """The user's HTTP hook port and key; a new port when another program (or another
    loopwarden installation) holds the recorded one."""
    keys = ensure_keys(env)
    found = probe(keys.port, keys.token, timeout=2.0)
    own = helper_name(socket_path(env))
    if found.kind == "closed" or (found.kind in ("served", "refused") and found.helper == own):
        return keys
    moved = ensure_keys(env, new_port=True)
    click.echo(
        f"  port {keys.port} is taken ({found.helper or found.detail or found.kind}): "
        f"loopwarden's HTTP hooks move to port {moved.port}"
    )
    return moved


def _install_files(
    agent: str,
    scope: Scope,
    directory: Path | None,
    uninstall: bool,
    extra: list[str],
    dry_run: bool,
) -> int:
    """OpenCode and Cline: loopwarden's own files in the agent's directory."""
    env = os.environ
    title = AGENT_TITLES[agent]
    target = fileinstall.target_dir(agent, scope, env, (directory or Path.cwd()).resolve())
    try:
        if uninstall:
            if dry_run:
                for path in fileinstall.find_own(target):
                    click.echo(f"would remove {path}")
                return EXIT_OK
            done = fileinstall.uninstall(env, target)
        else:
            files = fileinstall.wanted(agent, target, extra)
            if dry_run:
                for own in files:
                    click.echo(f"--- {own.path}")
                    click.echo(own.text, nl=False)
                return EXIT_OK
            done = fileinstall.install(env, files, target)
    except SettingsError as exc:
        raise CommandFailure(str(exc)) from None
    if not done.files:
        status = "not installed" if uninstall else "already installed"
        click.echo(f"loopwarden for {title} is {status} in {target}; nothing changed.")
        return EXIT_OK
    verb = "Removed loopwarden from" if uninstall else "Installed loopwarden for"
    click.echo(f"{verb} {title} in {target}")
    for path in done.files:
        click.echo(f"  {'removed' if uninstall or not path.exists() else 'wrote'} {path}")
    for path in done.dirs:
        click.echo(f"  {'removed' if uninstall else 'created'} the directory {path}")
    if not uninstall:
        _precompile_hook_path()
        click.echo(f"  command: {hook_command(agent, extra)}")
        note = _NOTES.get(agent)
        if note:
            click.echo(f"  note: {note}")
        click.echo("  check it with: loopwarden doctor")
    return EXIT_OK


def _created(env: Mapping[str, str], path: Path) -> list[str] | None:
    record = installrecord.load(env, path)
    return None if record is None else record.created


def _install(
    env: Mapping[str, str],
    path: Path,
    text: str | None,
    edit: Edit,
    agent: str,
    *,
    private: bool = False,
) -> Path | None:
    before = None if text is None else path.read_bytes()
    had_ours = bool(text and text.strip() and installed_hooks(json.loads(text), agent, path))
    created = list(edit.created)
    if not path.parent.exists():
        created.append(_FOLDER)  # removed again by an uninstall that deletes the file
    backup = write_settings(path, edit.text, private=private)
    installrecord.remember(
        env,
        path,
        before=before,
        backup=backup,
        had_ours=had_ours,
        written=edit.text.encode("utf-8"),
        created=created,
    )
    return backup


_FOLDER = "<folder>"
"""Install-record mark: ``install`` created the settings file's folder."""


def _uninstall(
    env: Mapping[str, str], path: Path, text: str | None, edit: Edit
) -> tuple[Path | None, bool]:
    """Write the file back: its original bytes if it is still as loopwarden left it,
    else ``edit`` (only loopwarden's entries removed). Returns (backup, restored)."""
    record = installrecord.load(env, path)
    current = None if text is None else path.read_bytes()
    untouched = record is not None and record.after == installrecord.sha256(current)
    installrecord.forget(env, path)
    if untouched and record is not None and record.original == "absent":
        try:
            path.unlink()
        except OSError as exc:
            raise SettingsError(f"{path}: cannot remove the settings file ({exc})") from None
        if _FOLDER in record.created:
            with contextlib.suppress(OSError):  # not empty (or gone): it stays
                path.parent.rmdir()
        return None, True
    original = record.original_bytes() if untouched and record is not None else None
    if original is not None:
        return write_settings(path, original), True
    return write_settings(path, edit.text), False


def _hook_args(config: str | None, state: str | None, metrics: str | None = None) -> list[str]:
    extra: list[str] = []
    if config:
        extra += ["--config", os.path.abspath(os.path.expanduser(config))]
    if state:
        extra += [
            "--state",
            state if "://" in state else os.path.abspath(os.path.expanduser(state)),
        ]
    if metrics:
        extra += ["--metrics", metrics]
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

    import loopwarden.cli.hook
    import loopwarden.hooks.httpstart  # noqa: F401 - with cli.hook: every module below

    hot_path = [
        "loopwarden",
        "loopwarden.cli",
        "loopwarden.cli.hook",
        "loopwarden.hooks",
        "loopwarden.hooks._protocol",
        "loopwarden.hooks.httpkeys",
        "loopwarden.hooks.httpserve",
        "loopwarden.hooks.httpstart",
        "loopwarden.hooks.peeruid",
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
    return run_command(install_command, argv, "loopwarden install")
