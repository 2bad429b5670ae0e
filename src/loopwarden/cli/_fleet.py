"""What ``replay`` and ``tune`` share: the inputs (files, folders, globs, .gz, URLs),
``--input-format``, ``--workers`` / ``--engine`` / ``--ray-address``, and the report options."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from ._clickutil import UsageFailure

if TYPE_CHECKING:
    from ..fleet import Shard

__all__ = [
    "FORMAT_NAMES",
    "FleetOptions",
    "input_format",
    "input_options",
    "plan",
    "report_options",
]

F = TypeVar("F", bound=Callable[..., Any])

FORMAT_NAMES = ("loopwarden", "claude-code", "codex", "openclaw", "chat", "otel")


def _apply(fn: F, options: list[Callable[[F], F]]) -> F:
    for option in reversed(options):
        fn = option(fn)
    return fn


def input_options(fn: F) -> F:
    """``--input-format``, ``--workers``, ``--engine`` and ``--ray-address``."""
    return _apply(
        fn,
        [
            click.option(
                "--input-format",
                "format_name",
                default="auto",
                show_default=True,
                metavar="FORMAT",
                help=f"Trace format: auto, {', '.join(FORMAT_NAMES)}.",
            ),
            click.option(
                "--workers",
                type=click.IntRange(1, 4096),
                metavar="N",
                help="Worker processes (default: the number of cores; inputs under 16 MiB in "
                "all are read in one process). Results never depend on it.",
            ),
            click.option(
                "--engine",
                type=click.Choice(["local", "ray"], case_sensitive=False),
                default="local",
                show_default=True,
                help="local: worker processes on this machine; ray: Ray tasks "
                "(pip install 'loopwarden[ray]').",
            ),
            click.option(
                "--ray-address",
                metavar="ADDRESS",
                help="Ray cluster for --engine ray, such as auto or ray://head:10001 (default: "
                "a Ray already started in this process, else a local one for this run).",
            ),
        ],
    )


def replay_report_options(fn: F) -> F:
    """:func:`report_options` plus ``otlp-json``, which only replay writes."""
    return report_options(fn, ("text", "json", "html", "otlp-json"))


def report_options(fn: F, formats: tuple[str, ...] = ("text", "json", "html")) -> F:
    """``--format``, ``--output``, ``--color`` and ``--progress``."""
    return _apply(
        fn,
        [
            click.option(
                "-f",
                "--format",
                "output_format",
                type=click.Choice(list(formats), case_sensitive=False),
                default="text",
                show_default=True,
                help="Report format"
                + (
                    " (otlp-json: the decisions as OTLP/JSON traces, one line per run)."
                    if "otlp-json" in formats
                    else "."
                ),
            ),
            click.option(
                "-o",
                "--output",
                default="-",
                metavar="FILE",
                help="Write the report here instead of stdout.",
            ),
            click.option(
                "--color/--no-color",
                "color",
                default=None,
                help="Colour the text report (default: on a TTY).",
            ),
            click.option(
                "--progress/--no-progress",
                "progress",
                default=None,
                help="Progress bar on stderr (default: when stderr is a TTY).",
            ),
        ],
    )


class FleetOptions:
    """``--workers``/``--engine``/``--ray-address`` checked: a usage error before any work."""

    def __init__(self, workers: int | None, engine: str, ray_address: str | None) -> None:
        from ..fleet import check_engine

        name = engine.lower()
        if ray_address is not None and name != "ray":
            raise UsageFailure("--ray-address needs --engine ray")
        problem = check_engine(name)
        if problem is not None:
            raise UsageFailure(problem)
        self.workers = workers
        self.engine: Literal["local", "ray"] = "ray" if name == "ray" else "local"
        self.ray_address = ray_address


def input_format(value: str) -> str | None:
    """``--input-format`` as a canonical format name (None: detect each input's)."""
    from ..traces import normalize_format

    if value.lower() == "auto":
        return None
    try:
        return normalize_format(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--input-format") from None


def plan(paths: Sequence[str], forced: str | None, *, split: bool = True) -> list[Shard]:
    """The shards of the inputs; a path that names nothing is a usage error. ``split``
    False: whole files only (one process reads them all; ranges would only cost a scan)."""
    from ..fleet import SPLIT_BYTES, plan_shards
    from ..traces import TraceInputError

    try:
        return plan_shards(
            paths, input_format=forced, split_bytes=SPLIT_BYTES if split else sys.maxsize
        )
    except TraceInputError as exc:
        raise UsageFailure(str(exc)) from None
