"""The tune report as one self-contained HTML page: a chart and a table, no network needed.

The chart is an inline SVG: one point per config, calls prevented against
false alarms (false blocks + false warnings on runs labelled good; without
labels, runs blocked without any loop). Green points have no false block, red
ones do; the recommended config is ringed.
"""

from __future__ import annotations

import html
import math

from . import TuneOutcome
from .report import config_block_text, tokens_text

__all__ = ["render_html"]

_W, _H = 760, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 30, 30, 60

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1100px;color:#1f2328;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#59636e;margin:0 0 16px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #d1d9e0;border-radius:8px;padding:10px 14px;min-width:120px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e5e8eb;padding:5px 8px;text-align:right}
th:first-child,th:nth-child(2),td:first-child,td.ch{text-align:left}
tr.best{background:#e9f7ec}tr.bad td.fb{color:#c62828;font-weight:600}
pre{background:#f6f8fa;border:1px solid #d1d9e0;border-radius:8px;padding:12px;overflow:auto}
.rec{border-left:4px solid #2e7d32;padding:6px 12px;background:#f3faf4}
.rec.warn{border-color:#ed6c02;background:#fff6ec}
svg text{font:12px system-ui,sans-serif;fill:#1f2328}
.axis{stroke:#59636e}.grid{stroke:#e5e8eb}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ticks(top: int) -> list[int]:
    if top <= 0:
        return [0, 1]
    raw = top / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(1, int(step))
    return list(range(0, top + step, step))


def chart_svg(outcome: TuneOutcome) -> str:
    """Calls prevented (y) against false alarms (x), one labelled point per config."""
    n = len(outcome.candidates)
    xs = [outcome.false_alarms(i) for i in range(n)]
    ys = [s.calls_prevented for s in outcome.stats]
    xt, yt = _ticks(max(xs, default=0)), _ticks(max(ys, default=0))
    x_max, y_max = xt[-1] or 1, yt[-1] or 1
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + plot_w * x / x_max

    def py(y: float) -> float:
        return _TOP + plot_h * (1 - y / y_max)

    parts = [
        f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="calls prevented against false alarms">'
    ]
    for t in yt:
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_W - _RIGHT}" '
            f'y1="{py(t):.1f}" y2="{py(t):.1f}"/>'
            f'<text x="{_LEFT - 8}" y="{py(t) + 4:.1f}" text-anchor="end">{t}</text>'
        )
    for t in xt:
        parts.append(
            f'<text x="{px(t):.1f}" y="{_H - _BOTTOM + 18}" text-anchor="middle">{t}</text>'
        )
    parts.append(
        f'<line class="axis" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_H - _BOTTOM}" '
        f'y2="{_H - _BOTTOM}"/><line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" '
        f'y2="{_H - _BOTTOM}"/>'
    )
    x_label = (
        "false alarms: runs labelled good that were warned or blocked"
        if outcome.labelled
        else "runs blocked without any loop (no labels given)"
    )
    parts.append(
        f'<text x="{_LEFT + plot_w / 2:.0f}" y="{_H - 16}" '
        f'text-anchor="middle">{_e(x_label)}</text>'
        f'<text transform="translate(18 {_TOP + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">tool calls prevented</text>'
    )
    best = outcome.recommendation.index
    placed: dict[tuple[int, int], int] = {}
    for i, cand in enumerate(outcome.candidates):
        stats = outcome.stats[i]
        fb = stats.false_blocks if outcome.labelled else stats.blocked_outside_loops
        colour = "#2e7d32" if fb == 0 else "#c62828"
        x, y = px(xs[i]), py(ys[i])
        spot = (round(x), round(y))
        stack = placed.get(spot, 0)
        placed[spot] = stack + 1
        title = f"{cand.name}: {cand.describe()} — {ys[i]} calls prevented, {xs[i]} false alarms"
        if i == best:
            parts.append(
                f'<circle class="best" cx="{x:.1f}" cy="{y:.1f}" r="12" fill="none" '
                f'stroke="#1f2328" stroke-width="2"/>'
            )
        parts.append(
            f'<circle class="pt" data-config="{_e(cand.name)}" cx="{x:.1f}" cy="{y:.1f}" r="6" '
            f'fill="{colour}"><title>{_e(title)}</title></circle>'
            f'<text x="{x + 10:.1f}" y="{y - 8 - 13 * stack:.1f}">{_e(cand.name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(outcome: TuneOutcome, *, version: str) -> str:
    """The whole page."""
    corpus = outcome.corpus
    rec = outcome.recommendation
    cards = [
        ("runs", corpus.runs),
        ("tool calls", corpus.calls),
        (f"loops (≥ {outcome.min_loop} calls)", corpus.loops),
        ("configs", len(outcome.candidates)),
        (
            "runs labelled good / bad",
            f"{corpus.good} / {corpus.bad}" if outcome.labelled else "none",
        ),
        (
            "runs with token usage",
            corpus.runs_with_usage if corpus.runs_with_usage else "not recorded",
        ),
    ]
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "config",
            "changes",
            "warned",
            "blocked",
            "stopped",
            "calls prevented",
            "tokens of those turns",
            "loops caught",
            "median 1st alarm",
            "false blocks" if outcome.labelled else "blocked w/o loop",
            "false warnings" if outcome.labelled else "",
        )
        if h
    )
    rows = []
    for i, (cand, stats) in enumerate(zip(outcome.candidates, outcome.stats, strict=True)):
        fb = stats.false_blocks if outcome.labelled else stats.blocked_outside_loops
        cls = "best" if i == rec.index else ("bad" if fb else "")
        median = stats.median_first_alarm()
        cells = [
            _e(cand.name),
            f'<span class="ch">{_e(cand.describe())}</span>',
            stats.runs_warned,
            stats.runs_blocked,
            stats.runs_stopped,
            stats.calls_prevented,
            _e(tokens_text(outcome, i)),
            f"{stats.loops_caught}/{corpus.loops}",
            "-" if median is None else f"{median:g}",
        ]
        tail = f'<td class="fb">{fb}</td>'
        if outcome.labelled:
            tail += f"<td>{stats.false_warnings}</td>"
        body = "".join(
            f'<td class="ch">{c}</td>' if k == 1 else f"<td>{c}</td>" for k, c in enumerate(cells)
        )
        rows.append(f'<tr class="{cls}">{body}{tail}</tr>')
    block = config_block_text(outcome)
    problems = (
        f"<p>{outcome.problem_count} malformed records were skipped.</p>"
        if outcome.problem_count
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>loopwarden tune</title><style>{_CSS}</style></head><body>"
        "<h1>loopwarden tune</h1>"
        f'<p class="sub">Every recorded run replayed under {len(outcome.candidates)} configs '
        f"through the real runtime guard · loopwarden {_e(version)}</p>"
        + _rules_html(outcome)
        + '<div class="cards" id="totals">'
        + "".join(f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in cards)
        + "</div>"
        + f'<h2>Recommendation</h2><p class="rec{"" if rec.zero_false_blocks else " warn"}" '
        f'id="recommendation">{_e(rec.text)}</p>'
        + (f'<pre id="config-block">{_e(block)}</pre>' if block else "")
        + "<h2>Calls prevented against false alarms</h2>"
        + chart_svg(outcome)
        + f'<h2>Per config</h2><table id="configs"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
        + "<p>Calls prevented: calls that would not have run (blocked, or after a stop). "
        "Tokens: what the model turns behind those calls cost, where the trace records usage "
        "('+': some were in runs without usage). Median 1st alarm: position of the first "
        "warning or block inside each caught loop (1 = the loop's first call).</p>"
        + problems
        + "</body></html>\n"
    )


def _rules_html(outcome: TuneOutcome) -> str:
    """The rules in force under the baseline config, as ``config check`` lists them."""
    if not outcome.candidates:
        return ""
    from ..report.rules import rules_line

    base = outcome.recommendation.baseline
    index = base if base is not None else 0
    line = rules_line(outcome.rules(index))
    name = outcome.candidates[index].name
    return f'<p class="sub" id="rules">rules of {_e(name)}: {_e(line)}</p>' if line else ""
