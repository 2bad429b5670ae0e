"""The top-level ``loopwarden`` group: its help, ``--version``, and dispatch to the commands.

Each command is its own click command in its own module, imported only when it
runs; the group passes the command's arguments on untouched (``--`` included,
which ``mcp-proxy`` needs), so every command parses and reports its own
errors as ``loopwarden COMMAND: error: ...``.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from typing import Any

import click

from . import COMMANDS
from ._clickutil import CONTEXT, run_command

__all__ = ["run", "top_group"]

HELP = """Stop AI agents from wasting tokens in tool-call loops.

Run 'loopwarden COMMAND --help' for the options of a command; docs/cli.md
describes every command and its exit codes.
"""


class _Command(click.Command):
    """A command whose own module parses its arguments and runs it (``main(argv)``)."""

    def __init__(self, name: str, module: str, text: str) -> None:
        super().__init__(name, help=text, short_help=text, add_help_option=False)
        self.module = module

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.args = list(args)
        return ctx.args

    def invoke(self, ctx: click.Context) -> Any:
        __import__(self.module)
        return sys.modules[self.module].main(ctx.args)


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)  # the table's order, not sorted

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        return _Command(cmd_name, *entry) if entry is not None else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and name not in COMMANDS and not name.startswith("-"):
            close = difflib.get_close_matches(name, list(COMMANDS), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            ctx.fail(f"No such command '{name}'.{hint}")
        return super().resolve_command(ctx, args)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .._util import package_version

    click.echo(f"loopwarden {package_version()}")
    ctx.exit()


@click.group(
    name="loopwarden",
    cls=_Group,
    help=HELP,
    context_settings=CONTEXT,
    no_args_is_help=True,
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show the version and exit.",
)
def top_group() -> None:
    pass


def run(argv: Sequence[str]) -> int:
    """``loopwarden ARGS``: the exit code of the command (or of the group's own answer)."""
    args = list(argv)
    if args[:1] == ["help"]:  # `loopwarden help [COMMAND]`
        args = [*args[1:2], "--help"]
    return run_command(top_group, args, "loopwarden")
