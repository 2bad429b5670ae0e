"""The rolling-history detectors and their rule order (SPEC section 4).

:func:`detect_in_window` runs before every tool call, so the rules are written
out in order in one function that reads the window's incremental counts (see
:mod:`loopwarden.engine.window`): a function call per rule would cost more
than the rules themselves. To add a detector:

1. keep the quantity it needs up to date in :class:`~loopwarden.engine.window.RunWindow`
   (constant time per record, never a walk over the window);
2. add its rule at its place in :func:`detect_in_window`, behind its switch in
   the config, returning a :class:`Detection`;
3. put its texts in :mod:`loopwarden.engine.messages` and name it with a
   constant below (the name appears in events, run records and reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from . import messages
from .window import RunWindow

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig

__all__ = [
    "GENERIC_REPEAT",
    "GLOBAL_CIRCUIT_BREAKER",
    "KNOWN_POLL_NO_PROGRESS",
    "PING_PONG",
    "UNKNOWN_TOOL_REPEAT",
    "Detection",
    "detect_in_window",
]

Level = Literal["warning", "critical"]

UNKNOWN_TOOL_REPEAT = "unknown_tool_repeat"
GLOBAL_CIRCUIT_BREAKER = "global_circuit_breaker"
KNOWN_POLL_NO_PROGRESS = "known_poll_no_progress"
PING_PONG = "ping_pong"
GENERIC_REPEAT = "generic_repeat"


@dataclass(frozen=True)
class Detection:
    """A loop pattern found before a call."""

    level: Level
    detector: str
    count: int
    message: str
    warning_key: str
    paired_tool: str | None = None
    tool_name: str = ""
    latest_result_hash: str | None = None
    """The outcome hash the pattern keeps returning (what a block repeats as a veto)."""
    unknown_tool_name: str | None = None

    @property
    def critical(self) -> bool:
        return self.level == "critical"


def detect_in_window(
    window: RunWindow, tool: str, sig: str, poll: bool, cfg: LoopDetectionConfig
) -> Detection | None:
    """Apply the rules of SPEC section 4 in order; the first match wins."""
    records = window.records
    if not records:
        return None
    # 1. Unknown tool: the newest outcomes of this tool name a missing tool.
    last = records[-1]
    uname = last.unknown_tool_name
    if uname is not None and last.tool_name == tool:
        ustreak = min(last.ustreak, len(records))
        if ustreak >= cfg.unknown_tool_threshold:
            return Detection(
                "critical",
                UNKNOWN_TOOL_REPEAT,
                ustreak,
                # The name as the model called it, when the error names this tool.
                messages.unknown_tool(tool if tool.lower() == uname else uname, ustreak),
                f"unknown-tool:{tool}:{uname}",
                tool_name=tool,
                latest_result_hash=last.result_hash,
                unknown_tool_name=uname,
            )
    stats = window.sigs.get(sig)
    if stats is None:
        if sig != window.pp_other:
            return None  # a call new to this window can only continue a ping-pong
        streak, latest, repeats = 0, None, 0
    else:
        streak, latest, repeats = stats.streak, stats.latest, stats.count
    outcome = latest or "none"
    # 2. Global circuit breaker: identical no-progress outcomes in a row.
    if streak >= cfg.global_circuit_breaker_threshold:
        return Detection(
            "critical",
            GLOBAL_CIRCUIT_BREAKER,
            streak,
            messages.global_breaker(tool, streak),
            f"global:{tool}:{sig}:{outcome}",
            tool_name=tool,
            latest_result_hash=latest,
        )
    detectors = cfg.detectors
    warning = cfg.warning_threshold
    # 3. Known poll without progress.
    if poll and detectors.known_poll_no_progress and streak >= warning:
        critical = streak >= cfg.critical_threshold
        return Detection(
            "critical" if critical else "warning",
            KNOWN_POLL_NO_PROGRESS,
            streak,
            messages.known_poll(tool, streak, critical),
            f"poll:{tool}:{sig}:{outcome}",
            tool_name=tool,
            latest_result_hash=latest,
        )
    # 4. Ping-pong: this call continues an alternating tail.
    if detectors.ping_pong and sig == window.pp_other:
        tail = min(window.pp_tail, len(records))
        # The checked call counts too, so the count reaches historySize + 1, as
        # OpenClaw counts it (SPEC 9).
        count = tail + 1
        if tail >= 2 and count >= warning:
            paired = window.pp_last_tool or ""
            critical = count >= cfg.critical_threshold and window.pp_evidence(tail)
            low, high = sorted((sig, window.pp_last or ""))
            return Detection(
                "critical" if critical else "warning",
                PING_PONG,
                count,
                messages.ping_pong(tool, paired, count, critical),
                f"pingpong:{low}|{high}",
                paired_tool=paired,
                tool_name=tool,
                latest_result_hash=latest,
            )
    # 5. Generic repeat: blocks on a no-progress streak, warns on repeats.
    if not poll and detectors.generic_repeat:
        critical = streak >= cfg.critical_threshold
        if critical or repeats >= warning:
            count = streak if critical else repeats
            return Detection(
                "critical" if critical else "warning",
                GENERIC_REPEAT,
                count,
                messages.generic_repeat(tool, count, critical),
                # A block is keyed by the outcome it repeats; a warning by the call.
                f"generic:{tool}:{sig}:{outcome}" if critical else f"generic:{tool}:{sig}",
                tool_name=tool,
                latest_result_hash=latest,
            )
    return None
