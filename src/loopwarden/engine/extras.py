"""Detectors beyond OpenClaw's, for the runtime guard (issue 9).

Three patterns that real stuck agents show and the SPEC 4 rules miss or catch
late:

* :class:`ConsecutiveRepeat`: the same call (tool + args) again and again with
  no other call between and the same (masked) outcome each time.
* :class:`Cycle`: a cycle of 2 to 5 calls repeating, each position with the
  same outcome as in the previous round.
* :class:`FailureStreak`: one tool failing call after call, whatever the args.

They are engine-agnostic: a driver shows them each finished call as a
:class:`Step` and asks :meth:`ExtraDetectors.check` before each new call.
State is a handful of fields plus a five-entry ring, so the work per call does
not depend on ``historySize``; :meth:`ExtraDetectors.dump` gives it as plain
lists for persistent stores.

Waiting is not looping: a step marked ``waiting`` (its shell command sleeps,
watches or waits, or the call itself took long) or ``poll`` (a known poll tool)
keeps every detector here quiet for the pattern it is part of, and the OpenClaw
thresholds of SPEC 4 decide alone.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from .._canonical import digest
from ..config.model import (
    CycleConfig,
    ExtrasConfig,
    FailureStreakConfig,
    RepeatConfig,
)
from ..hashing import is_wait_command
from .detect import GLOBAL_CIRCUIT_BREAKER, Detection

__all__ = [
    "CYCLE",
    "FAILURE_STREAK",
    "REPEAT",
    "ConsecutiveRepeat",
    "Cycle",
    "ExtraDetectors",
    "FailureStreak",
    "Finding",
    "Step",
    "finding_detection",
    "is_poll_name",
    "is_wait_command",
    "outranks",
]

Level = Literal["warning", "critical"]

REPEAT = "consecutive_repeat"
CYCLE = "cycle"
FAILURE_STREAK = "failure_streak"


class Step(NamedTuple):
    """One finished call (or one blocked call) as the detectors see it."""

    tool: str
    sig: str
    """The args hash (``"<tool>:<digest>"``)."""
    outcome: str | None
    """The masked outcome hash; ``None`` when the call left no outcome."""
    is_error: bool = False
    error: str | None = None
    """The failure's masked first line (what "the same error" means), if known."""
    waiting: bool = False
    """The call looked like a wait: ``sleep``/``watch``/``wait`` in it, or it took long."""
    poll: bool = False
    """A known poll call (SPEC 4): OpenClaw's poll thresholds apply to it."""
    veto: bool = False
    """A call the guard blocked: it continues the blocked pattern."""


@dataclass(frozen=True, slots=True)
class Finding:
    """What a detector found before a call."""

    level: Level
    detector: str
    count: int
    message: str
    """For the model. May quote the common error; use :attr:`log_message` for logs."""
    warning_key: str
    stop: bool = False
    """Block the call and stop the run (the model ignored the blocks)."""
    tools: tuple[str, ...] = ()
    """The tools of the pattern, in call order (a cycle's calls)."""
    repeat_outcome: str | None = None
    """The outcome a veto of this call repeats."""
    log_message: str = ""
    """:attr:`message` without quoted tool output (raw results never reach logs)."""
    every: int = 1
    """Warnings are delivered when the count first reaches a multiple of this."""
    paired: str | None = None
    """A cycle's call before the checked one (the other side of an A,B cycle)."""

    @property
    def critical(self) -> bool:
        return self.level == "critical"


def _level(count: int, warn: int, block: int) -> Level | None:
    if count >= block:
        return "critical"
    if count >= warn:
        return "warning"
    return None


