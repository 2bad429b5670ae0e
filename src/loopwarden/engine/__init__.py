"""The loop-detection engine: pure, with no store, no logger and no clock it was not given.

::

    window.py     RunWindow, Record: one run's records and incremental counts
    detect.py     Detection, detect_in_window: the SPEC 4 rules in order
    messages.py   every text the model reads
    compaction.py PostCompactionGuard: the SPEC 5 window after a compaction
    state.py      RunState (what stores keep per run), Stop
    runtime.py    before / after / compacted: the SPEC 6 policy, returning a Step
    history.py    ToolCallHistory: the SPEC 8 engine API (one window for all runs)

:mod:`loopwarden.guard` drives it: it hashes the inputs, runs a policy
function inside a store transaction, and only after the commit writes run
records, emits events and logs.
"""

from __future__ import annotations

from .compaction import CompactionVerdict, LogLine, PostCompactionGuard
from .detect import Detection, detect_in_window
from .history import ToolCallHistory
from .runtime import Decision, Step, after, before, block_result, compacted
from .state import RunState, Stop
from .window import Record, RunWindow

__all__ = [
    "CompactionVerdict",
    "Decision",
    "Detection",
    "LogLine",
    "PostCompactionGuard",
    "Record",
    "RunState",
    "RunWindow",
    "Step",
    "Stop",
    "ToolCallHistory",
    "after",
    "before",
    "block_result",
    "compacted",
    "detect_in_window",
]
