"""``--format text``: a readable report for a terminal, streamed run by run.

Every name that comes from a trace (run ids, titles, tool names, file names,
messages) goes through :func:`~loopwarden._util.printable`: a control
character in a trace must never drive the terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import IO, Any

from .._util import printable as p
from ..traces._sink import format_loc
from ..traces.replay import ReplayEvent, RunReport
from . import ReplayMeta, Totals

__all__ = ["TextWriter"]

Style = Callable[..., str]

_LEVEL_TAG = {"ok": "OK", "warning": "WARNED", "critical": "LOOPED"}
_ACTION_COLOUR = {"warn": "yellow", "block": "red", "stop": "red", "abort": "magenta"}


def _plain(text: str, **_: Any) -> str:
    return text


class TextWriter:
    """Writes one block per run (one line for a healthy run) and a summary."""

    def __init__(
        self,
        out: IO[str],
        *,
        style: Style | None = None,
        verbose: bool = False,
        loops_only: bool = False,
    ) -> None:
        self.out = out
        self.style: Style = style or _plain
        self.verbose = verbose
        self.loops_only = loops_only

    def _line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def start(self, meta: ReplayMeta) -> None:
        self._line(self.style("loopwarden replay", bold=True) + " — " + p(meta.describe()))
        rules = meta.rules_text()
        if rules:
            self._line("  " + self.style(p(rules), dim=True))
        self._line()

    def run(self, report: RunReport) -> None:
        level = report.level
        if level == "ok" and self.loops_only:
            return
        s = self.style
        where = p(format_loc(report.source, report.line))
        head = f"run {s(p(report.label), bold=True)} · {p(report.format)} · {where}"
        if report.title:
            head += f' · "{p(report.title)}"'
        if level == "ok":
            self._line(f"{head}  {s('OK', fg='green')}  {p(report.verdict())}")
            return
        self._line(head)
        top = sorted(report.tools.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
        tools = ", ".join(f"{p(name)} {count}" for name, count in top)
        more = len(report.tools) - len(top)
        self._line(f"  {report.calls} calls: {tools}{f', +{more} more tools' if more > 0 else ''}")
        for group in _group(report.events):
            self._event(group)
        if report.events_omitted:
            self._line(f"  … {report.events_omitted} more events not listed")
        colour = "red" if level == "critical" else "yellow"
        tag = "STOPPED" if report.stop is not None else _LEVEL_TAG[level]
        if report.stop is not None and report.stop.action == "abort":
            tag = "ABORTED"
        self._line(f"  {s(tag, fg=colour, bold=True)}  {p(report.verdict())}")
        self._line()

    def _event(self, group: list[ReplayEvent]) -> None:
        s = self.style
        first, last = group[0], group[-1]
        action = first.action
        label = s(f"{action:<5}", fg=_ACTION_COLOUR.get(action), bold=action in ("stop", "abort"))
        paired = f" ↔ {p(first.paired_tool)}" if first.paired_tool else ""
        text = (
            f"  call {first.call:<6} {label}  {p(first.detector):<26} "
            f"{p(first.tool)}{paired}  count {first.count}"
        )
        if len(group) > 1:
            text += f" … call {last.call} (count {last.count}; {len(group)} {action}s)"
        self._line(text)
        if self.verbose:
            for line in textwrap.wrap(p(first.message), width=96):
                self._line(f"      {s(line, dim=True)}")

    def finish(self, totals: Totals) -> None:
        s = self.style
        files = sum(1 for i in totals.inputs if i.format is not None and i.error is None)
        levels = totals.levels
        critical_bits = []
        if totals.stopped:
            critical_bits.append(f"{totals.stopped} stopped")
        if totals.aborted:
            critical_bits.append(f"{totals.aborted} aborted")
        critical = f"{levels['critical']} critical"
        if critical_bits:
            critical += f" ({', '.join(critical_bits)})"
        self._line(
            s("Summary:", bold=True)
            + f" {totals.runs} run{'s' if totals.runs != 1 else ''}, {totals.calls} calls from "
            f"{files} file{'s' if files != 1 else ''}: {levels['ok']} ok, "
            f"{levels['warning']} warned, {critical}."
        )
        if totals.looped_runs:
            self._line(
                f"The guard would have spoken up in {totals.looped_runs} "
                f"run{'s' if totals.looped_runs != 1 else ''}: {totals.calls_after_first_warning} "
                f"calls came after a first warning, {totals.calls_after_stop} after a stop."
            )
        if totals.problems:
            self._line(
                s(
                    f"{totals.problems} malformed record{'s' if totals.problems != 1 else ''} "
                    "skipped (reported on stderr).",
                    fg="yellow",
                )
            )
        skipped = [i for i in totals.inputs if i.error is not None]
        if skipped:
            self._line(
                s(
                    f"{len(skipped)} input{'s' if len(skipped) != 1 else ''} skipped "
                    "(reported on stderr).",
                    fg="yellow",
                )
            )
        self.out.flush()


def _group(events: list[ReplayEvent]) -> list[list[ReplayEvent]]:
    """Consecutive blocks (and warnings) of one pattern shown as one line."""
    groups: list[list[ReplayEvent]] = []
    for event in events:
        if groups:
            last = groups[-1][-1]
            if (
                event.action == last.action
                and event.action in ("block", "warn")
                and event.tool == last.tool
                and event.detector == last.detector
                and event.call == last.call + 1
            ):
                groups[-1].append(event)
                continue
        groups.append([event])
    return groups
