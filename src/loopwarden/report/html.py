"""``--format html``: one self-contained page (inline CSS and a few lines of JS, no network).

The page has totals, a summary table of all runs (runs with findings first)
and, per run, a timeline of its calls: one cell per call coloured by tool,
hatched when the outcome repeated the previous outcome of the same call, and
marked where the guard would warn, block, stop or abort; calls after a stop
are faded, compactions are drawn as a bar between calls.

Limits (so the page stays small and the writer's memory bounded): at most
``MAX_ROWS`` rows in the table, at most ``MAX_TIMELINES`` timelines (runs with
findings replace healthy ones when full), at most ``timeline_limit`` calls per
timeline (2000 by default, set by the replay engine) and ``MAX_CELLS`` cells
on the whole page. Everything beyond is counted and said on the page.
"""

from __future__ import annotations

import datetime as _dt
import html
from typing import IO, Any

from ..traces._sink import format_loc
from ..traces.replay import (
    ABORTED,
    AFTER_STOP,
    BLOCKED,
    ERROR,
    REPEAT,
    STOPPED,
    WARNED,
    ReplayEvent,
    RunReport,
)
from . import ReplayMeta, Totals
from ._html_page import HEAD, LEGEND, SCRIPT
from .text import _group

__all__ = ["MAX_CELLS", "MAX_ROWS", "MAX_TIMELINES", "HtmlWriter"]

MAX_ROWS = 5000
MAX_TIMELINES = 200
MAX_CELLS = 150_000
PALETTE_SIZE = 12
_LEVEL_RANK = {"critical": 0, "warning": 1, "ok": 2}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


class _Row:
    __slots__ = (
        "anchor",
        "calls",
        "first_warning",
        "format",
        "label",
        "level",
        "order",
        "saved",
        "short_source",
        "source",
        "stop",
        "tag",
        "title",
        "verdict",
        "warn_block",
    )

    def __init__(self, report: RunReport, order: int) -> None:
        self.order = order
        self.anchor: str | None = None
        self.label = report.label
        self.title = report.title
        self.source = format_loc(report.source, report.line)
        self.short_source = format_loc(_basename(report.source), report.line)
        self.format = report.format
        self.calls = report.calls
        self.level = report.level
        counts = report.counts
        self.warn_block = (counts["warn"], counts["block"])
        stop = report.stop
        self.stop = f"{stop.action} @ {stop.call}" if stop is not None else ""
        self.first_warning = report.first_intervention_call
        self.saved = report.calls_after_first_warning
        self.verdict = report.verdict()
        self.tag = _tag(report)


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1] or path


def _tag(report: RunReport) -> str:
    if report.stop is not None:
        return "ABORTED" if report.stop.action == "abort" else "STOPPED"
    return {"critical": "LOOPED", "warning": "WARNED", "ok": "OK"}[report.level]


