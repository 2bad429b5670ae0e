"""Every rule loopwarden runs, as a declared :class:`Detector`, in precedence order.

::

    base.py        the contract (Detector, Trigger, Detection, Observed, Verdict), the
                   registry (register, registered, unregister, rules) and Plan
    openclaw.py    OpenClaw's rules: unknown tool, global circuit breaker, known poll
                   without progress, ping-pong, generic repeat, post-compaction guard
    loopwarden.py  loopwarden's own: consecutive repeat, cycle, failure streak, blocks in a row

A new rule is one :class:`Detector` subclass and one :func:`register` call (see the
recipe in docs/architecture.md); :func:`loopwarden.engine.runtime.before` and
:func:`~loopwarden.engine.runtime.after` run every registered rule through one path.
"""

from __future__ import annotations

from .base import (
    Call,
    Detection,
    Detector,
    Observed,
    Plan,
    Threshold,
    Trigger,
    Verdict,
    plan_for,
    register,
    registered,
    rules,
    unregister,
)
from .loopwarden import (
    BLOCKS_IN_A_ROW,
    CONSECUTIVE_REPEAT,
    CYCLE,
    FAILURE_STREAK,
    BlocksInARow,
    BlocksInARowSettings,
    ConsecutiveRepeat,
    ConsecutiveRepeatSettings,
    Cycle,
    CycleSettings,
    FailureStreak,
    FailureStreakSettings,
    is_poll_name,
)
from .openclaw import (
    COMPACTION_LOOP_PERSISTED,
    GENERIC_REPEAT,
    GLOBAL_CIRCUIT_BREAKER,
    KNOWN_POLL_NO_PROGRESS,
    PING_PONG,
    UNKNOWN_TOOL_REPEAT,
    GenericRepeat,
    GlobalCircuitBreaker,
    KnownPollNoProgress,
    PingPong,
    PostCompaction,
    UnknownTool,
)

__all__ = [
    "BLOCKS_IN_A_ROW",
    "COMPACTION_LOOP_PERSISTED",
    "CONSECUTIVE_REPEAT",
    "CYCLE",
    "FAILURE_STREAK",
    "GENERIC_REPEAT",
    "GLOBAL_CIRCUIT_BREAKER",
    "KNOWN_POLL_NO_PROGRESS",
    "PING_PONG",
    "STOP_CODES",
    "UNKNOWN_TOOL_REPEAT",
    "BlocksInARow",
    "BlocksInARowSettings",
    "Call",
    "ConsecutiveRepeat",
    "ConsecutiveRepeatSettings",
    "Cycle",
    "CycleSettings",
    "Detection",
    "Detector",
    "FailureStreak",
    "FailureStreakSettings",
    "GenericRepeat",
    "GlobalCircuitBreaker",
    "KnownPollNoProgress",
    "Observed",
    "PingPong",
    "Plan",
    "PostCompaction",
    "Threshold",
    "Trigger",
    "UnknownTool",
    "Verdict",
    "is_poll_name",
    "plan_for",
    "register",
    "registered",
    "rules",
    "unregister",
]

for _rule in (
    UnknownTool,
    GlobalCircuitBreaker,
    KnownPollNoProgress,
    PingPong,
    GenericRepeat,
    ConsecutiveRepeat,
    Cycle,
    FailureStreak,
    BlocksInARow,
    PostCompaction,
):
    register(_rule)

STOP_CODES = (
    CONSECUTIVE_REPEAT,
    CYCLE,
    FAILURE_STREAK,
    BLOCKS_IN_A_ROW,
    UNKNOWN_TOOL_REPEAT,
    GLOBAL_CIRCUIT_BREAKER,
    COMPACTION_LOOP_PERSISTED,
)
"""Every code a built-in rule can end a run with (``LoopAbort.code``)."""
