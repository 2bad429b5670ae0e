"""Guard decisions as OTLP/JSON traces (what ``loopwarden replay --format otlp-json`` writes).

Each run becomes one trace: an ``invoke_agent`` root span and one
``execute_tool <tool>`` span per call, carrying ``loopwarden.action`` (the
guard's decision) and, as span events, the ``loopwarden.<action>`` events the
live guard would put on the tool span, with the same attributes. A stop or
abort sets the call span's status to error with the stop's code.

The output is the OTLP file format: one ``ExportTraceServiceRequest`` in the
protobuf JSON mapping per line, one line per run, with hex trace and span ids
as OTLP/JSON requires, so a collector's or a backend's OTLP/JSON import reads
it. Ids are derived from the run id, so writing the same replay twice gives
the same spans. No third-party imports; no params or results are written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import orjson

from ..events import LoopEvent
from ._names import (
    ACTION,
    AGENT_NAME,
    CONVERSATION_ID,
    OPERATION_NAME,
    RUN_ID,
    TOOL_CALL_ID,
    TOOL_NAME,
    event_attributes,
    event_name,
    stop_code,
)

__all__ = ["CallRecord", "OtlpJsonWriter", "to_otlp"]

_KIND_INTERNAL = 1
_STATUS_ERROR = 2
DEFAULT_MAX_CALLS_PER_RUN = 10_000


@dataclass(frozen=True)
class CallRecord:
    """One tool call as the guard decided it."""

    run_id: str
    tool: str
    action: Literal["allow", "warn", "block", "stop"]
    time: float
    """Seconds since the epoch when the call was made."""
    call_id: str | None = None
    end_time: float | None = None
    """When its outcome arrived, if known."""
    session_id: str | None = None
    agent_id: str | None = None


@dataclass
class _Run:
    calls: list[CallRecord] = field(default_factory=list)
    events: list[LoopEvent] = field(default_factory=list)
    dropped: int = 0


def _nanos(seconds: float) -> str:
    return str(round(seconds * 1e9))


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _attributes(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attrs.items() if v is not None]


def _id(*parts: str, size: int) -> str:
    return hashlib.sha256("\x1f".join(("loopwarden", *parts)).encode()).hexdigest()[: size * 2]


class OtlpJsonWriter:
    """Collects calls and events per run and writes each run as one OTLP/JSON line.

    Call :meth:`end_run` when a run is complete (its line is written and its
    memory freed) and :meth:`close` at the end for runs still open. A run keeps
    at most ``max_calls_per_run`` call spans; later calls are counted in the
    root span's ``loopwarden.calls_dropped``, and their events go to the root.
    """

    def __init__(
        self,
        out: IO[str],
        *,
        service_name: str = "loopwarden-replay",
        max_calls_per_run: int = DEFAULT_MAX_CALLS_PER_RUN,
    ) -> None:
        self.out = out
        self.service_name = service_name
        self.max_calls_per_run = max_calls_per_run
        self._runs: dict[str, _Run] = {}

    def add_call(self, call: CallRecord) -> None:
        run = self._runs.setdefault(call.run_id, _Run())
        if len(run.calls) < self.max_calls_per_run:
            run.calls.append(call)
        else:
            run.dropped += 1

    def add_event(self, event: LoopEvent) -> None:
        self._runs.setdefault(event.run_id or "", _Run()).events.append(event)

    def end_run(
        self, run_id: str, *, seed: str | None = None, attributes: Mapping[str, Any] | None = None
    ) -> None:
        """Write the run's line. ``seed`` (default: the run id) derives its trace and span
        ids; ``attributes`` are added to its root span."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            request = self._request(run_id, run, seed or run_id, attributes or {})
            self.out.write(orjson.dumps(request).decode() + "\n")

    def close(self) -> None:
        for run_id in list(self._runs):
            self.end_run(run_id)

    def _request(
        self, run_id: str, run: _Run, seed: str, attributes: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "resourceSpans": [
                {
                    "resource": {"attributes": _attributes({"service.name": self.service_name})},
                    "scopeSpans": [
                        {
                            "scope": {"name": "loopwarden"},
                            "spans": _spans(run_id, run, seed, attributes),
                        }
                    ],
                }
            ]
        }


