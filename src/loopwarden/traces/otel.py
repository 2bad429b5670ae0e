"""OpenTelemetry GenAI spans exported as JSON.

Accepted shapes: OTLP JSON (``{"resourceSpans": [...]}``, one export per line
or one document), the Python SDK's console exporter (span objects with
``context.trace_id``; back to back or one per line), and flat span objects
(``trace_id``, ``span_id``, ``attributes`` as a mapping).

Tool calls are spans with ``gen_ai.operation.name = "execute_tool"`` or a
``gen_ai.tool.name`` attribute (the GenAI semantic conventions), or
OpenInference ``TOOL`` spans (``tool.name``, ``input.value``,
``output.value``). Params come from ``gen_ai.tool.call.arguments``, results
from ``gen_ai.tool.call.result`` (both opt-in in most instrumentations: without
them every call of a tool looks the same, and without a result no outcome is
recorded); an error status or ``error.type`` makes the outcome an error.

A run is one trace id, calls ordered by start time. Spans of a trace may
arrive in any order, so a trace is replayed when the input ends, or when more
than ``MAX_OPEN_TRACES`` traces (or ``MAX_HELD_SPANS`` tool spans in all) are
waiting (the least recently active is replayed first). A trace holding more
than ``MAX_TRACE_SPANS`` tool spans replays its earlier half at once (by start
time) and goes on: memory stays bounded, and only a span arriving after later
ones of its trace were replayed is replayed out of order.
``gen_ai.conversation.id`` is the session; ``gen_ai.agent.id`` (or
``gen_ai.agent.name``) selects the per-agent config block.
"""

from __future__ import annotations

import base64
import datetime as _dt
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .._util import parse_arguments
from ..hashing import MISSING
from ._common import ReadContext
from ._sink import Loc, TraceSink

__all__ = ["MAX_HELD_SPANS", "MAX_OPEN_TRACES", "MAX_TRACE_SPANS", "flatten", "is_span", "read"]

MAX_OPEN_TRACES = 1024
MAX_TRACE_SPANS = 2048
MAX_HELD_SPANS = 16384
_ERROR_CODES = frozenset({2, "2", "ERROR", "STATUS_CODE_ERROR", "StatusCode.ERROR"})


def _otlp_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        raw = value["intValue"]
        try:
            return int(raw)
        except (TypeError, ValueError):
            return raw
    if "arrayValue" in value:
        items = (
            value["arrayValue"].get("values", [])
            if isinstance(value["arrayValue"], Mapping)
            else []
        )
        return [_otlp_value(v) for v in items]
    if "kvlistValue" in value:
        kv = value["kvlistValue"]
        items = kv.get("values", []) if isinstance(kv, dict) else []
        return {
            str(i.get("key")): _otlp_value(i.get("value")) for i in items if isinstance(i, dict)
        }
    if "bytesValue" in value:
        try:
            return base64.b64decode(value["bytesValue"])
        except (ValueError, TypeError):
            return value["bytesValue"]
    return None


def _attributes(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, list):  # OTLP: [{"key": ..., "value": {...}}]
        return {str(a.get("key")): _otlp_value(a.get("value")) for a in raw if isinstance(a, dict)}
    return {}


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1e9 if value > 1e14 else float(value)
    if isinstance(value, str) and value:
        if value.isdigit():
            return int(value) / 1e9
        try:
            return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def is_span(record: Mapping[str, Any]) -> bool:
    if "resourceSpans" in record:
        return True
    context = record.get("context")
    if isinstance(context, dict) and "trace_id" in context and "span_id" in context:
        return True
    has_ids = ("trace_id" in record or "traceId" in record) and (
        "span_id" in record or "spanId" in record
    )
    return has_ids and ("attributes" in record or "name" in record)


class _Span:
    __slots__ = ("attrs", "error", "loc", "name", "order", "span_id", "start", "trace_id")

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        name: str,
        start: float | None,
        attrs: dict[str, Any],
        error: str | None,
        loc: Loc,
        order: int,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.name = name
        self.start = start
        self.attrs = attrs
        self.error = error
        self.loc = loc
        self.order = order


