"""The hook's command line, and where its config, state and log are.

Everything here runs for every hook event (in the hook process, or in the
helper with the hook's own argv, environment and working directory), so path
discovery costs ``os.path`` work and one ``stat`` per candidate, and parsed
command lines are cached.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .._logging import logger
from ..config import Config
from ..errors import LoopwardenError
from ..stores.sqlite import default_state_path
from .agents import ADAPTERS

__all__ = [
    "HOOK_DEFAULT_CONFIG",
    "HOOK_HELP",
    "HOOK_OPTIONS",
    "HookOption",
    "HookOptions",
    "UsageError",
    "absolute_path",
    "agent_id_for",
    "config_path",
    "default_state",
    "find_config",
    "log_path",
    "parse_args",
    "store_url",
]

HOOK_DEFAULT_CONFIG: Mapping[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
"""Used when no config file is found: installing the hook is the opt-in to detection."""


class UsageError(LoopwardenError):
    """Bad command line (exit code 1: agents treat it as a non-blocking hook error)."""


class HookOptions(NamedTuple):
    agent: str
    config: str | None
    state: str | None
    agent_id: str | None
    no_daemon: bool
    stop_daemon: bool
    metrics: str | None = None
    event: str | None = None
    """The event's name, for agents that do not send it (``--event``)."""
    http_port: int | None = None
    """The helper's HTTP port (``--http-port``; 0: ``auto``, the port in the user's key
    file): the hook makes sure the helper answers there."""


HOOK_HELP = """Coding-agent hook: reads one hook event as JSON on stdin and prints the
answer the agent expects (allow, deny with a reason, a warning for the model,
or the end of the turn).

AGENT is claude-code, codex or gemini. 'loopwarden install AGENT' adds the hook
to the agent's settings, which then runs it around every tool call; a small
helper process keeps the guard loaded between calls (it exits after
{idle} without a hook event, or on --stop-daemon).

\b
Exit codes: 0 the event was answered (a block or a stop is an answer, never
exit 2, which the agents would read as a block of the hook's own making);
1 bad command line.
"""
"""``loopwarden hook --help`` in click's layout (``\\b`` keeps a paragraph as written);
``{idle}`` is the helper's idle time."""


class HookOption(NamedTuple):
    """One option of ``loopwarden hook``: the flag, its metavar (None: a switch), its help."""

    flag: str
    metavar: str | None
    help: str


HOOK_OPTIONS = (
    HookOption(
        "--config",
        "FILE",
        "loopwarden/OpenClaw config file (default: $LOOPWARDEN_CONFIG, then "
        "~/.config/loopwarden/config.json5 or config.json; none: detection on with defaults).",
    ),
    HookOption(
        "--state",
        "URL_OR_PATH",
        "State store: a SQLite file path or store URL (default: $LOOPWARDEN_STATE, then "
        "the config's loopwarden.store, then ~/.local/share/loopwarden/state.db).",
    ),
    HookOption(
        "--agent-id",
        "ID",
        "Agent id for per-agent config blocks (default: $LOOPWARDEN_AGENT_ID or the agent name).",
    ),
    HookOption(
        "--no-daemon",
        None,
        "Handle the event in this process; do not use or start the helper process.",
    ),
    HookOption("--stop-daemon", None, "Stop the running helper process and exit."),
    HookOption(
        "--metrics",
        "HOST:PORT",
        "The helper process serves Prometheus metrics at http://HOST:PORT/metrics "
        "(needs loopwarden[prometheus]; events handled in the hook process are not counted).",
    ),
    HookOption(
        "--event",
        "NAME",
        "The hook event this command is installed for (for agents whose events do not "
        "carry their name, such as GitHub Copilot CLI).",
    ),
    HookOption(
        "--http-port",
        "PORT",
        "Make sure the helper answers HTTP hooks on 127.0.0.1:PORT ('auto': the port in your "
        "key file); written by 'loopwarden install' for Claude Code's session-start and "
        "prompt hooks, and used by the shell hook of Codex CLI and Gemini CLI.",
    ),
)
"""The options, shared by the parser below and the help ``loopwarden hook --help`` prints."""


# What click prints above a usage error of the other commands.
_USAGE = "Usage: loopwarden hook [OPTIONS] [AGENT]\nTry 'loopwarden hook -h' for help.\n\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never exit 2: agents read that as "block"
        raise UsageError(f"{_USAGE}loopwarden hook: error: {message}")


def _parser() -> argparse.ArgumentParser:
    # argparse, not click: the hook process must start fast (``loopwarden hook --help``
    # prints HOOK_HELP with click instead, in the style of the other commands).
    parser = _Parser(prog="loopwarden hook", description=HOOK_HELP.split("\n\n")[0])
    parser.add_argument("agent", choices=sorted(ADAPTERS), nargs="?", help="the coding agent")
    for option in HOOK_OPTIONS:
        if option.metavar is None:
            parser.add_argument(option.flag, action="store_true", help=option.help)
        else:
            parser.add_argument(option.flag, metavar=option.metavar, help=option.help)
    return parser