class HtmlWriter:
    """Collects what the page needs while replay runs; writes the page at the end."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.meta: ReplayMeta | None = None
        self.rows: list[_Row] = []
        self.rows_omitted = 0
        self.timelines: list[tuple[_Row, RunReport]] = []
        self.timelines_omitted = 0
        self.cells = 0
        self._order = 0

    def start(self, meta: ReplayMeta) -> None:
        self.meta = meta

    def run(self, report: RunReport) -> None:
        self._order += 1
        row = _Row(report, self._order)
        if len(self.rows) < MAX_ROWS:
            self.rows.append(row)
        elif report.level != "ok":
            # keep findings: replace the latest healthy row if there is one
            for index in range(len(self.rows) - 1, -1, -1):
                if self.rows[index].level == "ok":
                    self.rows[index] = row
                    break
            else:
                self.rows_omitted += 1
                return
            self.rows_omitted += 1
        else:
            self.rows_omitted += 1
            return
        self._keep_timeline(row, report)

    def _keep_timeline(self, row: _Row, report: RunReport) -> None:
        size = len(report.timeline or ())
        if not size:
            return
        if len(self.timelines) >= MAX_TIMELINES or self.cells + size > MAX_CELLS:
            if report.level == "ok":
                self.timelines_omitted += 1
                return
            for index, (old_row, old) in enumerate(self.timelines):
                if old.level == "ok":
                    old_row.anchor = None
                    self.cells -= len(old.timeline or ())
                    del self.timelines[index]
                    self.timelines_omitted += 1
                    break
            if len(self.timelines) >= MAX_TIMELINES or self.cells + size > MAX_CELLS:
                self.timelines_omitted += 1
                return
        row.anchor = f"run-{row.order}"
        self.cells += size
        self.timelines.append((row, report))

    # -- rendering ---------------------------------------------------------------
    def finish(self, totals: Totals) -> None:
        page = self.render(totals)
        self.out.write(page.encode("utf-8"))
        self.out.flush()

    def render(self, totals: Totals) -> str:
        meta = self.meta
        parts: list[str] = [HEAD]
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        parts.append("<header><h1>loopwarden replay</h1>")
        if meta is not None:
            parts.append(f'<p class="meta">{_e(meta.describe())}</p>')
            rules = meta.rules_text()
            if rules:
                parts.append(f'<p class="meta rules">{_e(rules)}</p>')
        parts.append(
            f'<p class="meta">generated {stamp}'
            f"{f' by loopwarden {_e(meta.version)}' if meta else ''}</p></header>"
        )
        parts.append(self._cards(totals))
        parts.append(self._table())
        parts.append(LEGEND)
        parts.append(self._timelines())
        parts.append(self._footer(totals))
        parts.append(SCRIPT)
        parts.append("</body></html>\n")
        return "".join(parts)

    def _cards(self, totals: Totals) -> str:
        levels = totals.levels
        cards = [
            ("runs", totals.runs, "runs replayed", ""),
            ("calls", totals.calls, "tool calls", ""),
            (
                "looped",
                totals.looped_runs,
                f"runs with findings ({levels['warning']} warned, {levels['critical']} critical)",
                "warn" if totals.looped_runs else "",
            ),
            (
                "stopped",
                totals.stopped + totals.aborted,
                f"runs stopped ({totals.stopped}) or aborted ({totals.aborted})",
                "crit" if totals.stopped + totals.aborted else "",
            ),
            ("saved", totals.calls_after_first_warning, "calls after a first warning", ""),
            ("after-stop", totals.calls_after_stop, "calls after a stop", ""),
        ]
        if totals.problems:
            cards.append(("problems", totals.problems, "malformed records skipped", "warn"))
        out = ['<section class="cards" id="totals">']
        for ident, value, text, tone in cards:
            out.append(
                f'<div class="card {tone}" data-total="{ident}"><b>{value:,}</b>'
                f"<span>{_e(text)}</span></div>"
            )
        out.append("</section>")
        return "".join(out)

    def _table(self) -> str:
        rows = sorted(self.rows, key=lambda r: (_LEVEL_RANK[r.level], r.order))
        out = [
            '<section id="summary"><h2>Runs</h2>',
            '<table class="runs"><thead><tr><th>#</th><th>run</th><th>source</th>'
            "<th>format</th><th>calls</th><th>warn / block</th><th>stop</th>"
            "<th>guard first acts</th><th>calls after it</th><th>verdict</th></tr></thead><tbody>",
        ]
        for row in rows:
            name = _e(row.label)
            if row.anchor:
                name = f'<a href="#{row.anchor}">{name}</a>'
            title = f'<div class="sub">{_e(row.title)}</div>' if row.title else ""
            warn, block = row.warn_block
            out.append(
                f'<tr class="lvl-{row.level}" data-level="{row.level}"><td>{row.order}</td>'
                f'<td>{name}{title}</td><td class="src" title="{_e(row.source)}">'
                f"{_e(row.short_source)}</td>"
                f'<td>{_e(row.format)}</td><td class="n">{row.calls}</td>'
                f'<td class="n">{warn} / {block}</td><td>{_e(row.stop)}</td>'
                f'<td class="n">{row.first_warning if row.first_warning is not None else ""}</td>'
                f'<td class="n">{row.saved}</td>'
                f'<td><span class="pill {row.level}">{row.tag}</span> {_e(row.verdict)}</td></tr>'
            )
        out.append("</tbody></table>")
        if self.rows_omitted:
            out.append(
                f'<p class="note">{self.rows_omitted:,} more runs are counted in the totals but '
                f"not listed (the table keeps {MAX_ROWS:,} rows, findings first).</p>"
            )
        out.append("</section>")
        return "".join(out)

    def _timelines(self) -> str:
        out = ['<section id="timelines"><h2>Timelines</h2>']
        if not self.timelines:
            out.append('<p class="note">No timelines to draw.</p>')
        ordered = sorted(self.timelines, key=lambda t: (_LEVEL_RANK[t[1].level], t[0].order))
        for row, report in ordered:
            out.append(_timeline(row, report))
        if self.timelines_omitted:
            out.append(
                f'<p class="note">{self.timelines_omitted:,} more timelines were not drawn (the '
                f"page draws at most {MAX_TIMELINES} timelines and {MAX_CELLS:,} calls, "
                "findings first).</p>"
            )
        out.append("</section>")
        return "".join(out)

    def _footer(self, totals: Totals) -> str:
        out = ['<footer><h2>Inputs</h2><ul class="inputs">']
        for info in totals.inputs:
            state = (
                _e(info.format or "empty") if info.error is None else f"skipped: {_e(info.error)}"
            )
            out.append(f"<li><code>{_e(info.name)}</code> — {state}</li>")
        out.append("</ul>")
        if totals.problem_list:
            out.append(f'<h2>Skipped records ({totals.problems:,})</h2><ul class="problems">')
            for where, reason in totals.problem_list[:200]:
                out.append(f"<li><code>{_e(where)}</code> {_e(reason)}</li>")
            out.append("</ul>")
        out.append("</footer>")
        return "".join(out)


def _timeline(row: _Row, report: RunReport) -> str:
    timeline = report.timeline or []
    tools = report.timeline_tools
    names = sorted(tools, key=lambda name: tools[name])
    anchor = row.anchor or ""
    out = [
        f'<article class="run lvl-{report.level}" id="{anchor}" data-level="{report.level}">',
        f'<h3><span class="pill {report.level}">{row.tag}</span> {_e(report.label)} '
        f"<small>{_e(row.source)} · {_e(report.format)}</small></h3>",
    ]
    if report.title:
        out.append(f'<p class="sub">“{_e(report.title)}”</p>')
    out.append(f'<p class="verdict">{_e(report.verdict())}</p>')
    out.append('<div class="tools">')
    for name in names:
        index = tools[name] % PALETTE_SIZE
        out.append(
            f'<span class="tool"><i class="sw t{index}"></i>{_e(name)} '
            f"<small>{report.tools.get(name, 0)}</small></span>"
        )
    out.append("</div>")
    events_at: dict[int, ReplayEvent] = {}
    for replayed in report.events:
        events_at.setdefault(replayed.call, replayed)
    marks = set(report.compaction_marks)
    tool_list = _e("\x1f".join(names))
    out.append(
        f'<div class="timeline" data-tools="{tool_list}" role="img" '
        f'aria-label="{len(timeline)} calls of run {_e(report.label)}">'
    )
    if 0 in marks:
        out.append('<i class="cp" title="compaction before call 1"></i>')
    for index, cell in enumerate(timeline, 1):
        flags = cell & 0xFF
        classes = [f"c t{(cell >> 8) % PALETTE_SIZE}"]
        if flags & REPEAT:
            classes.append("r")
        if flags & ERROR:
            classes.append("e")
        if flags & WARNED:
            classes.append("w")
        if flags & BLOCKED:
            classes.append("b")
        if flags & STOPPED:
            classes.append("s")
        if flags & ABORTED:
            classes.append("a")
        if flags & AFTER_STOP:
            classes.append("x")
        event = events_at.get(index)
        if event is not None:
            title = (
                f"call {index} · {event.tool} · {event.action.upper()} {event.detector} "
                f"(count {event.count})"
            )
            out.append(f'<i class="{" ".join(classes)}" title="{_e(title)}"></i>')
        else:
            out.append(f'<i class="{" ".join(classes)}"></i>')
        if index in marks:
            out.append(f'<i class="cp" title="compaction after call {index}"></i>')
    out.append("</div>")
    if report.calls > len(timeline):
        out.append(
            f'<p class="note">{report.calls - len(timeline):,} later calls are not drawn.</p>'
        )
    if report.events:
        out.append(
            '<table class="events"><thead><tr><th>call</th><th>action</th><th>detector</th>'
            "<th>tool</th><th>count</th><th>what the model would be told</th></tr></thead><tbody>"
        )
        for group in _group(report.events):
            first, last = group[0], group[-1]
            calls = str(first.call) if len(group) == 1 else f"{first.call}&ndash;{last.call}"
            counts = str(first.count) if len(group) == 1 else f"{first.count}&ndash;{last.count}"
            tool = first.tool + (f" ↔ {first.paired_tool}" if first.paired_tool else "")
            out.append(
                f'<tr class="act-{first.action}"><td class="n">{calls}</td>'
                f'<td><span class="act {first.action}">{first.action}</span>'
                f"{f' &times;{len(group)}' if len(group) > 1 else ''}</td>"
                f'<td>{_e(first.detector)}</td><td>{_e(tool)}</td><td class="n">{counts}</td>'
                f'<td class="msg">{_e(first.message)}</td></tr>'
            )
        out.append("</tbody></table>")
        if report.events_omitted:
            out.append(f'<p class="note">{report.events_omitted} more events not listed.</p>')
    out.append("</article>")
    return "".join(out)
