"""OpenClaw's rules: the rolling-history detectors, the unknown-tool guard and the
post-compaction guard, as OpenClaw's tool-loop detection defines them.

Their order is OpenClaw's: among these rules the first that matches decides (see
docs/detection.md). They keep no state of their own: the rolling-history rules read the
run's window, whose counts :class:`~loopwarden.engine.window.RunWindow` keeps up to date
incrementally, and the two guards keep theirs in the run state (the unknown-tool miss
streak; the post-compaction window), where stores and snapshots read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .. import messages
from ..compaction import COMPACTION_LOOP_PERSISTED
from ..waits import duration, wait_of
from .base import Call, Detection, Detector, Observed, Threshold, Trigger, Verdict

if TYPE_CHECKING:
    from ...config import LoopDetectionConfig
    from ..compaction import LogLine
    from ..state import RunState

__all__ = [
    "COMPACTION_LOOP_PERSISTED",
    "GENERIC_REPEAT",
    "GLOBAL_CIRCUIT_BREAKER",
    "KNOWN_POLL_NO_PROGRESS",
    "PING_PONG",
    "UNKNOWN_TOOL_REPEAT",
    "GenericRepeat",
    "GlobalCircuitBreaker",
    "KnownPollNoProgress",
    "PingPong",
    "PostCompaction",
    "UnknownTool",
]

UNKNOWN_TOOL_REPEAT = "unknown_tool_repeat"
GLOBAL_CIRCUIT_BREAKER = "global_circuit_breaker"
KNOWN_POLL_NO_PROGRESS = "known_poll_no_progress"
PING_PONG = "ping_pong"
GENERIC_REPEAT = "generic_repeat"


_BLOCK = "tools.loopDetection"


_TIMED_AFTER = 10.0
"""Seconds of polling before a poll's wording says how long the job has been polled."""


def _poll_text(st: RunState, sig: str, tool: str, count: int, critical: bool) -> str | None:
    """The wording for polls of a job whose result says it is still running (``None``:
    the call is not such a poll)."""
    if not st.waits:
        return None
    wait = wait_of(st, sig)
    if wait is None:
        return None
    # A few seconds of polling say nothing about the job (and would make the text vary).
    if wait.elapsed < _TIMED_AFTER:
        return messages.poll_wait(tool, count, critical, None, 0.0, wait.suggest)
    elapsed = duration(wait.elapsed)
    return messages.poll_wait(tool, count, critical, elapsed, wait.interval, wait.suggest)


class _Rolling(Detector):
    """A rolling-history rule: on only when ``enabled`` is ``true``."""

    family = "openclaw"

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        self.warning = cfg.warning_threshold
        self.critical = cfg.critical_threshold

    switch: ClassVar[str | None] = None
    """The ``detectors`` flag that switches the rule off (``None``: it cannot be)."""

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> _Rolling | None:
        if cfg.enabled is not True:
            return None
        switch = cls.switch
        return cls(cfg) if switch is None or getattr(cfg.detectors, switch) else None


class UnknownTool(Detector):
    """A tool that does not exist, called again and again.

    Two ways of knowing it does not exist: the run's registered tool names do not
    include it (consecutive misses of one name are counted, and blocked past
    ``unknownToolThreshold``), or its outcomes keep saying so ("unknown tool: X",
    "tool X not found": rule 1 of the rolling history, on when ``enabled`` is ``true``).
    It also gives its name to any other rule's finding about a missing tool, so that a
    loop on a tool that does not exist is always reported as one.
    """

    name = UNKNOWN_TOOL_REPEAT
    family = "openclaw"
    order = 10
    triggers = Trigger.MISSING
    summary = "the same unavailable tool called again and again"

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        self.threshold = cfg.unknown_tool_threshold
        self.stop_at = max(cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold)
        self.rolling = cfg.enabled is True
        self.every = cfg.warning_threshold

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> UnknownTool | None:
        return None if cfg.enabled is False else cls(cfg)

    def check(self, st: RunState, call: Call) -> Detection | None:
        tool = call.tool
        if call.unregistered is not None:
            if not call.unregistered:
                st.miss_name, st.miss_count = None, 0
            else:
                prior = st.miss_count if st.miss_name == tool else 0
                st.miss_name, st.miss_count = tool, prior + 1
                if prior >= self.threshold:
                    text = messages.unregistered_tool(tool, prior)
                    return self._found(tool, tool, tool.lower(), prior, text, None)
        if not self.rolling:
            return None
        records = st.window.records
        if not records:
            return None
        last = records[-1]
        uname = last.unknown_tool_name
        if uname is None or last.tool_name != tool:
            return None
        streak = min(last.ustreak, len(records))
        if streak < self.threshold:
            return None
        # The name as the model called it, when the error names this tool.
        shown = tool if tool.lower() == uname else uname
        text = messages.unknown_tool(shown, streak)
        return self._found(tool, uname, uname, streak, text, last.result_hash)

    def _found(
        self, tool: str, named: str, uname: str, count: int, text: str, latest: str | None
    ) -> Detection:
        """The block (``text``), or past ``stop_at`` the stop, of ``count`` calls of a tool
        that does not exist (``named`` in the stop's message)."""
        stop = count >= self.stop_at
        return Detection(
            "critical",
            UNKNOWN_TOOL_REPEAT,
            count,
            messages.unknown_tool_stop(named, count) if stop else text,
            f"unknown-tool:{tool}:{uname}",
            tool_name=tool,
            latest_result_hash=latest,
            unknown_tool_name=uname,
            stop=stop,
            every=self.every,
        )

    def arbitrate(self, st: RunState, call: Call, det: Detection) -> Detection:
        if det.detector == UNKNOWN_TOOL_REPEAT:
            return det
        tool = call.tool
        name = None
        if call.unregistered:
            name = tool.lower()
        else:
            last = st.window.last
            if last is not None and last.tool_name == tool:
                name = last.unknown_tool_name
        if name is None:
            return det
        # Another rule saw the loop first (at its own count); it is still a loop on a tool
        # that is not there, and is reported as one: code, event and the model's message.
        text = messages.missing_tool(tool, det.count, det.action)
        return det.relabel(
            detector=UNKNOWN_TOOL_REPEAT,
            message=text,
            log_message=text,
            warning_key=f"unknown-tool:{tool}:{name}",
            unknown_tool_name=name,
        )

    def thresholds(self) -> list[Threshold]:
        unit = "calls in a row of a tool that does not exist"
        return [
            Threshold("block", self.threshold + 1, unit, f"{_BLOCK}.unknownToolThreshold"),
            Threshold(
                "stop",
                self.stop_at + 1,
                unit,
                f"{_BLOCK}.unknownToolThreshold, {_BLOCK}.globalCircuitBreakerThreshold",
            ),
        ]


