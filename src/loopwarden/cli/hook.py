"""``loopwarden hook AGENT``: the console-script form of the hook (see loopwarden.hooks).

The fast path itself lives in :mod:`loopwarden.hooks._protocol`, which the
command ``loopwarden install`` writes (``python -S -c ...``) runs without this
module. Only ``--help`` imports click here: its text has the layout of every
other command's help, while the hook's parser stays argparse (start-up speed).
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

from ..hooks._protocol import AGENTS, ENV_KEYS, PROTOCOL, runtime_dir, socket_path
from ..hooks._protocol import forward as _forward
from ..hooks._protocol import main as _hook_main

# Re-exported: these lived here before hooks._protocol.
__all__ = [
    "AGENTS",
    "ENV_KEYS",
    "PROTOCOL",
    "_forward",
    "help_text",
    "main",
    "runtime_dir",
    "socket_path",
]


def help_text() -> str:
    """``loopwarden hook --help``, rendered by click from the hook's own option table."""
    import os

    import click

    from ..hooks.daemon import idle_text
    from ..hooks.options import HOOK_HELP, HOOK_OPTIONS
    from ._clickutil import CONTEXT

    params: list[click.Parameter] = [click.Argument(["agent"], required=False, metavar="[AGENT]")]
    for option in HOOK_OPTIONS:
        if option.metavar is None:
            params.append(click.Option([option.flag], is_flag=True, help=option.help))
        else:
            params.append(click.Option([option.flag], metavar=option.metavar, help=option.help))
    text = HOOK_HELP.format(idle=idle_text(os.environ))
    command = click.Command("hook", params=params, help=text, context_settings=CONTEXT)
    ctx = command.make_context("loopwarden hook", [], resilient_parsing=True)
    return command.get_help(ctx)


def main(argv: "list[str]") -> int:
    """``loopwarden hook [AGENT] [options]``: one event from stdin, the answer on stdout."""
    if "-h" in argv or "--help" in argv:
        print(help_text())
        return 0
    return _hook_main(argv)
