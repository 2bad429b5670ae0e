"""Test data and the driver stand-in shared by the telemetry tests (no OpenTelemetry imports)."""

from __future__ import annotations

import time
from typing import Any

import loopwarden as lw
from loopwarden.telemetry import Telemetry
from tests.integrations import _shared

# The integration tests' small thresholds (warn at 3, block at 5, stop at 7), with a
# post-compaction guard that aborts on the third identical outcome.
SMALL: dict[str, Any] = {
    "tools": {
        "loopDetection": {
            **_shared.SMALL["tools"]["loopDetection"],
            "postCompactionGuard": {"windowSize": 3},
        }
    }
}
CANARY = "sk-canary-7f3a9c1e"  # a fake secret placed in params and results


class Timed:
    """What the guard driver will do: time each hook and tell Telemetry, around the public API.

    The before_call time is kept per call id, as the driver keeps it with the
    call's cached args hash, so ``record_outcome`` gets the call's whole guard time.
    """

    def __init__(self, run: lw.RunGuard, telemetry: Telemetry) -> None:
        self.run = run
        self.telemetry = telemetry
        self.before: dict[str | None, float] = {}

    def before_call(self, tool: str, params: Any, call_id: str | None = None) -> lw.Decision:
        start = time.perf_counter()
        try:
            decision = self.run.before_call(tool, params, call_id)
        except lw.LoopAbort:
            spent = time.perf_counter() - start
            self.telemetry.record_call("block", tool, self.run.agent_id, spent)
            raise
        spent = time.perf_counter() - start
        self.telemetry.record_call(decision.action, tool, self.run.agent_id, spent)
        if not decision.blocked:
            self.before[call_id] = spent
        return decision

    def after_call(self, tool: str, params: Any, call_id: str | None = None, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.run.after_call(tool, params, call_id, **kw)
        finally:
            spent = time.perf_counter() - start + self.before.pop(call_id, 0.0)
            self.telemetry.record_outcome(tool, self.run.agent_id, spent)
