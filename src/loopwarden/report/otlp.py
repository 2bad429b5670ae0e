"""``--format otlp-json``: the guard's replayed decisions as OTLP/JSON traces.

One line per run, each an ``ExportTraceServiceRequest`` in the OTLP/JSON
encoding (see :mod:`loopwarden.telemetry.otlp_json`): an ``invoke_agent``
root span and an ``execute_tool <tool>`` span per call with the guard's
``loopwarden.action``, and the ``loopwarden.<action>`` span events the live
guard would have added. A collector (``otlpjsonfile`` receiver) or any
OTLP/HTTP endpoint that accepts JSON takes it as it is.

Trace readers hand replay calls, not their recorded times, so the spans are
laid out on the replay's clock: each run starts where the previous one
ended, one millisecond per call, in the order of the calls. Calls past the
replay's timeline limit (2,000 per run) get a span only when an event fired
on them; calls after a stop get none (the run ended there). The root span
says how many calls each case left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any, Literal

from ..events import LoopEvent
from ..telemetry.otlp_json import CallRecord, OtlpJsonWriter
from ..traces._results import AFTER_STOP, BLOCKED, STOPPED, WARNED
from ..traces.replay import RunReport
from . import ReplayMeta, Totals

__all__ = ["OtlpWriter"]

CALL_SECONDS = 0.001
"""Length of each call span on the replay's clock."""

Action = Literal["allow", "warn", "block", "stop"]
# An abort ends a run after its call ran: the call itself was allowed.
_EVENT_ACTION: dict[str, Action] = {
    "warn": "warn",
    "block": "block",
    "stop": "stop",
    "abort": "allow",
}


def _action(cell: int) -> Action:
    if cell & STOPPED:
        return "stop"
    if cell & BLOCKED:
        return "block"
    if cell & WARNED:
        return "warn"
    return "allow"


class OtlpWriter:
    """Writes each replayed run as one OTLP/JSON line as soon as it is reported."""

    def __init__(self, out: IO[str], *, clock: Callable[[], float] = time.time) -> None:
        self.out = out
        self._writer = OtlpJsonWriter(out)
        self._clock = clock
        self._next = 0.0

    def start(self, meta: ReplayMeta) -> None:
        self._next = self._clock()

    def run(self, report: RunReport) -> None:
        base = self._next
        run_id = report.label
        events = {e.call: e for e in report.events}
        names = {number: name for name, number in report.timeline_tools.items()}
        shown = 0
        after_stop = 0
        cells = report.timeline or []
        for index, cell in enumerate(cells, start=1):
            if cell & AFTER_STOP:
                after_stop += 1
                continue
            event = events.get(index)
            call_id = event.call_id if event is not None else None
            self._call(report, index, names[cell >> 8], _action(cell), call_id, base)
            shown += 1
        for index, event in events.items():
            if index > len(cells):  # past the timeline: only calls with an event are known
                action = _EVENT_ACTION[event.action]
                self._call(report, index, event.tool, action, event.call_id, base)
                shown += 1
        for event in report.events:
            self._writer.add_event(self._event(report, event, base))
        self._writer.end_run(
            run_id,
            seed=f"{report.source}\x1f{report.key}",
            attributes=_root_attributes(report, shown, after_stop),
        )
        self._next = base + max(report.calls, 1) * CALL_SECONDS

    def _call(
        self,
        report: RunReport,
        index: int,
        tool: str,
        action: Action,
        call_id: str | None,
        base: float,
    ) -> None:
        started = base + (index - 1) * CALL_SECONDS
        self._writer.add_call(
            CallRecord(
                report.label,
                tool,
                action,
                started,
                call_id,
                started + CALL_SECONDS,
                report.session,
                report.agent,
            )
        )

    @staticmethod
    def _event(report: RunReport, event: Any, base: float) -> LoopEvent:
        return LoopEvent(
            time=base + (event.call - 1) * CALL_SECONDS,
            session_id=report.session,
            run_id=report.label,
            agent_id=report.agent,
            tool=event.tool,
            level=event.level,
            action=event.action,
            detector=event.detector,
            count=event.count,
            paired_tool=event.paired_tool,
            warning_key=None,
            message=event.message,
            call_id=event.call_id,
        )

    def finish(self, totals: Totals) -> None:
        self._writer.close()
        self.out.flush()


def _root_attributes(report: RunReport, shown: int, after_stop: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "loopwarden.source": report.source,
        "loopwarden.trace_format": report.format,
        "loopwarden.calls": report.calls,
        "loopwarden.verdict": report.verdict(),
    }
    if after_stop:
        attrs["loopwarden.calls_after_stop"] = after_stop
    not_shown = report.calls - shown - after_stop
    if not_shown > 0:
        attrs["loopwarden.calls_not_shown"] = not_shown
    if report.events_omitted:
        attrs["loopwarden.events_omitted"] = report.events_omitted
    return attrs