def flatten(record: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The span objects of one record (an OTLP export holds many)."""
    resource_spans = record.get("resourceSpans")
    if isinstance(resource_spans, list):
        for resource in resource_spans:
            if not isinstance(resource, dict):
                continue
            scopes = resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans")
            for scope in scopes if isinstance(scopes, list) else ():
                spans = scope.get("spans") if isinstance(scope, dict) else None
                for span in spans if isinstance(spans, list) else ():
                    if isinstance(span, dict):
                        yield span
        return
    yield record


def _span(raw: Mapping[str, Any], loc: Loc, order: int) -> _Span | None:
    context = raw.get("context")
    if isinstance(context, dict):
        trace_id, span_id = context.get("trace_id"), context.get("span_id")
    else:
        trace_id = raw.get("traceId", raw.get("trace_id"))
        span_id = raw.get("spanId", raw.get("span_id"))
    if not isinstance(trace_id, str) or not trace_id:
        return None
    attrs = _attributes(raw.get("attributes"))
    status = raw.get("status")
    error: str | None = None
    if isinstance(status, dict):
        code = status.get("code", status.get("status_code"))
        if isinstance(code, (str, int)) and code in _ERROR_CODES:
            message = status.get("message", status.get("description"))
            error = message if isinstance(message, str) and message else "error"
    if error is None and attrs.get("error.type"):
        error = str(attrs["error.type"])
    start = _time(raw.get("startTimeUnixNano", raw.get("start_time", raw.get("startTime"))))
    name = raw.get("name")
    return _Span(
        trace_id,
        str(span_id) if span_id is not None else f"span#{order}",
        name if isinstance(name, str) else "",
        start,
        attrs,
        error,
        loc,
        order,
    )


class _Trace:
    __slots__ = ("agent", "begun", "loc", "session", "spans")

    def __init__(self, loc: Loc) -> None:
        self.loc = loc
        self.session: str | None = None
        self.agent: str | None = None
        self.spans: list[_Span] = []
        self.begun = False
        """Some of its spans were replayed already (its run is open in the sink)."""


def _tool_of(span: _Span) -> str | None:
    attrs = span.attrs
    tool = attrs.get("gen_ai.tool.name")
    if isinstance(tool, str) and tool:
        return tool
    if attrs.get("gen_ai.operation.name") == "execute_tool":
        name = span.name
        return name[len("execute_tool ") :].strip() if name.startswith("execute_tool ") else None
    if attrs.get("openinference.span.kind") == "TOOL":
        tool = attrs.get("tool.name") or span.name
        return tool if isinstance(tool, str) and tool else None
    return None


def read(records: Iterable[tuple[Loc, Any]], sink: TraceSink, ctx: ReadContext) -> None:
    traces: dict[str, _Trace] = {}
    order = 0
    held = 0
    for loc, record in records:
        if not isinstance(record, dict):
            sink.problem(loc, "expected a span object")
            continue
        seen_any = False
        for raw in flatten(record):
            order += 1
            span = _span(raw, loc, order)
            if span is None:
                sink.problem(loc, "span without a trace id")
                continue
            seen_any = True
            trace = traces.pop(span.trace_id, None)  # re-inserted: most recently active
            if trace is None:
                trace = _Trace(loc)
                if len(traces) >= MAX_OPEN_TRACES:
                    oldest = next(iter(traces))
                    held -= _replay(sink, ctx, oldest, traces.pop(oldest))
            traces[span.trace_id] = trace
            attrs = span.attrs
            session = attrs.get("gen_ai.conversation.id") or attrs.get("session.id")
            if trace.session is None and isinstance(session, str) and session:
                trace.session = session
            agent = attrs.get("gen_ai.agent.id") or attrs.get("gen_ai.agent.name")
            if trace.agent is None and isinstance(agent, str) and agent:
                trace.agent = agent
            if _tool_of(span) is not None:
                trace.spans.append(span)
                held += 1
                if len(trace.spans) > MAX_TRACE_SPANS:
                    held -= _replay(sink, ctx, span.trace_id, trace, MAX_TRACE_SPANS // 2)
                while held > MAX_HELD_SPANS and len(traces) > 1:
                    oldest = next(iter(traces))
                    held -= _replay(sink, ctx, oldest, traces.pop(oldest))
        if not seen_any and "resourceSpans" not in record:
            sink.problem(loc, "not an OpenTelemetry span")
    for trace_id, trace in traces.items():
        _replay(sink, ctx, trace_id, trace)


def _replay(sink: TraceSink, ctx: ReadContext, trace_id: str, trace: _Trace, keep: int = 0) -> int:
    """Replay a trace's spans by start time; with ``keep``, only the earlier ones, keeping
    the latest ``keep`` (the run stays open). Returns how many spans were replayed."""
    key = ctx.key(trace_id)
    if not trace.spans:
        if trace.begun and not keep:
            sink.end_run(key)
        return 0  # a trace without tool calls is not an agent run worth reporting
    if not trace.begun:
        trace.begun = True
        sink.begin_run(
            key, label=trace_id, line=trace.loc, session=trace.session, agent=trace.agent
        )
    spans = sorted(
        trace.spans, key=lambda s: (s.start if s.start is not None else float("inf"), s.order)
    )
    if keep:
        spans, trace.spans = spans[:-keep], spans[-keep:]
    for span in spans:
        attrs = span.attrs
        tool = _tool_of(span) or "?"
        call_id = attrs.get("gen_ai.tool.call.id")
        call_id = call_id if isinstance(call_id, str) and call_id else span.span_id
        args = attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value"))
        sink.call(key, call_id, tool, parse_arguments(args), span.loc)
        result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value", MISSING))
        if span.error is not None:
            message = span.error
            if message == "error" and isinstance(result, str) and result:
                message = result
            sink.outcome(key, call_id, span.loc, error=message)
        elif result is not MISSING:
            sink.outcome(key, call_id, span.loc, result=parse_arguments(result))
    if not keep:
        sink.end_run(key)
    return len(spans)
