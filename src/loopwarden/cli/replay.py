"""``loopwarden replay``: run recorded agent traces through the runtime guard."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import click

from ._clickutil import (
    CONTEXT,
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailure,
    UsageFailure,
    colour_enabled,
    load_cli_config,
    parse_sets,
    run_command,
    styler,
)
from ._fleet import FleetOptions, input_format, input_options, plan, replay_report_options
from ._progress import BelowBar, ProgressBar, echo_err, isatty

if TYPE_CHECKING:
    # typing_extensions is no runtime dependency of the core.
    from typing import Self

    from ..traces.replay import RunWriter

__all__ = ["main"]

# Problems printed on stderr before they are only counted.
MAX_PROBLEMS_SHOWN = 20
DEFAULT_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}

HELP = """Replay recorded agent traces through the loopwarden runtime guard.

\b
PATH is a trace file, a folder (searched recursively for *.jsonl, *.json,
*.ndjson, optionally .gz), a glob ('runs/**/*.jsonl.gz'), an fsspec URL
(s3://bucket/runs/, with fsspec installed) or - for stdin. For every run in
the traces, replay reports each warning, block, stop and post-compaction abort the guard would
have issued (call index, tool, detector, count), how many calls came after
the first warning (calls a guard would have saved) and a one-line verdict.

\b
Trace formats (detected automatically; force one with --input-format):
  loopwarden   loopwarden's own JSONL run record (LoopGuard(run_record=...))
  claude-code  Claude Code session transcripts (~/.claude/projects/...)
  codex        OpenAI Codex CLI rollouts (~/.codex/sessions/...)
  openclaw     OpenClaw session transcripts (~/.openclaw/agents/*/sessions/...)
  chat         Chat Completions / Responses / Anthropic message lists
  otel         OpenTelemetry GenAI spans as JSON

\b
Config: without --config, replay uses the defaults with enabled: true (with
enabled unset the rolling-history detectors are off and replay would show only
unknown-tool and post-compaction aborts). With --config FILE the file is used
as is; --set KEY=VALUE (camelCase, dotted for nested keys, e.g. --set
warningThreshold=5 --set detectors.pingPong=false) lays values over its global
tools.loopDetection block (a per-agent block still wins for keys it sets).

\b
Fleet: inputs are replayed on --workers local processes (by default one per
core) or on Ray (--engine ray [--ray-address ADDRESS]), split by file and, for
large JSONL files of one conversation per line, by run. The report is the same
whatever runs it.

\b
Exit codes: 0 done; 1 --fail-on threshold reached; 2 usage error (bad option,
missing path, invalid config, no readable trace); 130 interrupted.

\b
Examples:
  loopwarden replay examples/traces
  loopwarden replay ~/.claude/projects --loops-only
  loopwarden replay run.jsonl --set warningThreshold=5 --fail-on critical
  loopwarden replay traces/ --format html -o report.html
  loopwarden replay traces/ --format otlp-json -o spans.jsonl
  loopwarden replay 'archive/**/*.jsonl.gz' --workers 8 --format json -o all.json
"""


@click.command(name="replay", help=HELP, context_settings=CONTEXT, no_args_is_help=True)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    help="Config file (JSON5/JSON, OpenClaw layout). Default: defaults with enabled: true.",
)
@click.option("--agent", metavar="ID", help="Apply this agent's block to every run.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a tools.loopDetection value (repeatable).",
)
@input_options
@replay_report_options
@click.option(
    "--fail-on",
    type=click.Choice(["warning", "critical"], case_sensitive=False),
    help="Exit 1 if any run reaches this level (warning: any warning or worse; "
    "critical: a block, stop or abort).",
)
@click.option("--loops-only", is_flag=True, help="Text report: leave out runs without findings.")
@click.option("-v", "--verbose", is_flag=True, help="Text report: show the message of each event.")
def replay_command(
    paths: tuple[str, ...],
    config_path: str | None,
    agent: str | None,
    sets: tuple[str, ...],
    format_name: str,
    output_format: str,
    output: str,
    fail_on: str | None,
    loops_only: bool,
    verbose: bool,
    color: bool | None,
    progress: bool | None,
    workers: int | None,
    engine: str,
    ray_address: str | None,
) -> int:
    from .._util import package_version, printable
    from ..fleet import EngineUnavailable
    from ..fleet.replay import replay_shards
    from ..report import ReplayMeta, writer_for
    from ..report.rules import rules_in_force

    forced = input_format(format_name)
    fleet = FleetOptions(workers, engine, ray_address)
    overrides = parse_sets(sets)
    config = load_cli_config(config_path, overrides, default=DEFAULT_CONFIG)
    effective = config.for_agent(agent)
    if config_path is not None and effective.enabled is not True:
        state = "unset" if effective.enabled is None else "false"
        click.echo(
            f"note: tools.loopDetection.enabled is {state} in {config_path}, so the "
            "rolling-history detectors are off; add --set enabled=true to replay them.",
            err=True,
        )
    # One local worker reads every input in this process: whole files, no split scan.
    shards = plan(paths, forced, split=not (fleet.workers == 1 and fleet.engine == "local"))
    _refuse_input_as_output(output, shards)
    meta = ReplayMeta(
        config_source=config_path,
        agent=agent,
        overrides=overrides,
        effective=effective.to_dict(),
        version=package_version(),
        rules=rules_in_force(config, agent),
    )

    with _Output(output) as out:
        fmt = output_format.lower()
        colour = colour_enabled(color, out.text if out.to_stdout else None)
        writer = writer_for(
            fmt, out.binary, out.text, style=styler(colour), verbose=verbose, loops_only=loops_only
        )
        err_style = styler(colour_enabled(color, sys.stderr))
        sizes = [s.size for s in shards]
        show_progress = isatty(sys.stderr) if progress is None else progress
        bar = ProgressBar(sizes) if show_progress and sum(sizes) > 0 else None
        shown = 0

        def on_problem(where: str, reason: str) -> None:
            nonlocal shown
            shown += 1
            if shown <= MAX_PROBLEMS_SHOWN:
                tag = err_style("skipped", fg="yellow")
                echo_err(bar, f"{tag} {printable(where)}: {printable(reason)}")
            elif shown == MAX_PROBLEMS_SHOWN + 1:
                echo_err(bar, "… further malformed records are counted, not shown")

        def on_error(message: str) -> None:
            echo_err(bar, f"{err_style('error', fg='red')} {printable(message)}")

        # A report that shares the terminal with the bar is written below it.
        runs: RunWriter = writer
        if bar is not None and out.to_stdout and isatty(sys.stdout):
            runs = BelowBar(writer, bar, out.text)
        writer.start(meta)
        out.text.flush()
        try:
            if bar is not None:
                bar.start()
            totals = replay_shards(
                shards,
                config,
                writer=runs,
                agent_id=agent,
                timeline=fmt in ("html", "otlp-json"),
                on_problem=on_problem,
                on_error=on_error,
                progress=bar,
                workers=fleet.workers,
                engine=fleet.engine,
                ray_address=fleet.ray_address,
            )
        except EngineUnavailable as exc:
            raise CommandFailure(str(exc)) from None
        finally:
            if bar is not None:
                bar.close()
        writer.finish(totals)

    if totals.nothing_read:
        if not totals.inputs:
            click.echo("loopwarden replay: error: no trace files found", err=True)
        return EXIT_USAGE
    if fail_on is not None and totals.reached(fail_on):
        return EXIT_FAIL
    return EXIT_OK


def _refuse_input_as_output(output: str, shards: Sequence[Any]) -> None:
    """``-o`` naming one of the inputs (given, or found in a folder) is a usage error:
    the report would replace the trace it is made from."""
    if output == "-":
        return
    try:
        target = os.stat(output)
    except OSError:
        return  # a new file cannot be an input
    for shard in shards:
        path = getattr(shard, "path", None)
        if path is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            raise UsageFailure(
                f"the output {output} is one of the inputs ({shard.name}); "
                "write the report to another file"
            )


class _Output:
    """The report's destination, stdout or a file (``-o``), as bytes and as text.

    A file is written under a temporary name next to it and renamed into place
    when the report is complete: an interrupted or failed replay never leaves a
    half-written report, nor truncates an existing one.
    """

    def __init__(self, output: str) -> None:
        self.to_stdout = output == "-"
        self.output = output
        self.temp: str | None = None
        self.handle: IO[bytes] | None = None
        self.wrapper: io.TextIOWrapper | None = None
        self.binary: IO[bytes] = sys.stdout.buffer
        self.text: IO[str] = sys.stdout
        if not self.to_stdout:
            import tempfile

            directory = os.path.dirname(os.path.abspath(output))
            try:
                if _special(output):  # /dev/stdout, a FIFO: written as it is
                    self.handle = open(output, "wb")  # noqa: SIM115 - closed in __exit__
                else:
                    fd, self.temp = tempfile.mkstemp(
                        prefix=f".{os.path.basename(output)}.", suffix=".tmp", dir=directory
                    )
                    self.handle = os.fdopen(fd, "wb")
            except OSError as exc:
                raise UsageFailure(f"cannot write {output}: {exc.strerror or exc}") from None
            self.binary = self.handle
            self.text = self.wrapper = io.TextIOWrapper(
                self.handle, encoding="utf-8", write_through=True
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if self.wrapper is not None:
                self.wrapper.flush()
                self.wrapper.detach()  # the file itself is closed once, just below
            if self.handle is not None:
                self.handle.close()
            if self.temp is not None and exc_type is None:
                _keep_mode(self.output, self.temp)
                os.replace(self.temp, self.output)
                self.temp = None
        except OSError as error:
            raise UsageFailure(f"cannot write {self.output}: {error.strerror or error}") from None
        finally:
            if self.temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.temp)


def _special(output: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(output).st_mode)
    except OSError:
        return False


def _keep_mode(output: str, temp: str) -> None:
    """The report gets the mode a new file would (mkstemp makes it 0600), or the old one's."""
    try:
        mode = os.stat(output).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(temp, mode)


def main(argv: Sequence[str]) -> int:
    return run_command(replay_command, argv, "loopwarden replay")
