"""Test data shared by the telemetry tests (no OpenTelemetry imports)."""

from __future__ import annotations

from typing import Any

from loopwarden.testing import SMALL_THRESHOLDS

# Warn at 3, block at 5, stop at 7, with a post-compaction guard that aborts on
# the third identical outcome.
SMALL: dict[str, Any] = {
    "tools": {
        "loopDetection": {
            **SMALL_THRESHOLDS["tools"]["loopDetection"],
            "postCompactionGuard": {"windowSize": 3},
        }
    }
}
CANARY = "sk-canary-7f3a9c1e"  # a fake secret placed in params and results
