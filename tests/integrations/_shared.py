"""Helpers shared by the framework integration tests."""

from __future__ import annotations

import subprocess
import sys
import threading

import loopwarden as lw

# Small thresholds keep the escalation tests short: warn at 3, block at 5, stop at 7.
SMALL = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "globalCircuitBreakerThreshold": 7,
            "unknownToolThreshold": 3,
        }
    }
}
# A poll whose result says the job is still running ("pending") gets the wait wording;
# other repeated results ("3% done", errors) the plain one.
WARNING = "WARNING: the job is still running: poll_status has been polled"
REPEATED = "WARNING: poll_status has been called"
BLOCKED = "CRITICAL: loopwarden blocked this call"


class Counter:
    """Tools that record how often they really ran."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.lock = threading.Lock()

    def hit(self, name: str) -> int:
        with self.lock:
            self.runs.append(name)
            return len(self.runs)


class Events:
    """A LoopGuard event sink that keeps every event."""

    def __init__(self) -> None:
        self.items: list[lw.LoopEvent] = []

    def __call__(self, event: lw.LoopEvent) -> None:
        self.items.append(event)

    def actions(self) -> list[str]:
        return [e.action for e in self.items]


def import_error_without(module: str, *blocked: str) -> str:
    """What importing ``module`` says in a fresh interpreter where ``blocked`` are missing."""
    code = (
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout
