"""``loopwarden replay``: run recorded agent traces through the runtime guard."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import IO, Any

import click

from ._clickutil import (
    CONTEXT,
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    UsageFailure,
    colour_enabled,
    load_cli_config,
    parse_sets,
    run_command,
    styler,
)

__all__ = ["main"]

# Problems printed on stderr before they are only counted.
MAX_PROBLEMS_SHOWN = 20
DEFAULT_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}

_FORMAT_NAMES = (
    "loopwarden",
    "claude-code",
    "codex",
    "openclaw",
    "chat",
    "otel",
)

HELP = """Replay recorded agent traces through the loopwarden runtime guard.

\b
PATH is a trace file, a folder (searched recursively for *.jsonl, *.json,
*.ndjson, optionally .gz) or - for stdin. For every run in the traces, replay
reports each warning, block, stop and post-compaction abort the guard would
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
Exit codes: 0 done; 1 --fail-on threshold reached; 2 usage error (bad option,
missing path, invalid config, no readable trace); 130 interrupted.

\b
Examples:
  loopwarden replay examples/traces
  loopwarden replay ~/.claude/projects --loops-only
  loopwarden replay run.jsonl --set warningThreshold=5 --fail-on critical
  loopwarden replay traces/ --format html -o report.html
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
@click.option(
    "--input-format",
    default="auto",
    show_default=True,
    metavar="FORMAT",
    help=f"Trace format: auto, {', '.join(_FORMAT_NAMES)}.",
)
@click.option(
    "-f",
    "--format",
    "output_format",
    type=click.Choice(["text", "json", "html"], case_sensitive=False),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option(
    "-o",
    "--output",
    default="-",
    metavar="FILE",
    help="Write the report here instead of stdout.",
)
@click.option(
    "--fail-on",
    type=click.Choice(["warning", "critical"], case_sensitive=False),
    help="Exit 1 if any run reaches this level (warning: any warning or worse; "
    "critical: a block, stop or abort).",
)
@click.option("--loops-only", is_flag=True, help="Text report: leave out runs without findings.")
@click.option("-v", "--verbose", is_flag=True, help="Text report: show the message of each event.")
@click.option(
    "--color/--no-color", "color", default=None, help="Colour the text report (default: on a TTY)."
)
@click.option(
    "--progress/--no-progress",
    "progress",
    default=None,
    help="Progress bar on stderr (default: when stderr is a TTY).",
)
def replay_command(
    paths: tuple[str, ...],
    config_path: str | None,
    agent: str | None,
    sets: tuple[str, ...],
    input_format: str,
    output_format: str,
    output: str,
    fail_on: str | None,
    loops_only: bool,
    verbose: bool,
    color: bool | None,
    progress: bool | None,
) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from ..report import InputInfo, ReplayMeta, ReportWriter, Totals
    from ..traces import (
        TraceFormatError,
        TraceInputError,
        expand_paths,
        normalize_format,
        read_source,
    )
    from ..traces.replay import Replayer, RunReport

    forced: str | None = None
    if input_format.lower() != "auto":
        try:
            forced = normalize_format(input_format)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--input-format") from None

    overrides = parse_sets(sets)
    config = load_cli_config(config_path, overrides, default=DEFAULT_CONFIG)
    # Replay must never write into the user's live run record or store.
    config.settings = dataclasses.replace(config.settings, run_record=None, store=None)
    effective = config.for_agent(agent)
    if config_path is not None and effective.enabled is not True:
        state = "unset" if effective.enabled is None else "false"
        click.echo(
            f"note: tools.loopDetection.enabled is {state} in {config_path}, so the "
            "rolling-history detectors are off; add --set enabled=true to replay them.",
            err=True,
        )

    try:
        sources = expand_paths(paths)
    except TraceInputError as exc:
        raise UsageFailure(str(exc)) from None

    try:
        loopwarden_version = version("loopwarden")
    except PackageNotFoundError:
        loopwarden_version = "0+unknown"
    meta = ReplayMeta(
        config_source=config_path,
        agent=agent,
        overrides=overrides,
        effective=effective.to_dict(),
        version=loopwarden_version,
    )

    out_text: IO[str]
    out_bytes: IO[bytes]
    to_stdout = output == "-"
    handle: IO[bytes] | None = None
    wrapper: io.TextIOWrapper | None = None
    if to_stdout:
        out_bytes = sys.stdout.buffer
        out_text = sys.stdout
    else:
        try:
            handle = open(output, "wb")  # noqa: SIM115 - closed in finally below
        except OSError as exc:
            raise UsageFailure(f"cannot write {output}: {exc.strerror or exc}") from None
        out_bytes = handle
        out_text = wrapper = io.TextIOWrapper(handle, encoding="utf-8", write_through=True)

    writer: ReportWriter
    fmt = output_format.lower()
    if fmt == "json":
        from ..report.json_report import JsonWriter

        writer = JsonWriter(out_bytes)
    elif fmt == "html":
        from ..report.html import HtmlWriter

        writer = HtmlWriter(out_bytes)
    else:
        from ..report.text import TextWriter

        use_colour = colour_enabled(color, out_text if to_stdout else None)
        writer = TextWriter(
            out_text, style=styler(use_colour), verbose=verbose, loops_only=loops_only
        )

    totals = Totals()
    err_style = styler(colour_enabled(color, sys.stderr))
    show_progress = progress
    if show_progress is None:
        show_progress = _isatty(sys.stderr)
    sizes = [s.size or 0 for s in sources]
    bar = _Progress(sum(sizes)) if show_progress and sum(sizes) > 0 else None

    def on_problem(where: str, reason: str) -> None:
        totals.add_problem(where, reason)
        if totals.problems <= MAX_PROBLEMS_SHOWN:
            _err(bar, f"{err_style('skipped', fg='yellow')} {where}: {reason}")
        elif totals.problems == MAX_PROBLEMS_SHOWN + 1:
            _err(bar, "… further malformed records are counted, not shown")

    # When the report shares the terminal with the bar, each block of output
    # clears the bar line first and the bar is drawn again below it.
    shared_terminal = bar is not None and to_stdout and _isatty(sys.stdout)

    def on_run(report: RunReport) -> None:
        totals.add(report)
        if shared_terminal and bar is not None:
            with bar.suspended():
                writer.run(report)
                out_text.flush()
        else:
            writer.run(report)

    replayer = Replayer(
        config,
        agent_id=agent,
        on_run=on_run,
        on_problem=on_problem,
        timeline=fmt == "html",
    )

    try:
        writer.start(meta)
        out_text.flush()
        if bar is not None:
            bar.start()
        for index, source in enumerate(sources):
            replayer.set_source(source.name, forced or "?")
            info = InputInfo(source.name, None)
            totals.inputs.append(info)
            try:
                info.format = read_source(
                    source,
                    replayer,
                    index=index,
                    input_format=forced,
                    on_open=bar.open if bar is not None else None,
                    on_format=functools.partial(_named, replayer, source.name),
                )
                if info.format is None:
                    info.error = "empty input"
            except (TraceFormatError, TraceInputError) as exc:
                info.error = str(exc)
                _err(bar, f"{err_style('error', fg='red')} {exc}")
            except (KeyboardInterrupt, BrokenPipeError):
                raise
            except Exception as exc:  # a reader bug must not end the whole replay
                info.error = f"internal error while reading: {type(exc).__name__}: {exc}"
                _err(bar, f"{err_style('error', fg='red')} {source.name}: {info.error}")
            replayer.finish()
            if bar is not None:
                bar.file_done(sizes[index])
        if bar is not None:
            bar.close()
            bar = None
        writer.finish(totals)
    finally:
        if bar is not None:
            bar.close()
        if wrapper is not None:
            wrapper.flush()
            wrapper.detach()  # the file itself is closed once, just below
        if handle is not None:
            handle.close()

    readable = [i for i in totals.inputs if i.format is not None]
    if not readable:
        errors = [i for i in totals.inputs if i.error is not None and i.error != "empty input"]
        if errors or not totals.inputs:
            if not totals.inputs:
                click.echo("loopwarden replay: error: no trace files found", err=True)
            return EXIT_USAGE
    if fail_on == "warning" and totals.looped_runs:
        return EXIT_FAIL
    if fail_on == "critical" and totals.levels["critical"]:
        return EXIT_FAIL
    return EXIT_OK


def _named(replayer: Any, name: str, fmt: str) -> None:
    replayer.set_source(name, fmt)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def _err(bar: _Progress | None, text: str) -> None:
    if bar is not None:
        bar.echo(text)
    else:
        click.echo(text, err=True)


class _Progress:
    """A progress bar on stderr, fed by a side thread that polls the file position.

    The reading loop never touches it, so a progress bar costs replay nothing.
    """

    def __init__(self, total: int) -> None:
        self.bar: Any = click.progressbar(
            length=total, label="replaying", file=sys.stderr, show_pos=False, width=30
        )
        self.lock = threading.Lock()
        self.done = 0
        self.shown = 0
        self.current: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loopwarden-progress", daemon=True)

    def start(self) -> None:
        self.bar.__enter__()
        self.bar.render_progress()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.refresh()

    def refresh(self) -> None:
        with self.lock:
            current = self.current
            position = current.position() if current is not None else None
            target = self.done + (position or 0)
            if target > self.shown:
                step = min(target, self.bar.length) - self.shown
                if step > 0:
                    self.bar.update(step)
                    self.shown += step

    def open(self, opened: Any) -> None:
        with self.lock:
            self.current = opened

    def file_done(self, size: int) -> None:
        with self.lock:
            self.current = None
            self.done += size
        self.refresh()

    def echo(self, text: str) -> None:
        with self.suspended():
            click.echo(text, err=True)

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Clear the bar line, let the caller print, then draw the bar again."""
        with self.lock:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            try:
                yield
            finally:
                self.bar.render_progress()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.refresh()
        self.bar.__exit__(None, None, None)


def main(argv: Sequence[str]) -> int:
    return run_command(replay_command, argv, "loopwarden replay")