class ConsecutiveRepeat:
    """The same call, N times in a row, with the same outcome each time."""

    __slots__ = ("cfg", "outcome", "quiet", "sig", "streak", "tool")

    def __init__(self, cfg: RepeatConfig) -> None:
        self.cfg = cfg
        self.sig: str | None = None
        self.tool = ""
        self.outcome: str | None = None
        self.streak = 0
        """Consecutive calls of ``sig`` that returned ``outcome`` (vetoes included)."""
        self.quiet = False
        """Some call of the streak waited or polled."""

    def observe(self, tool: str, sig: str, outcome: str | None, quiet: bool) -> None:
        if sig != self.sig:
            self.sig, self.tool, self.outcome = sig, tool, outcome
            self.streak = 0 if outcome is None else 1
            self.quiet = quiet
            return
        if outcome is None:
            self.quiet = self.quiet or quiet
            return  # nothing learned: neither progress nor a repeat
        if outcome == self.outcome:
            self.streak += 1
            self.quiet = self.quiet or quiet
        else:  # the result moved: progress, start counting again
            self.outcome, self.streak, self.quiet = outcome, 1, quiet

    def check(self, tool: str, sig: str) -> Finding | None:
        if sig != self.sig or self.quiet or self.outcome is None:
            return None
        cfg = self.cfg
        count = self.streak + 1
        level = _level(count, cfg.warn_at, cfg.block_at)
        if level is None:
            return None
        stop = count >= cfg.stop_at
        message = _repeat_message(tool, count, level, stop)
        return Finding(
            level,
            REPEAT,
            count,
            message,
            f"repeat:{sig}:{self.outcome}",
            stop=stop,
            tools=(tool,),
            repeat_outcome=self.outcome,
            log_message=message,
            every=cfg.warn_at,
        )

    def dump(self) -> list[Any]:
        return [self.sig, self.tool, self.outcome, self.streak, self.quiet]

    def load(self, raw: list[Any]) -> None:
        self.sig, self.tool, self.outcome, self.streak, self.quiet = raw
        self.streak = int(self.streak)
        self.quiet = bool(self.quiet)


def _repeat_message(tool: str, count: int, level: Level, stop: bool) -> str:
    if stop:
        return (
            f"CRITICAL: loopwarden stopped this run: {tool} was called {count} times in a row "
            "with the same arguments and the same result, and the blocks were ignored."
        )
    if level == "critical":
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


class Cycle:
    """A cycle of 2 to ``max_period`` calls repeating with unchanged outcomes per position."""

    __slots__ = ("cfg", "live", "quiet_age", "ring", "runs", "sigs")

    def __init__(self, cfg: CycleConfig) -> None:
        self.cfg = cfg
        self.ring: deque[tuple[str, str | None, str]] = deque(maxlen=cfg.max_period)
        """The newest ``max_period`` steps as (sig, outcome, tool), oldest first."""
        self.live = False
        """Some ``runs`` entry is above 0."""
        self.sigs: deque[str] = deque(maxlen=cfg.max_period)
        """The signatures of ``ring`` (a C-speed membership test for the common miss)."""
        self.runs = [0] * (cfg.max_period + 1)
        """``runs[p]``: trailing steps equal (call and outcome) to the step ``p`` before them."""
        self.quiet_age = 1 << 30
        """Steps since the newest waiting or polling step (0: the newest step)."""

    def observe(self, tool: str, sig: str, outcome: str | None, quiet: bool) -> None:
        ring = self.ring
        if self.live or (outcome is not None and sig in self.sigs):
            n = len(ring)
            runs = self.runs
            live = False
            for p in range(2, min(n, self.cfg.max_period) + 1):
                back = ring[n - p]
                if outcome is not None and back[0] == sig and back[1] == outcome:
                    runs[p] += 1
                    live = True
                else:
                    runs[p] = 0
            self.live = live
        self.quiet_age = 0 if quiet else self.quiet_age + 1
        # Bounded deques: the oldest step falls out by itself.
        ring.append((sig, outcome, tool))
        self.sigs.append(sig)

    def check(self, tool: str, sig: str, poll: bool) -> Finding | None:
        ring = self.ring
        n = len(ring)
        cfg = self.cfg
        if poll or n < 2:
            return None
        for p in range(2, min(cfg.max_period, n) + 1):
            head = ring[n - p]
            if head[0] != sig or head[1] is None:
                continue
            cycle = list(ring)[n - p :]
            if all(slot[0] == sig for slot in cycle):
                continue  # one call repeating: the consecutive-repeat rule's case
            length = self.runs[p] + p + 1  # calls in the cyclic tail, this one included
            if self.quiet_age < length - 1:
                continue  # a wait or a poll is part of it
            level = _level_f(length / p, cfg.warn_rounds, cfg.block_rounds)
            if level is None:
                continue
            stop = length >= cfg.block_rounds * p + cfg.stop_after_blocks
            # Name the calls from where the cycle began, not from the checked call.
            first = (p - (length - 1)) % p
            tools = tuple(slot[2] for slot in cycle[first:] + cycle[:first])
            message = _cycle_message(tools, length, level, stop)
            key = "cycle:" + "|".join(sorted({slot[0] for slot in cycle}))
            return Finding(
                level,
                CYCLE,
                length,
                message,
                key,
                stop=stop,
                tools=tools,
                repeat_outcome=head[1],
                log_message=message,
                every=cfg.warn_rounds * p,
                paired=ring[-1][2],
            )
        return None

    def dump(self) -> list[Any]:
        return [[list(slot) for slot in self.ring], self.runs[2:], self.quiet_age]

    def load(self, raw: list[Any]) -> None:
        ring, runs, quiet_age = raw
        maxp = self.cfg.max_period
        self.ring = deque(((str(s), o, str(t)) for s, o, t in ring), maxlen=maxp)
        self.sigs = deque((slot[0] for slot in self.ring), maxlen=maxp)
        self.runs = [0, 0, *(int(r) for r in runs)][: self.cfg.max_period + 1]
        self.runs += [0] * (self.cfg.max_period + 1 - len(self.runs))
        self.quiet_age = int(quiet_age)
        self.live = any(self.runs)


