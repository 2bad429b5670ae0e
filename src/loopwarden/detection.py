"""The rolling-history detectors and their rule order (SPEC section 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._window import RunWindow
from .config import LoopDetectionConfig

__all__ = ["Detection", "detect_in_window"]

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


def _unknown_message(name: str, count: int) -> str:
    return (
        f"CRITICAL: loopwarden blocked this call: the tool {name!r} is not available here "
        f"and has been attempted {count} times. Do not call it again; continue with the "
        "tools you have, or answer without it."
    )


def _global_message(tool: str, count: int) -> str:
    return (
        f"CRITICAL: the loopwarden global circuit breaker stopped this run: {tool} returned "
        f"identical no-progress outcomes {count} times in a row for identical arguments."
    )


def _poll_message(tool: str, count: int, critical: bool) -> str:
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: {tool} has been polled {count} times "
            "with identical arguments and no progress. The process looks stuck; stop polling "
            "and report the task as failed, or try a different way forward."
        )
    return (
        f"WARNING: {tool} has been polled {count} times with identical arguments and no "
        "progress in its result. Wait longer between checks, or report the task as failed "
        "if the process looks stuck."
    )


def _ping_pong_message(tool: str, paired: str, count: int, critical: bool) -> str:
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: the last {count} calls alternated "
            f"between {tool} and {paired} with no progress on either side (a ping-pong loop). "
            "Stop alternating; try a different approach or report the failure."
        )
    return (
        f"WARNING: the last {count} tool calls alternate between {tool} and {paired}, "
        "which looks like a ping-pong loop. If this is not making progress, stop "
        "alternating and change your approach or report the task as failed."
    )


def _generic_message(tool: str, count: int, critical: bool) -> str:
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: {tool} was called {count} times in a "
            "row with identical arguments and got identical outcomes each time, so another "
            "try will not help. Do not repeat this call; try a different approach or report "
            "the failure."
        )
    return (
        f"WARNING: {tool} has been called {count} times in this run with identical "
        "arguments. If these calls are not moving the task forward, change your approach "
        "or report that the task cannot be completed."
    )


def detect_in_window(
    window: RunWindow, tool: str, sig: str, poll: bool, cfg: LoopDetectionConfig
) -> Detection | None:
    """Apply the rules of SPEC section 4 in order; the first match wins.

    Reads the window's incremental counters directly: this runs before every call.
    """
    records = window.records
    if not records:
        return None
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
                _unknown_message(tool if tool.lower() == uname else uname, ustreak),
                f"unknown-tool:{tool}:{uname}",
                tool_name=tool,
                latest_result_hash=last.result_hash,
                unknown_tool_name=uname,
            )
    state = window.sigs.get(sig)
    if state is None:
        if sig != window.pp_other:
            return None  # a call new to this window can only continue a ping-pong
        streak, latest, repeats = 0, None, 0
    else:
        streak, latest, repeats = state.streak, state.latest, state.count
    outcome = latest or "none"
    if streak >= cfg.global_circuit_breaker_threshold:
        return Detection(
            "critical",
            GLOBAL_CIRCUIT_BREAKER,
            streak,
            _global_message(tool, streak),
            f"global:{tool}:{sig}:{outcome}",
            tool_name=tool,
            latest_result_hash=latest,
        )
    detectors = cfg.detectors
    warning = cfg.warning_threshold
    if poll and detectors.known_poll_no_progress and streak >= warning:
        critical = streak >= cfg.critical_threshold
        return Detection(
            "critical" if critical else "warning",
            KNOWN_POLL_NO_PROGRESS,
            streak,
            _poll_message(tool, streak, critical),
            f"poll:{tool}:{sig}:{outcome}",
            tool_name=tool,
            latest_result_hash=latest,
        )
    if detectors.ping_pong and sig == window.pp_other:
        tail = min(window.pp_tail, len(records))
        # The checked call counts too, but a count never exceeds the window size.
        count = min(tail + 1, cfg.history_size)
        if tail >= 2 and count >= warning:
            paired = window.pp_last_tool or ""
            critical = count >= cfg.critical_threshold and window.pp_evidence(tail)
            low, high = sorted((sig, window.pp_last or ""))
            return Detection(
                "critical" if critical else "warning",
                PING_PONG,
                count,
                _ping_pong_message(tool, paired, count, critical),
                f"pingpong:{low}|{high}",
                paired_tool=paired,
                tool_name=tool,
                latest_result_hash=latest,
            )
    if not poll and detectors.generic_repeat:
        if streak >= cfg.critical_threshold:
            return Detection(
                "critical",
                GENERIC_REPEAT,
                streak,
                _generic_message(tool, streak, True),
                f"generic:{tool}:{sig}:{outcome}",
                tool_name=tool,
                latest_result_hash=latest,
            )
        if repeats >= warning:
            return Detection(
                "warning",
                GENERIC_REPEAT,
                repeats,
                _generic_message(tool, repeats, False),
                f"generic:{tool}:{sig}",
                tool_name=tool,
                latest_result_hash=latest,
            )
    return None
