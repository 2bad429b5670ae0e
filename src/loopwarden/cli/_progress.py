"""The replay progress bar on stderr, and output that shares the terminal with it."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..report import ReportWriter
    from ..traces import OpenedSource
    from ..traces.replay import RunReport

__all__ = ["BelowBar", "ProgressBar", "echo_err", "isatty"]


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def echo_err(bar: ProgressBar | None, text: str) -> None:
    """One line on stderr, above the bar when there is one."""
    if bar is not None:
        bar.echo(text)
    else:
        click.echo(text, err=True)


class ProgressBar:
    """A progress bar on stderr, fed by a side thread that polls the file position.

    The reading loop never touches it, so a progress bar costs replay nothing.
    Follows :class:`loopwarden.traces.replay.ReplayProgress`.
    """

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.bar: Any = click.progressbar(
            length=sum(sizes), label="replaying", file=sys.stderr, show_pos=False, width=30
        )
        self.lock = threading.Lock()
        self.done = 0
        self.shown = 0
        self.current: OpenedSource | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loopwarden-progress", daemon=True)

    def start(self) -> None:
        self.bar.__enter__()
        self.bar.render_progress()

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

    def open(self, opened: OpenedSource) -> None:
        with self.lock:
            self.current = opened
        # Polling starts with the first input read here; inputs read by worker
        # processes advance the bar as they finish (and no thread is running
        # when the workers are forked).
        if self._thread.ident is None and not self._stop.is_set():
            self._thread.start()

    def file_done(self, index: int) -> None:
        with self.lock:
            self.current = None
            self.done += self.sizes[index]
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


class BelowBar:
    """Writes each run's report with the progress bar cleared, then draws the bar again."""

    def __init__(self, writer: ReportWriter, bar: ProgressBar, text: IO[str]) -> None:
        self.writer = writer
        self.bar = bar
        self.text = text

    def run(self, report: RunReport) -> None:
        with self.bar.suspended():
            self.writer.run(report)
            self.text.flush()