def _level_f(rounds: float, warn: int, block: int) -> Level | None:
    if rounds >= block:
        return "critical"
    if rounds >= warn:
        return "warning"
    return None


def _cycle_message(tools: tuple[str, ...], length: int, level: Level, stop: bool) -> str:
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
    if level == "critical":
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


class FailureStreak:
    """One tool failing on every call in a row, whatever its arguments."""

    __slots__ = ("agree", "cfg", "count", "error", "quiet", "text", "tool")

    def __init__(self, cfg: FailureStreakConfig) -> None:
        self.cfg = cfg
        self.tool: str | None = None
        self.count = 0
        """Consecutive failed calls of ``tool`` (vetoes included), no other call between."""
        self.error: str | None = None
        """The digest of the newest failure's masked first line (what "the same error" is)."""
        self.agree = 0
        """Trailing failures that share ``error``."""
        self.quiet = False
        self.text: str | None = None
        """That first line itself, for the model; kept in memory only (never stored)."""

    def observe(
        self,
        tool: str,
        outcome: str | None,
        is_error: bool,
        error: str | None,
        quiet: bool,
        veto: bool,
    ) -> None:
        same_tool = tool == self.tool
        if outcome is None and not veto:
            if not same_tool:
                self.count = 0  # another call came between
            return
        if not is_error:
            self.count = 0
            return
        key = None if error is None else digest(error)
        if not same_tool or self.count == 0:
            self.tool, self.count, self.error, self.agree, self.quiet = tool, 1, key, 1, quiet
            self.text = error
            return
        self.count += 1
        self.quiet = self.quiet or quiet
        if veto or (key is not None and key == self.error):
            self.agree += 1
        else:
            self.error, self.agree, self.text = key, 1, error

    def check(self, tool: str) -> Finding | None:
        if tool != self.tool or self.count == 0 or self.quiet:
            return None
        cfg = self.cfg
        count = self.count
        level = _level(count, cfg.warn_at, cfg.block_at)
        if level is None:
            return None
        stop = count >= cfg.stop_at
        agree = self.agree >= min(count, cfg.block_at)
        common = (self.text or "") if agree else None
        message = _failure_message(tool, count, level, stop, common)
        return Finding(
            level,
            FAILURE_STREAK,
            count,
            message,
            f"failures:{tool}",
            stop=stop,
            tools=(tool,),
            log_message=_failure_message(tool, count, level, stop, "" if agree else None),
            every=cfg.warn_at,
        )

    def dump(self) -> list[Any]:
        return [self.tool, self.count, self.error, self.agree, self.quiet]

    def load(self, raw: list[Any]) -> None:
        self.tool, count, self.error, agree, quiet = raw
        self.count, self.agree, self.quiet = int(count), int(agree), bool(quiet)


