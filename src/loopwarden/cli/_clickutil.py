"""Shared plumbing of every ``loopwarden`` command except the hand-written ``hook``.

Commands are click commands run with ``standalone_mode=False`` so that
``main(argv)`` returns an exit code instead of exiting, and every command
exits the same way (documented in docs/cli.md, "Exit codes"):

* 0 done; 1 the command's own failure (``--fail-on`` reached, an invalid config
  for ``config check``, a broken install for ``doctor``, an upstream that cannot
  be reached...); 2 a usage error (bad option, missing file, invalid config);
  70 a bug inside loopwarden; 130 interrupted; 141 the reader of stdout went away.

User mistakes and failures become one line on stderr (``loopwarden CMD:
error: ...``); a bug becomes a one-line message too, with the traceback only
when ``LOOPWARDEN_DEBUG`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import click

from . import EXIT_BROKEN_PIPE, _drop_stdout

__all__ = [
    "EXIT_FAIL",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandFailure",
    "UsageFailure",
    "colour_enabled",
    "echo_error",
    "load_cli_config",
    "parse_sets",
    "run_command",
    "styler",
]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.UsageError):
    """A user mistake found after parsing (bad config file, missing input): exit 2."""


class CommandFailure(click.ClickException):
    """The command could not do its job (exit 1), said in one line."""

    exit_code = EXIT_FAIL


def echo_error(prog: str, message: str) -> None:
    """``PROG: error: MESSAGE`` on stderr, the one shape of every command's errors."""
    from .._util import printable

    # One line per problem; a name from a file or trace must not drive the terminal.
    text = "\n".join(printable(line) for line in str(message).split("\n"))
    click.echo(f"{prog}: error: {text}", err=True)


def run_command(command: click.Command, argv: Sequence[str], prog: str, **extra: Any) -> int:
    """Run a click command; returns the exit code and never lets a traceback out.

    ``extra`` goes to the click context (``obj=...`` for what is not an option).
    """
    # Not ``command.main``: it turns a broken pipe into ``sys.exit(1)``; here it is
    # exit 141 like every other command's, and ``--help``/``ctx.exit`` become codes.
    try:
        with command.make_context(prog, list(argv), **extra) as ctx:
            result = command.invoke(ctx)
    except click.exceptions.Exit as exc:  # --help, --version, ctx.exit()
        return exc.exit_code
    except click.UsageError as exc:
        # (click >= 8.2 reports "no arguments: show the help" as a UsageError too)
        if isinstance(exc, UsageFailure):
            echo_error(prog, exc.format_message())
        else:
            exc.show()
        return EXIT_USAGE
    except CommandFailure as exc:
        echo_error(prog, exc.format_message())
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()  # the reader went away (``| head``); stop quietly
        return EXIT_BROKEN_PIPE
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
