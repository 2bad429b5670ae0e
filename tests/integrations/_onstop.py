"""What the onStop tests of the LangChain and Pydantic AI integrations share: the scripted
model behind the chat-completions server (``_chat_server.py``) and how to read a report."""

from __future__ import annotations

from typing import Any

from loopwarden.stopping import StopReport
from tests.integrations._chat_server import Reply

FINAL = "Job 42 stayed pending through every check; the job runner needs a look."
"""What the scripted model answers when it is offered no tools."""
UNDERSTOOD = "Understood: I will check job 43 instead."
"""What it answers when a person's note answers its call."""

# Thresholds for two calls per turn (warn 4, block 6, stop 8): with 3, any two
# interleaved calls already count as a ping-pong.
PARALLEL = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 4,
            "criticalThreshold": 6,
            "globalCircuitBreakerThreshold": 8,
        }
    }
}


def turn_of(body: dict[str, Any]) -> int:
    """How many model turns a request body's history holds."""
    return sum(m.get("role") == "assistant" for m in body["messages"])


def stuck_then_answers(body: dict[str, Any]) -> Reply:
    """Poll job 42 while offered tools, answer when not, and follow a person's note when
    one answers the call."""
    if not body.get("tools"):
        return FINAL
    last = body["messages"][-1]
    if last.get("role") == "tool" and "decided the run should go on" in str(last["content"]):
        return UNDERSTOOD
    return [("poll_status", {"job": "42"}, f"c{turn_of(body)}")]


def poll_and_read(body: dict[str, Any]) -> Reply:
    """Two calls per turn: the same poll and a log read that moves on; answer without tools."""
    if not body.get("tools"):
        return FINAL
    turn = turn_of(body)
    return [("poll_status", {"job": "42"}, f"p{turn}"), ("read_log", {"offset": turn}, f"r{turn}")]


def report_of(found: dict[str, Any]) -> StopReport:
    """The StopReport behind a ``loopwarden`` metadata entry (``StopReport.to_dict()``)."""
    limit = found["turn_limit"]
    return StopReport(
        found["code"],
        found["tool"],
        found["count"],
        found["message"],
        found["calls"],
        found["refused"],
        found["run_id"],
        found["tokens"],
        found["turns"],
        limit,
        "request_limit" if limit is not None else None,
    )
