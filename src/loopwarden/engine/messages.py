"""Every text the model reads from loopwarden, in one place.

Warnings are appended to a tool result; blocks replace it; stops and aborts
end the run with their text. Each text names the tool and the count, says what
happened and what to do instead. Integrations that word a stop for their own
protocol start from these.
"""

from __future__ import annotations

__all__ = [
    "RUN_STOPPED",
    "blocked_in_a_row",
    "compaction_abort",
    "fail_closed",
    "generic_repeat",
    "global_breaker",
    "known_poll",
    "ping_pong",
    "stop",
    "unknown_tool",
    "unknown_tool_stop",
    "unregistered_tool",
]

RUN_STOPPED = "loopwarden stopped this run"
"""What a refused call says when a stored stop lost its own text."""


def unknown_tool(name: str, count: int) -> str:
    """Rule 1: the tool's outcomes keep saying that ``name`` does not exist."""
    return (
        f"CRITICAL: loopwarden blocked this call: the tool {name!r} is not available here "
        f"and has been attempted {count} times. Do not call it again; continue with the "
        "tools you have, or answer without it."
    )


def unregistered_tool(name: str, count: int) -> str:
    """SPEC 6.4: ``name`` is not among the run's registered tools."""
    return (
        f"CRITICAL: loopwarden blocked this call: there is no tool named {name!r}, and it "
        f"has been attempted {count} times in a row. Do not call it again; continue with "
        "the tools that exist, or answer without it."
    )


def global_breaker(tool: str, count: int) -> str:
    """Rule 2, which also ends the run."""
    return (
        f"CRITICAL: the loopwarden global circuit breaker stopped this run: {tool} returned "
        f"identical no-progress outcomes {count} times in a row for identical arguments."
    )


def known_poll(tool: str, count: int, critical: bool) -> str:
    """Rule 3: a polling tool whose state does not change."""
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


def ping_pong(tool: str, paired: str, count: int, critical: bool) -> str:
    """Rule 4: two calls alternating (two calls of one tool with different arguments, made
    together turn after turn, are worded as such)."""
    if tool == paired:
        return _same_tool_pair(tool, count, critical)
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


def _same_tool_pair(tool: str, count: int, critical: bool) -> str:
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: the last {count} calls were the same "
            f"two {tool} calls (two sets of arguments) over and over, with no progress in "
            "either result. Stop repeating the pair; try a different approach or report "
            "the failure."
        )
    return (
        f"WARNING: the last {count} tool calls repeat the same two {tool} calls (two sets "
        "of arguments) over and over. If this is not making progress, stop repeating "
        "them and change your approach or report the task as failed."
    )


def blocked_in_a_row(tool: str, count: int, detector: str) -> str:
    """Blocks count toward a stop whatever the detector (issue 12)."""
    return (
        f"CRITICAL: loopwarden stopped this run: {count} "
        f"{'call in a row was' if count == 1 else 'calls in a row were'} blocked "
        f"({detector.replace('_', ' ')}, last {tool}) and the model kept making them."
    )


def generic_repeat(tool: str, count: int, critical: bool) -> str:
    """Rule 5: the same call again and again."""
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


def unknown_tool_stop(name: str, count: int) -> str:
    """The unknown-tool guard escalated to the end of the run."""
    return (
        f"CRITICAL: loopwarden stopped this run: the unavailable tool {name!r} was "
        f"attempted {count} times in a row despite being blocked."
    )


def stop(tool: str, count: int, unknown: bool) -> str:
    """The text that ends a run: an unknown tool retried, or the global circuit breaker."""
    return unknown_tool_stop(tool, count) if unknown else global_breaker(tool, count)


def compaction_abort(tool: str, count: int, window: int) -> str:
    """SPEC 5: the loop survived a context compaction."""
    return (
        f"CRITICAL: {tool} was called {count} times with identical arguments and got "
        f"identical results in the {window} attempts right after context compaction. "
        "Compaction did not break the loop, so loopwarden aborted the run."
    )


def fail_closed(error: str) -> str:
    """The guard failed and is configured to block rather than allow."""
    return (
        "loopwarden could not check this call and is configured to fail closed, so the "
        f"call was not run ({error}). Try again later or report the problem."
    )
