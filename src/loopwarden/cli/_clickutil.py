"""Shared plumbing of the ``replay``, ``config`` and ``demo`` commands.

Commands are click commands run with ``standalone_mode=False`` so that
``main(argv)`` returns an exit code instead of exiting. User mistakes become
one-line errors (exit 2); a bug inside loopwarden becomes a one-line message
too, with the traceback only when ``LOOPWARDEN_DEBUG`` is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_USAGE",
    "colour_enabled",
    "load_cli_config",
    "parse_sets",
    "run_command",
    "styler",
]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.UsageError):
    """A user mistake found after parsing (bad config file, missing input)."""


def run_command(command: click.Command, argv: Sequence[str], prog: str) -> int:
    """Run a click command; returns the exit code and never lets a traceback out."""
    try:
        result = command.main(list(argv), prog_name=prog, standalone_mode=False)
    except click.UsageError as exc:
        # (click >= 8.2 reports "no arguments: show the help" as a UsageError too)
        if isinstance(exc, UsageFailure):
            click.echo(f"{prog}: error: {exc.format_message()}", err=True)
        else:
            exc.show()
        return EXIT_USAGE
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``); stop quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except Exception as exc:
        if os.environ.get("LOOPWARDEN_DEBUG"):
            raise
        click.echo(
            f"{prog}: internal error: {type(exc).__name__}: {exc} "
            "(set LOOPWARDEN_DEBUG=1 for a traceback, and please report it)",
            err=True,
        )
        return EXIT_INTERNAL
    if isinstance(result, int):
        return result
    return EXIT_OK


def colour_enabled(flag: bool | None, stream: Any) -> bool:
    """``--color/--no-color`` if given, else colour only on a terminal (and not with NO_COLOR)."""
    if flag is not None:
        return flag
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def styler(enabled: bool) -> Callable[..., str]:
    if enabled:
        return click.style

    def plain(text: str, **_: Any) -> str:
        return text

    return plain


def parse_sets(values: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` pairs as overrides; values are JSON5 scalars (``true``, ``5``)."""
    import json5

    overrides: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageFailure(
                f"--set expects KEY=VALUE (for example --set warningThreshold=5), got {item!r}"
            )
        for prefix in ("tools.loopDetection.", "loopDetection."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
        text = raw.strip()
        try:
            value = json5.loads(text) if text else None
        except ValueError:
            value = text
        overrides[key] = value
    return overrides


def load_cli_config(
    path: str | None, overrides: dict[str, Any], *, default: dict[str, Any] | None = None
) -> Any:
    """Load ``path`` (or ``default``), lay the overrides over the global and every agent block.

    Config mistakes become :class:`UsageFailure` with every problem listed.
    """
    from ..config import load_config
    from ..errors import ConfigError

    try:
        config = load_config(path if path is not None else default)
        if overrides:
            config = config.with_overrides(overrides, all_agents=True)
            if path is not None:
                config.source = path
    except ConfigError as exc:
        raise UsageFailure(str(exc)) from None
    return config
