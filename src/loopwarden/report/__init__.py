"""Rendering replay results: text for terminals, JSON for tools, a self-contained HTML page.

Writers receive the runs one by one as replay finishes them
(:meth:`ReportWriter.run`) and the totals at the end, so text and JSON output
stream in constant memory; the HTML page keeps only what it draws (see
:mod:`loopwarden.report.html` for its limits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from ..traces.replay import InputInfo, RunReport, Totals

if TYPE_CHECKING:
    from .rules import RuleView

__all__ = ["FORMATS", "SCHEMA", "InputInfo", "ReplayMeta", "ReportWriter", "Totals", "writer_for"]

SCHEMA = "loopwarden.replay/1"
"""Identifier of the JSON output schema; changes only with incompatible changes."""

FORMATS = ("text", "json", "html", "otlp-json")


@dataclass
class ReplayMeta:
    """What a replay used: config, agent and overrides."""

    config_source: str | None
    """The ``--config`` file, or None for the built-in default."""
    agent: str | None
    overrides: dict[str, Any]
    effective: dict[str, Any]
    """The effective ``tools.loopDetection`` block (global, or the forced agent's)."""
    version: str
    rules: list[RuleView] = field(default_factory=list)
    """The rules in force under the config (:func:`loopwarden.report.rules.rules_in_force`)."""

    def describe(self) -> str:
        block = self.effective
        base = self.config_source or "built-in defaults"
        parts = [
            f"config: {base} (enabled: {_word(block.get('enabled'))})",
            f"history {block.get('historySize')}",
        ]
        if self.agent:
            parts.insert(1, f"agent {self.agent}")
        if self.overrides:
            parts.append("--set " + ", ".join(f"{k}={_word(v)}" for k, v in self.overrides.items()))
        return " · ".join(parts)

    def rules_text(self) -> str:
        """The rules in force and their thresholds, on one line (empty: none known)."""
        from .rules import rules_line

        line = rules_line(self.rules)
        return f"rules: {line}" if line else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.config_source,
            "agent": self.agent,
            "overrides": dict(self.overrides),
            "effective": self.effective,
            "rules": [rule.to_dict() for rule in self.rules],
        }


def _word(value: Any) -> str:
    if value is None:
        return "unset"
    return "true" if value is True else "false" if value is False else str(value)


class ReportWriter(Protocol):
    """Receives replay results as they come."""

    def start(self, meta: ReplayMeta) -> None: ...

    def run(self, report: RunReport) -> None: ...

    def finish(self, totals: Totals) -> None: ...


def writer_for(
    fmt: str,
    binary: IO[bytes],
    text: IO[str],
    *,
    style: Callable[..., str] | None = None,
    verbose: bool = False,
    loops_only: bool = False,
) -> ReportWriter:
    """The writer of report format ``fmt`` (one of :data:`FORMATS`).

    JSON and HTML write bytes to ``binary``; OTLP/JSON writes to ``text``; text
    writes to ``text``, styled by ``style`` (``click.style``-like) and shaped by
    ``verbose``/``loops_only``.
    """
    if fmt == "json":
        from .json_report import JsonWriter

        return JsonWriter(binary)
    if fmt == "html":
        from .html import HtmlWriter

        return HtmlWriter(binary)
    if fmt == "otlp-json":
        from .otlp import OtlpWriter

        return OtlpWriter(text)
    if fmt != "text":
        raise ValueError(f"unknown report format {fmt!r}; supported: {', '.join(FORMATS)}")
    from .text import TextWriter

    return TextWriter(text, style=style, verbose=verbose, loops_only=loops_only)