class GlobalCircuitBreaker(_Rolling):
    """Identical no-progress outcomes of one call, ``globalCircuitBreakerThreshold`` in a
    row: the call is blocked and the run ends, whatever the detector switches say."""

    name = GLOBAL_CIRCUIT_BREAKER
    order = 20
    triggers = Trigger.SEEN
    summary = "one call returning the same result, however long the run"

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        self.threshold = cfg.global_circuit_breaker_threshold

    def check(self, st: RunState, call: Call) -> Detection | None:
        stats = st.window.sigs.get(call.sig)
        if stats is None or stats.streak < self.threshold:
            return None
        tool, streak, latest = call.tool, stats.streak, stats.latest
        return Detection(
            "critical",
            GLOBAL_CIRCUIT_BREAKER,
            streak,
            messages.global_breaker(tool, streak),
            f"global:{tool}:{call.sig}:{latest or 'none'}",
            tool_name=tool,
            latest_result_hash=latest,
            stop=True,
            every=self.warning,
        )

    def thresholds(self) -> list[Threshold]:
        unit = "identical results of one call"
        return [
            Threshold("stop", self.threshold + 1, unit, f"{_BLOCK}.globalCircuitBreakerThreshold")
        ]


class KnownPollNoProgress(_Rolling):
    """A known poll call whose result does not change."""

    name = KNOWN_POLL_NO_PROGRESS
    order = 30
    triggers = Trigger.POLL
    summary = "a status poll whose result never changes"
    switch = "known_poll_no_progress"

    def check(self, st: RunState, call: Call) -> Detection | None:
        stats = st.window.sigs.get(call.sig)
        if stats is None or stats.streak < self.warning:
            return None
        tool, streak, latest = call.tool, stats.streak, stats.latest
        critical = streak >= self.critical
        return Detection(
            "critical" if critical else "warning",
            KNOWN_POLL_NO_PROGRESS,
            streak,
            _poll_text(st, call.sig, tool, streak, critical)
            or messages.known_poll(tool, streak, critical),
            f"poll:{tool}:{call.sig}:{latest or 'none'}",
            tool_name=tool,
            latest_result_hash=latest,
            every=self.warning,
        )

    def thresholds(self) -> list[Threshold]:
        unit = "identical results of one poll"
        return [
            Threshold("warn", self.warning + 1, unit, f"{_BLOCK}.warningThreshold"),
            Threshold("block", self.critical + 1, unit, f"{_BLOCK}.criticalThreshold"),
        ]


