"""The loop-detection engine: pure, with no store, no logger and no clock it was not given.

::

    detectors/    every rule as a declared Detector, and the registry and plan that run them
    window.py     RunWindow, Record: one run's records and incremental counts
    messages.py   every text the model reads
    compaction.py PostCompactionGuard: the window the seed's guard watches after a compaction
    state.py      RunState (what stores keep per run, and its codec), Stop
    runtime.py    before / after / compacted: every rule through one path, returning a Step
    history.py    ToolCallHistory: the engine-level API (one window for all runs)

:mod:`loopwarden.guard` drives it: it hashes the inputs, runs a policy
function inside a store transaction, and only after the commit writes run
records, emits events and logs.
"""

from __future__ import annotations

from .compaction import CompactionVerdict, LogLine, PostCompactionGuard
from .detectors import Detection, Detector, Trigger, register, registered
from .history import ToolCallHistory
from .runtime import Decision, Step, after, before, compacted
from .state import RunState, Stop
from .window import Record, RunWindow

__all__ = [
    "CompactionVerdict",
    "Decision",
    "Detection",
    "Detector",
    "LogLine",
    "PostCompactionGuard",
    "Record",
    "RunState",
    "RunWindow",
    "Step",
    "Stop",
    "ToolCallHistory",
    "Trigger",
    "after",
    "before",
    "compacted",
    "register",
    "registered",
]
