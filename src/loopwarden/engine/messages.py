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
    "compaction_hold",
    "consecutive_repeat",
    "cycle",
    "fail_closed",
    "failure_streak",
    "generic_repeat",
    "global_breaker",
    "known_poll",
    "missing_tool",
    "ping_pong",
    "poll_wait",
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
    """``name`` is not among the run's registered tools."""
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


def poll_wait(
    tool: str, count: int, critical: bool, elapsed: str | None, interval: float, wait: int
) -> str:
    """A poll of a job whose result keeps saying it is still running: the job's time so far
    (``elapsed`` in words; ``None`` when no time has passed on the guard's clock) and the wait
    to take."""
    every = f" (about every {interval:.0f} s)" if interval >= 1 else ""
    if critical:
        after = f" after at least {elapsed}" if elapsed else ""
        return (
            f"CRITICAL: loopwarden blocked this call: the job is still running{after}, and "
            f"{tool} has been polled {count} times{every} with no change in its result. This "
            "poll will be refused from now on. Wait for the job in a single step instead (for "
            f"example `sleep {wait}` followed by the check in one command, or a command that "
            "waits until the job ends), do something else meanwhile, or tell the user that the "
            "job is taking long."
        )
    over = f" over {elapsed}" if elapsed else ""
    return (
        f"WARNING: the job is still running: {tool} has been polled {count} times{over}{every}, "
        "and its result has not changed. Polling again at once will not make it finish "
        f"sooner: wait {wait} s before checking again (for example `sleep {wait}` before the "
        "next check), or do something else meanwhile."
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


def compaction_abort(tool: str, count: int, window: int) -> str:
    """The post-compaction guard: the loop survived a context compaction."""
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


def consecutive_repeat(tool: str, count: int, critical: bool, stop: bool) -> str:
    """The same call, ``count`` times in a row, with the same result each time."""
    if stop:
        return (
            f"CRITICAL: loopwarden stopped this run: {tool} was called {count} times in a row "
            "with the same arguments and the same result, and the blocks were ignored."
        )
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: {tool} was called {count} times in a row "
            "with the same arguments and got the same result each time (line counters, "
            "timestamps and similar noise ignored). Another try will not help: change the "
            "arguments, take a different approach, or report that you are stuck. If you are "
            "waiting for something to finish, wait before checking again (for example "
            "`sleep 30` in the same command) instead of asking again at once."
        )
    return (
        f"WARNING: {tool} has been called {count} times in a row with the same arguments and "
        "got the same result each time. Repeating it will not change the result; change the "
        "arguments or the approach."
    )


def cycle(tools: tuple[str, ...], length: int, critical: bool, stop: bool) -> str:
    """A round of calls going round again with the same results."""
    # One tool with different arguments in each position is not a round of tools.
    names = (
        f"{len(tools)} {tools[0]} calls with different arguments"
        if len(set(tools)) == 1
        else " -> ".join(tools)
    )
    if stop:
        return (
            f"CRITICAL: loopwarden stopped this run: the last {length} calls went round the "
            f"same cycle ({names}) with the same results, and the blocks were ignored."
        )
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: the last {length} calls went round the "
            f"same cycle of {len(tools)} calls ({names}), each returning what it returned the "
            "round before. Going round again will not help: change the approach or report "
            "that you are stuck."
        )
    return (
        f"WARNING: the last {length} calls repeat a cycle of {len(tools)} calls ({names}) "
        "with the same results each round. If this is not moving the task forward, break "
        "the cycle: change the approach or report the failure."
    )


def failure_streak(tool: str, count: int, critical: bool, stop: bool, common: str | None) -> str:
    """One tool failing call after call; ``common`` is the error they share (``None``: they
    differ; ``""``: they agree but the text is not to be quoted)."""
    same = (
        ""
        if common is None
        else (f' with the same error ("{common}")' if common else " with the same error")
    )
    if stop:
        return (
            f"CRITICAL: loopwarden stopped this run: the last {count} calls of {tool} all "
            f"failed{same}, and the blocks were ignored."
        )
    if critical:
        return (
            f"CRITICAL: loopwarden blocked this call: the last {count} calls of {tool} all "
            f"failed{same}. Calling {tool} again the same way will fail again: fix the cause "
            "of the error first, change the approach, use another tool, or report the failure."
        )
    return (
        f"WARNING: the last {count} calls of {tool} all failed{same}. Stop retrying variations "
        "of the same idea; read the error, change the approach, or report the failure."
    )


def missing_tool(tool: str, count: int, action: str) -> str:
    """Another rule's finding about a tool that does not exist, worded as what it is."""
    if action == "stop":
        return unknown_tool_stop(tool, count)
    if action == "block":
        return (
            f"CRITICAL: loopwarden blocked this call: the tool {tool!r} is not available here "
            f"and the same call has been made {count} times. Do not call it again; continue "
            "with the tools you have, or answer without it."
        )
    return (
        f"WARNING: the tool {tool!r} is not available here and has been called {count} "
        "times. Stop calling it; continue with the tools you have, or answer without it."
    )


def compaction_hold(tool: str, remaining: int) -> str:
    """A stop held back while the post-compaction guard watches the loop decide it."""
    more = (
        "The next identical attempt ends the run."
        if remaining <= 1
        else f"{remaining} more identical attempts end the run."
    )
    return (
        f"CRITICAL: loopwarden blocked this call: {tool} keeps returning the same result "
        f"with the same arguments, and the context compaction did not break the loop. {more} "
        "Do something different, or report that you are stuck."
    )