class PingPong(_Rolling):
    """Two calls alternating; blocked only when neither side makes progress."""

    name = PING_PONG
    order = 40
    triggers = Trigger.PAIRED
    summary = "two calls alternating, A B A B"
    switch = "ping_pong"

    def check(self, st: RunState, call: Call) -> Detection | None:
        window = st.window
        sig = call.sig
        if sig != window.pp_other:
            return None
        tail = min(window.pp_tail, len(window.records))
        # The checked call counts too, so the count reaches historySize + 1, as OpenClaw
        # counts it.
        count = tail + 1
        if tail < 2 or count < self.warning:
            return None
        tool = call.tool
        paired = window.pp_last_tool or ""
        critical = count >= self.critical and window.pp_evidence(tail)
        low, high = sorted((sig, window.pp_last or ""))
        stats = window.sigs.get(sig)
        return Detection(
            "critical" if critical else "warning",
            PING_PONG,
            count,
            messages.ping_pong(tool, paired, count, critical),
            f"pingpong:{low}|{high}",
            paired_tool=paired,
            tool_name=tool,
            latest_result_hash=None if stats is None else stats.latest,
            every=self.warning,
        )

    def thresholds(self) -> list[Threshold]:
        unit = "alternating calls (the checked one included)"
        return [
            Threshold("warn", self.warning, unit, f"{_BLOCK}.warningThreshold"),
            Threshold("block", self.critical, unit, f"{_BLOCK}.criticalThreshold"),
        ]


class GenericRepeat(_Rolling):
    """The same call again and again: warned on repeats, blocked on no-progress streaks."""

    name = GENERIC_REPEAT
    order = 50
    triggers = Trigger.SEEN
    summary = "the same call repeated, results unchanged"
    switch = "generic_repeat"

    def check(self, st: RunState, call: Call) -> Detection | None:
        if call.poll:
            return None
        stats = st.window.sigs.get(call.sig)
        if stats is None:
            return None
        streak = stats.streak
        critical = streak >= self.critical
        if not critical and stats.count < self.warning:
            return None
        tool, latest = call.tool, stats.latest
        count = streak if critical else stats.count
        return Detection(
            "critical" if critical else "warning",
            GENERIC_REPEAT,
            count,
            _poll_text(st, call.sig, tool, count, critical)
            or messages.generic_repeat(tool, count, critical),
            # A block is keyed by the outcome it repeats; a warning by the call.
            f"generic:{tool}:{call.sig}:{latest or 'none'}"
            if critical
            else f"generic:{tool}:{call.sig}",
            tool_name=tool,
            latest_result_hash=latest,
            every=self.warning,
        )

    def thresholds(self) -> list[Threshold]:
        return [
            Threshold(
                "warn",
                self.warning + 1,
                "calls of one call in the window",
                f"{_BLOCK}.warningThreshold",
            ),
            Threshold(
                "block",
                self.critical + 1,
                "identical results of one call",
                f"{_BLOCK}.criticalThreshold",
            ),
        ]


class PostCompaction(Detector):
    """The seed's post-compaction guard: after a compaction, ``windowSize`` identical
    attempts (same call, same result) end the run with ``compaction_loop_persisted``.

    Its verdict comes first: while it is armed and every attempt so far was the same call
    with the same result, another rule's stop is held back to a block, which the guard
    observes like an attempt, so the run ends with the seed's abort at the
    ``windowSize``-th attempt (never later than the guard alone would end it).
    """

    name = COMPACTION_LOOP_PERSISTED
    family = "openclaw"
    order = 100
    summary = "the same call and result right after a context compaction"

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        self.window_size = cfg.post_compaction_guard.window_size

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> PostCompaction | None:
        return None if cfg.enabled is False else cls(cfg)

    def observe(self, st: RunState, ev: Observed) -> Verdict | None:
        outcome = ev.outcome
        if outcome is None or st.stopped is not None:
            return None
        guard = st.guard
        if not guard.armed:
            # The common case, inline: no window open, the call only joins the baseline
            # (blocked calls are attempts only inside the window).
            if not ev.veto and guard.enabled:
                guard.recent.append((ev.tool, ev.sig))
            return None
        verdict = guard.step(ev.tool, ev.sig, outcome)
        if verdict.should_abort:
            found = Detection(
                "critical",
                COMPACTION_LOOP_PERSISTED,
                verdict.count,
                verdict.message or "",
                f"compaction:{ev.tool}:{ev.sig}",
                tool_name=ev.tool,
                latest_result_hash=outcome,
                stop=True,
            )
            return Verdict(found, verdict.log)
        return None if verdict.log is None else Verdict(None, verdict.log)

    def arbitrate(self, st: RunState, call: Call, det: Detection) -> Detection:
        if not det.stop or det.detector == COMPACTION_LOOP_PERSISTED:
            return det
        guard = st.guard
        if not guard.armed:
            return det
        if not guard.continues(call.tool, call.sig, st.veto_outcome(call.sig, det)):
            return det
        text = messages.compaction_hold(call.tool, guard.remaining_attempts)
        return det.relabel(stop=False, message=text, log_message=text)

    def compacted(self, st: RunState) -> LogLine | None:
        return st.guard.open()

    def thresholds(self) -> list[Threshold]:
        unit = "identical attempts right after a compaction"
        key = f"{_BLOCK}.postCompactionGuard.windowSize"
        return [Threshold("stop", self.window_size, unit, key)]