def parse_args(argv: list[str]) -> HookOptions:
    """Parse the hook's command line; raises :class:`UsageError` (``--help`` exits)."""
    key = tuple(argv)
    cached = _parsed.get(key)
    if cached is not None:
        return cached
    options = _parse_args(argv)
    if len(_parsed) < 64:  # the helper sees the same few command lines again and again
        _parsed[key] = options
    return options


_parsed: dict[tuple[str, ...], HookOptions] = {}


def _parse_args(argv: list[str]) -> HookOptions:
    ns = _parser().parse_args(argv)
    if ns.agent is None and not ns.stop_daemon:
        raise UsageError(
            f"{_USAGE}loopwarden hook: error: name the agent ({', '.join(sorted(ADAPTERS))})"
        )
    port: int | None = None
    if ns.http_port is not None:
        try:
            port = 0 if ns.http_port == "auto" else int(ns.http_port)
        except ValueError:
            port = -1
        if not (0 < port < 65536 or ns.http_port == "auto"):
            raise UsageError(
                f"{_USAGE}loopwarden hook: error: --http-port: not a port number: {ns.http_port!r}"
            )
    return HookOptions(
        ns.agent or "",
        ns.config,
        ns.state,
        ns.agent_id,
        ns.no_daemon,
        ns.stop_daemon,
        ns.metrics,
        ns.event,
        port,
    )


def agent_id_for(opts: HookOptions, env: Mapping[str, str]) -> str:
    """The agent id for per-agent config blocks: ``--agent-id``, env, or the agent's name."""
    if opts.agent_id:
        return opts.agent_id
    value = env.get("LOOPWARDEN_AGENT_ID")
    return value.strip() if value and value.strip() else opts.agent


# -- where things are -----------------------------------------------------------
def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def absolute_path(path: str, env: Mapping[str, str], cwd: str) -> str:
    """``path`` made absolute: ``~`` is the event's home, relative is against ``cwd``."""
    if path == "~" or path.startswith("~/"):
        return os.path.join(_home(env), path[2:])
    return path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)


def find_config(opts: HookOptions, env: Mapping[str, str], cwd: str) -> tuple[str | None, Any]:
    """The config file and an identity that changes whenever the file does."""
    chosen = opts.config or env.get("LOOPWARDEN_CONFIG")
    if chosen:
        path = absolute_path(chosen, env, cwd)
        try:
            st = os.stat(path)
        except OSError:
            return path, (path,)  # load_config reports the problem
        return path, (path, st.st_mtime_ns, st.st_size, st.st_ino)
    xdg = env.get("XDG_CONFIG_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(_home(env), ".config")
    for name in ("config.json5", "config.json"):
        candidate = os.path.join(base, "loopwarden", name)
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return candidate, (candidate, st.st_mtime_ns, st.st_size, st.st_ino)
    return None, ()


def config_path(opts: HookOptions, env: Mapping[str, str], cwd: str) -> Path | None:
    """The config file the hook uses, or None for :data:`HOOK_DEFAULT_CONFIG`."""
    path, _ = find_config(opts, env, cwd)
    return None if path is None else Path(path)


_default_paths: dict[tuple[str | None, str | None], str] = {}


def default_state(env: Mapping[str, str]) -> str:
    """The default SQLite state file for this environment (cached: it is asked per event)."""
    key = (env.get("HOME"), env.get("XDG_DATA_HOME"))
    found = _default_paths.get(key)
    if found is None:
        found = _default_paths[key] = str(default_state_path(env))
    return found


def store_url(opts: HookOptions, env: Mapping[str, str], cwd: str, config: Config) -> str:
    """The state store URL, with relative SQLite paths made absolute against ``cwd``."""
    spec = opts.state or env.get("LOOPWARDEN_STATE") or config.settings.store
    if not spec:
        return f"sqlite://{default_state(env)}"
    if "://" not in spec:
        return f"sqlite://{absolute_path(spec, env, cwd)}"
    if spec.startswith("memory://"):
        logger.warning(
            "loopwarden hook: the memory:// store forgets everything when the hook process "
            "exits; using the default SQLite store %s instead",
            default_state_path(env),
        )
        return f"sqlite://{default_state_path(env)}"
    if spec.startswith("sqlite://"):
        rest = spec[len("sqlite://") :]
        path, sep, query = rest.partition("?")
        if path and path != "/":
            return f"sqlite://{absolute_path(path, env, cwd)}{sep}{query}"
    return spec


def log_path(env: Mapping[str, str], cwd: str = "") -> Path:
    """The hook's log file: ``$LOOPWARDEN_LOG``, else ``hook.log`` next to the default state."""
    chosen = env.get("LOOPWARDEN_LOG")
    if chosen:
        return Path(absolute_path(chosen, env, cwd))
    return Path(default_state(env)).parent / "hook.log"