def _spans(run_id: str, run: _Run, seed: str, extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    trace_id = _id(seed, size=16)
    root_id = _id(seed, "root", size=8)
    first = run.calls[0] if run.calls else None
    session = first.session_id if first else next((e.session_id for e in run.events), None)
    agent = first.agent_id if first else next((e.agent_id for e in run.events), None)
    spans: list[dict[str, Any]] = []
    by_call_id: dict[str, dict[str, Any]] = {}
    by_tool: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    times: list[float] = []
    for index, call in enumerate(run.calls):
        end = call.end_time if call.end_time is not None else call.time
        times += (call.time, end)
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": _id(seed, str(index), size=8),
            "parentSpanId": root_id,
            "name": f"execute_tool {call.tool}",
            "kind": _KIND_INTERNAL,
            "startTimeUnixNano": _nanos(call.time),
            "endTimeUnixNano": _nanos(end),
            "attributes": _attributes(
                {
                    OPERATION_NAME: "execute_tool",
                    TOOL_NAME: call.tool,
                    TOOL_CALL_ID: call.call_id,
                    CONVERSATION_ID: call.session_id,
                    AGENT_NAME: call.agent_id,
                    ACTION: call.action,
                }
            ),
            "events": [],
            "status": {},
        }
        spans.append(span)
        span["_start"], span["_end"] = call.time, end
        if call.call_id is not None:
            by_call_id[call.call_id] = span
        by_tool.setdefault(call.tool, []).append((call.time, span))
    root: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": root_id,
        "name": f"invoke_agent {agent}" if agent else "invoke_agent",
        "kind": _KIND_INTERNAL,
        "attributes": _attributes(
            {
                OPERATION_NAME: "invoke_agent",
                AGENT_NAME: agent,
                CONVERSATION_ID: session,
                RUN_ID: run_id,
                "loopwarden.calls_dropped": run.dropped or None,
                **extra,
            }
        ),
        "events": [],
        "status": {},
    }
    for event in run.events:
        target = _target(event, by_call_id, by_tool)
        when = event.time
        if target is None:
            target = root
            times.append(when)
        else:  # replay decides later than the recorded call: keep the event inside its call
            when = min(max(when, target["_start"]), target["_end"])
        target["events"].append(
            {
                "timeUnixNano": _nanos(when),
                "name": event_name(event),
                "attributes": _attributes(event_attributes(event)),
            }
        )
        code = stop_code(event)
        if code is not None:
            target["status"] = {"code": _STATUS_ERROR, "message": code}
    root["startTimeUnixNano"] = _nanos(min(times, default=0.0))
    root["endTimeUnixNano"] = _nanos(max(times, default=0.0))
    for span in spans:
        del span["_start"], span["_end"]
    return [root, *spans]


def _target(
    event: LoopEvent,
    by_call_id: dict[str, dict[str, Any]],
    by_tool: dict[str, list[tuple[float, dict[str, Any]]]],
) -> dict[str, Any] | None:
    """The call span an event belongs to: same call id, else the latest call of its tool.

    An event whose call id matches no kept call (a dropped call) goes to the root.
    """
    if event.call_id is not None and by_call_id:
        return by_call_id.get(event.call_id)
    target = None
    for started, span in by_tool.get(event.tool, ()):
        if started > event.time:
            break
        target = span
    return target


def to_otlp(
    calls: Iterable[CallRecord],
    events: Iterable[LoopEvent],
    *,
    service_name: str = "loopwarden-replay",
) -> list[dict[str, Any]]:
    """One ``ExportTraceServiceRequest`` (JSON mapping) per run, in order of first appearance."""
    import io

    out = io.StringIO()
    writer = OtlpJsonWriter(out, service_name=service_name)
    for call in calls:
        writer.add_call(call)
    for event in events:
        writer.add_event(event)
    writer.close()
    return [orjson.loads(line) for line in out.getvalue().splitlines()]