def _failure_message(tool: str, count: int, level: Level, stop: bool, common: str | None) -> str:
    # common: None when the errors differ, "" when they agree but the text is not at hand.
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
    if level == "critical":
        return (
            f"CRITICAL: loopwarden blocked this call: the last {count} calls of {tool} all "
            f"failed{same}. Calling {tool} again the same way will fail again: fix the cause "
            "of the error first, change the approach, use another tool, or report the failure."
        )
    return (
        f"WARNING: the last {count} calls of {tool} all failed{same}. Stop retrying variations "
        "of the same idea; read the error, change the approach, or report the failure."
    )


_SEVERITY = {"warning": 1, "critical": 2}


def _worse(a: Finding | None, b: Finding | None) -> Finding | None:
    """The more severe of two findings (the first on a tie)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if (b.stop, _SEVERITY[b.level]) > (a.stop, _SEVERITY[a.level]) else a


MAX_POLL_SIGS = 16
"""Poll call signatures remembered per run (a bounded FIFO)."""


class ExtraDetectors:
    """The three detectors of one run, behind one check and one observe."""

    __slots__ = ("cfg", "cycle", "fail_tool", "failure", "polls", "recent_sigs", "repeat")

    def __init__(self, cfg: ExtrasConfig | None = None) -> None:
        self.cfg = cfg = cfg if cfg is not None else ExtrasConfig()
        self.repeat = (
            ConsecutiveRepeat(cfg.consecutive_repeat) if cfg.consecutive_repeat.enabled else None
        )
        self.cycle = Cycle(cfg.cycle) if cfg.cycle.enabled else None
        self.failure = FailureStreak(cfg.failure_streak) if cfg.failure_streak.enabled else None
        self.polls: list[str] = []
        """Signatures of the run's recent known-poll calls: their patterns are not ours."""
        # What a call must match to continue a pattern (the guard tests these inline,
        # so that a call that continues none costs no method call).
        self.recent_sigs: deque[str] = (
            self.cycle.sigs if self.cycle is not None else deque(maxlen=1)
        )
        """The newest call signatures (the cycle's ring, or the last one)."""
        self.fail_tool: str | None = None
        """The tool of a running failure streak."""

    def check(self, tool: str, sig: str, poll: bool = False) -> Finding | None:
        """The most severe finding for the next call (stop > block > warn), or None."""
        if poll:
            if sig not in self.polls:
                self.polls.append(sig)
                if len(self.polls) > MAX_POLL_SIGS:
                    del self.polls[0]
            return None  # OpenClaw's poll thresholds decide alone
        # The cheap tests first: most calls continue no pattern at all.
        best: Finding | None = None
        repeat, cycle, failure = self.repeat, self.cycle, self.failure
        if repeat is not None and sig == repeat.sig:
            best = repeat.check(tool, sig)
        if cycle is not None and sig in cycle.sigs:
            best = _worse(best, cycle.check(tool, sig, poll))
        if failure is not None and tool == failure.tool and failure.count:
            best = _worse(best, failure.check(tool))
        if best is not None and any(is_poll_name(name) for name in best.tools):
            return None  # a status or wait tool: asking again is how one waits
        return best

    def recent(self, sig: str) -> bool:
        """True when ``sig`` is one of the last few calls: only then can a wait matter."""
        if self.repeat is not None and self.repeat.sig == sig:
            return True
        return self.cycle is not None and sig in self.cycle.sigs

    def record(
        self,
        tool: str,
        sig: str,
        outcome: str | None,
        *,
        is_error: bool = False,
        error: str | None = None,
        duration: float | None = None,
        params: Any = None,
        poll: bool = False,
    ) -> None:
        """Feed one finished call from what a guard sees of it.

        ``duration`` is the time between ``before_call`` and ``after_call`` in seconds
        (``None``: unknown); ``params`` are the call's params, read for a waiting
        command only when the call repeats a recent one (the only case it matters).
        """
        quiet = (
            poll
            or sig in self.polls
            or (duration is not None and duration >= self.cfg.wait_seconds)
            or (params is not None and self.recent(sig) and is_wait_command(params))
        )
        self._observe(tool, sig, outcome, is_error, error, quiet, False)

    def finished(
        self,
        tool: str,
        sig: str,
        outcome: str | None,
        is_error: bool,
        error: str | None,
        duration: float | None,
        params: Any,
    ) -> None:
        """:meth:`record` with positional arguments, for the guard's per-call path."""
        repeat, cycle = self.repeat, self.cycle
        quiet = (
            (duration is not None and duration >= self.cfg.wait_seconds)
            or (bool(self.polls) and sig in self.polls)
            or (
                params is not None
                and (
                    (repeat is not None and repeat.sig == sig)
                    or (cycle is not None and sig in cycle.sigs)
                )
                and is_wait_command(params)
            )
        )
        if repeat is not None:
            repeat.observe(tool, sig, outcome, quiet)
        if cycle is not None:
            cycle.observe(tool, sig, outcome, quiet)
        else:
            self.recent_sigs.append(sig)
        failure = self.failure
        if failure is not None and (is_error or failure.count):
            failure.observe(tool, outcome, is_error, error, quiet, False)
            self.fail_tool = failure.tool if failure.count else None

    def observe(self, step: Step) -> None:
        """Feed one finished (or blocked) call."""
        self._observe(
            step.tool,
            step.sig,
            step.outcome,
            step.is_error,
            step.error,
            step.waiting or step.poll or step.sig in self.polls,
            step.veto,
        )

    def _observe(
        self,
        tool: str,
        sig: str,
        outcome: str | None,
        is_error: bool,
        error: str | None,
        quiet: bool,
        veto: bool,
    ) -> None:
        if self.repeat is not None:
            self.repeat.observe(tool, sig, outcome, quiet)
        if self.cycle is not None:
            self.cycle.observe(tool, sig, outcome, quiet)
        else:
            self.recent_sigs.append(sig)
        failure = self.failure
        if failure is not None:
            failure.observe(tool, outcome, is_error, error, quiet, veto)
            self.fail_tool = failure.tool if failure.count else None

    def veto(self, tool: str, sig: str, repeats: str | None) -> None:
        """Record a blocked call: it continues the pattern it was blocked for, whose
        outcome it ``repeats``. It counts as a failure only where it continues a failure
        streak of its tool: a call blocked for repeating a result did not fail."""
        failure = self.failure
        failing = failure is not None and failure.count > 0 and failure.tool == tool
        self._observe(tool, sig, repeats or "veto", failing, None, False, True)

    def dump(self) -> list[Any]:
        return [
            None if self.repeat is None else self.repeat.dump(),
            None if self.cycle is None else self.cycle.dump(),
            None if self.failure is None else self.failure.dump(),
            self.polls,
        ]

    def load(self, raw: list[Any]) -> None:
        repeat, cycle, failure, polls = raw
        if self.repeat is not None and repeat is not None:
            self.repeat.load(repeat)
        if self.cycle is not None and cycle is not None:
            self.cycle.load(cycle)
        if self.failure is not None and failure is not None:
            self.failure.load(failure)
            self.fail_tool = self.failure.tool if self.failure.count else None
        if self.cycle is not None:
            self.recent_sigs = self.cycle.sigs
        elif self.repeat is not None and self.repeat.sig is not None:
            self.recent_sigs.append(self.repeat.sig)
        self.polls = [str(p) for p in polls][-MAX_POLL_SIGS:]


