"""What ``replay`` and ``tune`` share: the inputs (files, folders, globs, .gz, URLs) and
``--workers`` / ``--engine`` / ``--ray-address``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from ._clickutil import UsageFailure

if TYPE_CHECKING:
    from ..fleet import Shard

__all__ = ["FORMAT_NAMES", "FleetOptions", "fleet_options", "input_format", "plan"]

F = TypeVar("F", bound=Callable[..., Any])

FORMAT_NAMES = ("loopwarden", "claude-code", "codex", "openclaw", "chat", "otel")


def fleet_options(fn: F) -> F:
    """The ``--workers``, ``--engine`` and ``--ray-address`` options."""
    options = [
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
            help="Ray cluster for --engine ray, such as auto or ray://head:10001 "
            "(default: a Ray already started in this process, else a local one for this run).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


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


def plan(paths: Sequence[str], forced: str | None) -> list[Shard]:
    """The shards of the inputs; a path that names nothing is a usage error."""
    from ..fleet import plan_shards
    from ..traces import TraceInputError

    try:
        return plan_shards(paths, input_format=forced)
    except TraceInputError as exc:
        raise UsageFailure(str(exc)) from None
