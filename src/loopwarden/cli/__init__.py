"""The ``loopwarden`` command line.

Subcommands live in their own modules and are imported only when run: a
coding-agent hook starts a new process for every tool call, so ``loopwarden
hook`` must not pay for the imports of ``replay`` or ``mcp-proxy`` (nor for
click). Each module exposes ``main(argv: list[str]) -> int``. Every command
but ``hook`` is a click command run by :func:`._clickutil.run_command`, which
gives them one set of exit codes (docs/cli.md, "Exit codes"); ``hook`` is
hand-written for start-up speed and answers the way the agents expect.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

# name -> (module, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "loopwarden.cli.demo",
        "Run a bundled scripted agent that gets stuck, and watch the guard stop it.",
    ),
    "replay": (
        "loopwarden.cli.replay",
        "Replay recorded agent traces: where runs looped and what a config would catch.",
    ),
    "tune": (
        "loopwarden.cli.tune",
        "Replay runs under a grid of configs and recommend thresholds for your agents.",
    ),
    "config": (
        "loopwarden.cli.config_cmd",
        "Validate a config and show the effective settings per agent.",
    ),
    "hook": (
        "loopwarden.cli.hook",
        "Coding-agent hook (claude-code, codex, gemini): event JSON in, decision JSON out.",
    ),
    "install": (
        "loopwarden.cli.install",
        "Add (or --uninstall) loopwarden hooks in Claude Code, Codex CLI or Gemini CLI settings.",
    ),
    "doctor": (
        "loopwarden.cli.doctor",
        "Show which hooks are installed and check that they work.",
    ),
    "mcp-proxy": (
        "loopwarden.cli.mcp_proxy",
        "Serve an MCP proxy that guards tools/call of upstream MCP servers.",
    ),
}

_USAGE = "usage: loopwarden [-h] [--version] COMMAND [ARGS...]"


def _help() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        _USAGE,
        "",
        "Stop AI agents from wasting tokens in tool-call loops.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()),
        "",
        "options:",
        "  -h, --help  show this help and exit",
        "  --version   show the version and exit",
        "",
        "Run 'loopwarden COMMAND --help' for the options of a command.",
    ]
    return "\n".join(lines)


def main(argv: "Sequence[str] | None" = None) -> int:
    """Entry point of the ``loopwarden`` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_help())
        return 0 if args else 2
    if args[0] == "--version":
        from .._util import package_version

        print(f"loopwarden {package_version()}")
        return 0
    name = args[0]
    entry = COMMANDS.get(name)
    if entry is None:
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        print(f"{_USAGE}\nloopwarden: error: unknown command '{name}'.{hint}", file=sys.stderr)
        return 2
    __import__(entry[0])  # not importlib: see loopwarden/__init__.py
    code: int = sys.modules[entry[0]].main(args[1:])
    return code
