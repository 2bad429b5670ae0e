"""``loopwarden tune``: pick thresholds from your own recorded runs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from ._clickutil import (
    CONTEXT,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailure,
    UsageFailure,
    colour_enabled,
    load_cli_config,
    run_command,
    styler,
)
from ._fleet import FleetOptions, input_format, input_options, plan, report_options
from ._progress import isatty

__all__ = ["main", "tune_command"]

DEFAULT_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
MAX_PROBLEMS_SHOWN = 20

HELP = """Replay recorded runs under a grid of configs and recommend one.

\b
TRACES are trace files, folders, globs or .gz files (any format replay reads;
fsspec URLs such as s3://bucket/runs/*.jsonl when fsspec is installed). Every
run is replayed under every config of the grid, in one pass over the data,
and the report gives per config: runs warned / blocked / stopped, tool calls
that would not have run, the tokens of the turns behind them (where the trace
records usage), how far into each loop the first alarm came, and with
--labels, false blocks and false warnings on runs labelled good. C0 is the
base config itself (the defaults). A config is recommended, with the block to
paste, only where it beats C0 on these runs: --margin % more calls prevented
(at least one more) without more false blocks, or fewer false blocks without
fewer calls prevented. Otherwise: "no difference: keep the defaults". Ties go
to the defaults.

\b
--grid KEY=V1,V2,... takes any tools.loopDetection key (camelCase, dotted for
nested keys) or loopwarden.<setting>; several --grid options form a product.
Without --grid a default grid around the defaults is used.

\b
Examples:
  loopwarden tune ~/.claude/projects
  loopwarden tune runs/ --grid criticalThreshold=10,15,20 --grid warningThreshold=5,8
  loopwarden tune 'archive/**/*.jsonl.gz' --labels outcomes.csv --workers 8
  loopwarden tune runs/ --engine ray --ray-address auto --format html -o tune.html
"""


@click.command(name="tune", help=HELP, context_settings=CONTEXT, no_args_is_help=True)
@click.argument("paths", nargs=-1, required=True, metavar="TRACES...")
@click.option(
    "--grid",
    "grids",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Values to try for one key (repeatable: a product).",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    help="Base config (default: the defaults with enabled: true).",
)
@click.option("--agent", metavar="ID", help="Apply this agent's block to every run.")
@click.option(
    "--labels",
    "labels_path",
    metavar="FILE",
    help="Run outcomes: JSONL/JSON/CSV of run id (or session id) -> good/bad.",
)
@click.option(
    "--label-field",
    metavar="PATH",
    help="Read each run's outcome from this (dotted) field of its trace records.",
)
@click.option(
    "--loop-min",
    default=10,
    metavar="N",
    show_default=True,
    type=click.IntRange(2, 10_000),
    help="Calls in a row (same call, or two alternating) that count as a loop.",
)
@click.option(
    "--margin",
    default=10.0,
    metavar="PCT",
    show_default=True,
    type=click.FloatRange(0, 1000),
    help="Recommend a config only if it prevents this % more calls than the defaults (C0).",
)
@input_options
@report_options
def tune_command(
    paths: tuple[str, ...],
    grids: tuple[str, ...],
    config_path: str | None,
    agent: str | None,
    labels_path: str | None,
    label_field: str | None,
    loop_min: int,
    margin: float,
    format_name: str,
    output_format: str,
    output: str,
    color: bool | None,
    progress: bool | None,
    workers: int | None,
    engine: str,
    ray_address: str | None,
) -> int:
    from .._util import package_version, printable
    from ..fleet import EngineUnavailable
    from ..tune import (
        GridError,
        LabelBook,
        build_candidates,
        default_changes,
        grid_changes,
        load_labels,
        parse_grid,
        tune,
    )

    forced = input_format(format_name)
    fleet = FleetOptions(workers, engine, ray_address)
    base = load_cli_config(config_path, {}, default=DEFAULT_CONFIG)
    try:
        changes = grid_changes(parse_grid(grids)) if grids else default_changes()
        candidates = build_candidates(base, changes, agent=agent)
    except GridError as exc:
        raise UsageFailure(str(exc)) from None
    labels = None
    if labels_path is not None:
        try:
            labels = LabelBook(load_labels(labels_path))
        except OSError as exc:
            raise UsageFailure(f"cannot read {labels_path}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageFailure(f"--labels: {exc}") from None
        if not labels:
            raise UsageFailure(f"--labels: {labels_path} has no good/bad label")
    shards = plan(paths, forced)
    if not shards:
        raise UsageFailure("no trace files found")

    err_style = styler(colour_enabled(color, sys.stderr))
    show_progress = progress if progress is not None else isatty(sys.stderr)
    total = sum(s.size for s in shards)
    bar: Any = None
    if show_progress and total > 0:
        bar = click.progressbar(
            length=total, label="tuning", file=sys.stderr, show_pos=False, width=30
        )
        bar.__enter__()
    shown = 0

    def on_shard(result: Any) -> None:
        nonlocal shown
        for where, reason in result.problems:
            if shown < MAX_PROBLEMS_SHOWN:  # names from traces: escaped for the terminal
                tag = err_style("skipped", fg="yellow")
                _err(bar, f"{tag} {printable(where)}: {printable(reason)}")
            shown += 1
        if result.error is not None and result.error != "empty input":
            _err(bar, f"{err_style('error', fg='red')} {printable(result.error)}")
        if bar is not None:
            bar.update(result.shard.size)

    try:
        outcome = tune(
            shards,
            candidates,
            labels=labels,
            label_field=label_field,
            agent=agent,
            min_loop=loop_min,
            workers=fleet.workers,
            engine=fleet.engine,
            ray_address=fleet.ray_address,
            on_shard=on_shard,
            margin=margin / 100,
        )
    except EngineUnavailable as exc:
        raise CommandFailure(str(exc)) from None
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if shown > MAX_PROBLEMS_SHOWN:
        click.echo(f"… {shown - MAX_PROBLEMS_SHOWN} further malformed records skipped", err=True)
    if not any(i["format"] for i in outcome.inputs):
        click.echo("loopwarden tune: error: no readable trace", err=True)
        return EXIT_USAGE

    text = _render(
        outcome, output_format.lower(), package_version(), labels_path, label_field, color, output
    )
    if output == "-":
        click.echo(text, nl=False)
    else:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise UsageFailure(f"cannot write {output}: {exc.strerror or exc}") from None
        click.echo(f"wrote {output}", err=True)
    return EXIT_OK


def _render(
    outcome: Any,
    fmt: str,
    version: str,
    labels_path: str | None,
    label_field: str | None,
    color: bool | None,
    output: str,
) -> str:
    if fmt == "json":
        import orjson

        from ..tune.report import to_dict

        data = to_dict(outcome, version=version, labels_file=labels_path, label_field=label_field)
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "html":
        from ..tune.html import render_html

        return render_html(outcome, version=version)
    from ..tune.report import write_text

    lines: list[str] = []
    paint = styler(colour_enabled(color, sys.stdout if output == "-" else None))
    write_text(outcome, lines.append, paint)
    return "\n".join(lines) + "\n"


def _err(bar: Any, text: str) -> None:
    if bar is not None:
        sys.stderr.write("\r\x1b[K")
    click.echo(text, err=True)
    if bar is not None:
        bar.render_progress()


def main(argv: Sequence[str]) -> int:
    return run_command(tune_command, argv, "loopwarden tune")