# Words that name a status check or a wait: get_status, poll_job, wait_for_deploy, watchLogs.
_POLL_WORDS = frozenset({"poll", "polls", "status", "wait", "watch", "progress"})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_poll_names: dict[str, bool] = {}


def is_poll_name(tool: str) -> bool:
    """True when the tool's name says it polls, reports a status or waits."""
    known = _poll_names.get(tool)
    if known is None:
        known = any(w.lower() in _POLL_WORDS for w in _WORD.findall(tool[:128]))
        if len(_poll_names) < 1024:  # a bounded memo: tool names repeat
            _poll_names[tool] = known
    return known


def outranks(found: Finding, det: Detection | None) -> bool:
    """An extra finding wins over SPEC 4's when it is more severe (a stop, or a block
    over a warning); SPEC 4's wins a tie."""
    if det is None:
        return True
    if det.level == "critical":
        return found.stop and det.detector != GLOBAL_CIRCUIT_BREAKER
    return found.level == "critical"


def finding_detection(found: Finding, tool: str) -> Detection:
    """An extra detector's finding as a :class:`Detection` (its message without quoted
    tool output: detections reach events and logs)."""
    return Detection(
        found.level,
        found.detector,
        found.count,
        found.log_message,
        found.warning_key,
        paired_tool=found.paired,
        tool_name=tool,
        latest_result_hash=found.repeat_outcome,
    )
