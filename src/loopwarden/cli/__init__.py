"""The ``loopwarden`` command line.

Subcommands live in their own modules and are imported only when run: a
coding-agent hook starts a new process for every tool call, so ``loopwarden
hook`` must not pay for the imports of ``replay`` or ``mcp-proxy`` (nor for
click). Each module exposes ``main(argv: list[str]) -> int``. The top level
(``loopwarden -h``, ``--version``, an unknown command) and every command but
``hook`` are click commands run by :func:`._clickutil.run_command`, which gives
them one set of exit codes (docs/cli.md, "Exit codes"). ``hook`` goes straight
to its hand-written fast path, without click, and answers the way the agents
expect; only its ``--help`` is rendered by click, in the others' style.
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

EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``| head``): a shell's code for a command killed by SIGPIPE."""


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at interpreter exit cannot fail again."""
    import contextlib
    import os

    # (No stdout at all, or not a file: then nothing is left to flush either.)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: "Sequence[str] | None" = None) -> int:
    """Entry point of the ``loopwarden`` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "hook":
            from .hook import main as hook  # the hook's hot path: no click

            code = hook(args[1:])
        else:
            from ._top import run

            code = run(args)
        # Flushed here, not at exit: a reader that went away (`| head -1`) is then
        # one more broken pipe handled below instead of a message from the interpreter.
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    return code
