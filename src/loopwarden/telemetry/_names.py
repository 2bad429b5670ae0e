"""Names of every span event, metric and attribute loopwarden emits (no third-party imports).

One place, so the OpenTelemetry bridge, the Prometheus metrics, the OTLP JSON
writer and ``docs/observability.md`` cannot drift apart.
"""

from __future__ import annotations

import threading
from typing import Any

from ..events import LoopEvent

# -- GenAI semantic conventions (status: Development) -------------------------------
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
OPERATION_NAME = "gen_ai.operation.name"

# -- loopwarden's own attributes ------------------------------------------------------
DETECTOR = "loopwarden.detector"
LEVEL = "loopwarden.level"
COUNT = "loopwarden.count"
PAIRED_TOOL = "loopwarden.paired_tool"
WARNING_KEY = "loopwarden.warning_key"
RUN_ID = "loopwarden.run_id"
CODE = "loopwarden.code"
ACTION = "loopwarden.action"

# -- metrics (OpenTelemetry name, unit, Prometheus name as exported) -----------------
TOOL_CALLS = "loopwarden.tool_calls"
DETECTIONS = "loopwarden.detections"
RUNS_STOPPED = "loopwarden.runs.stopped"
GUARD_DURATION = "loopwarden.guard.duration"

METRICS: dict[str, tuple[str, str, str]] = {
    TOOL_CALLS: ("{call}", "loopwarden_tool_calls_total", "Tool calls checked, by decision."),
    DETECTIONS: (
        "{detection}",
        "loopwarden_detections_total",
        "Guard events (warn, block, stop, abort), by detector and level.",
    ),
    RUNS_STOPPED: ("{run}", "loopwarden_runs_stopped_total", "Runs the guard ended, by code."),
    GUARD_DURATION: (
        "s",
        "loopwarden_guard_duration_seconds",
        "Time spent in the guard itself per tool call (before_call plus after_call).",
    ),
}

# The guard takes microseconds in memory and milliseconds with a remote store;
# the SDK's default buckets (0 .. 10000) would put every sample in the first one.
DURATION_BUCKETS = (
    0.000_002,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.1,
)

OVERFLOW = "_other"
"""Label value that stands for every tool name (or agent) past the cardinality cap."""


def event_name(event: LoopEvent) -> str:
    """``loopwarden.warn``, ``loopwarden.block``, ``loopwarden.stop`` or ``loopwarden.abort``."""
    return f"loopwarden.{event.action}"


def stop_code(event: LoopEvent) -> str | None:
    """The machine-readable code of the run's end, for ``stop`` and ``abort`` events."""
    if event.action in ("stop", "abort"):
        return event.detector  # the rule that ended the run: its exception's code
    return None


def event_attributes(event: LoopEvent) -> dict[str, Any]:
    """The attributes of a span event: names, ids, counts and digests; never params or results."""
    attrs: dict[str, Any] = {
        TOOL_NAME: event.tool,
        DETECTOR: event.detector,
        LEVEL: event.level,
        COUNT: event.count,
    }
    optional = (
        (TOOL_CALL_ID, event.call_id),
        (CONVERSATION_ID, event.session_id),
        (AGENT_NAME, event.agent_id),
        (PAIRED_TOOL, event.paired_tool),
        (WARNING_KEY, event.warning_key),
        (RUN_ID, event.run_id),
        (CODE, stop_code(event)),
    )
    attrs.update((key, value) for key, value in optional if value is not None)
    return attrs


class Capped:
    """Maps label values to themselves until ``limit`` distinct ones were seen, then to OVERFLOW.

    Tool names come from the model, which invents new ones when it hallucinates;
    without a cap every invented name would become a new time series.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the cardinality cap must be at least 1")
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        seen = self._seen
        if value in seen:
            return value
        with self._lock:
            if value in seen or len(seen) < self.limit:
                seen.add(value)
                return value
        return OVERFLOW
