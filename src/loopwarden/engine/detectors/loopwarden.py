"""loopwarden's own rules: patterns that real stuck agents show and OpenClaw's rules catch
late or not at all.

* :class:`ConsecutiveRepeat`: the same call again and again, no other call between, the
  same (masked) outcome each time.
* :class:`Cycle`: a cycle of 2 to ``maxPeriod`` calls repeating, each position with the
  same outcome as in the round before.
* :class:`FailureStreak`: one tool failing call after call, whatever its arguments.
* :class:`BlocksInARow`: calls blocked one after the other (by any rule) end the run: a
  ping-pong or a cycle never fills the window with one outcome, so the global circuit
  breaker alone would never end it.

Waiting is not looping: a call that looks like a wait (a known poll, a command that
sleeps, watches or waits, a call that took ``waitSeconds`` or longer) keeps the first
three quiet for the pattern it is part of, and so does a finding on a tool whose name
says it reports a status or waits; OpenClaw's thresholds then decide alone.

Each keeps a handful of fields per run (a five-entry ring for the cycle), so its work per
call does not depend on ``historySize``.
"""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

from ..._canonical import digest
from ...config.model import RuleSettings
from ...config.rules import (
    BlocksInARowSettings,
    ConsecutiveRepeatSettings,
    CycleSettings,
    FailureStreakSettings,
)
from .. import messages
from .base import Call, Detection, Detector, Observed, Threshold, Trigger, Verdict
from .openclaw import UNKNOWN_TOOL_REPEAT

if TYPE_CHECKING:
    from ...config import LoopDetectionConfig
    from ..state import RunState

__all__ = [
    "BLOCKS_IN_A_ROW",
    "CONSECUTIVE_REPEAT",
    "CYCLE",
    "FAILURE_STREAK",
    "BlocksInARow",
    "BlocksInARowSettings",
    "ConsecutiveRepeat",
    "ConsecutiveRepeatSettings",
    "Cycle",
    "CycleSettings",
    "FailureStreak",
    "FailureStreakSettings",
    "is_poll_name",
]

CONSECUTIVE_REPEAT = "consecutive_repeat"
CYCLE = "cycle"
FAILURE_STREAK = "failure_streak"
BLOCKS_IN_A_ROW = "blocks_in_a_row"

_LW = "loopwarden"


def _warn_block_stop(
    conf: ConsecutiveRepeatSettings | FailureStreakSettings, unit: str
) -> list[Threshold]:
    """The ``warnAt`` / ``blockAt`` / ``stopAt`` numbers of a section, in words."""
    key = f"{_LW}.{conf.KEY}"
    return [
        Threshold("warn", conf.warn_at, unit, f"{key}.warnAt"),
        Threshold("block", conf.block_at, unit, f"{key}.blockAt"),
        Threshold("stop", conf.stop_at, unit, f"{key}.stopAt"),
    ]


def _level(count: float, warn: int, block: int) -> str | None:
    if count >= block:
        return "critical"
    if count >= warn:
        return "warning"
    return None


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


def _waiting_tools(found: Detection) -> bool:
    """The pattern includes a status or wait tool: asking again is how one waits."""
    return any(is_poll_name(name) for name in found.tools)


class _Own(Detector):
    """One of loopwarden's own pattern rules: on when ``enabled`` is ``true`` and the config
    carries loopwarden's rules (the runtime guard's always do)."""

    family = "loopwarden"
    stateful = True
    wants_quiet = True
    settings: ClassVar[type[RuleSettings]]

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        assert cfg.rules is not None
        self.conf: Any = cfg.rules.get(self.settings)
        self.reset()

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> _Own | None:
        if cfg.enabled is not True or cfg.rules is None:
            return None
        return cls(cfg) if cfg.rules.get(cls.settings).enabled else None

    def fresh(self) -> _Own:
        # Made for every run (and every decode of a stored one): no settings lookup.
        copy = object.__new__(type(self))
        copy.cfg, copy.conf = self.cfg, self.conf
        copy.reset()
        return copy

    def reset(self) -> None:
        """The state of a run that has not started."""


class ConsecutiveRepeat(_Own):
    """The same call, N times in a row, with the same outcome each time."""

    name = CONSECUTIVE_REPEAT
    order = 60
    triggers = Trigger.SEEN
    settings = ConsecutiveRepeatSettings
    summary = "the same call again and again, nothing between, results unchanged"

    conf: ConsecutiveRepeatSettings

    def reset(self) -> None:
        self.sig: str | None = None
        self.tool = ""
        self.outcome: str | None = None
        self.streak = 0
        """Consecutive calls of ``sig`` that returned ``outcome`` (vetoes included)."""
        self.quiet = False
        """Some call of the streak waited or polled."""

    def observe(self, st: RunState, ev: Observed) -> Verdict | None:
        sig, outcome = ev.sig, ev.outcome
        if sig != self.sig:
            self.sig, self.tool, self.outcome = sig, ev.tool, outcome
            self.streak = 0 if outcome is None else 1
            self.quiet = ev.quiet
        elif outcome is None:
            self.quiet = self.quiet or ev.quiet  # nothing learned: neither progress nor a repeat
        elif outcome == self.outcome:
            self.streak += 1
            self.quiet = self.quiet or ev.quiet
        else:  # the result moved: progress, start counting again
            self.outcome, self.streak, self.quiet = outcome, 1, ev.quiet
        return None

    def check(self, st: RunState, call: Call) -> Detection | None:
        if call.sig != self.sig or call.poll or self.quiet or self.outcome is None:
            return None
        conf = self.conf
        count = self.streak + 1
        if count < conf.warn_at and count < conf.block_at:
            return None  # _level(count, ...) is None: the common repeat, inline
        level = _level(count, conf.warn_at, conf.block_at)
        tool = call.tool
        stop = count >= conf.stop_at
        found = Detection(
            "critical" if level == "critical" else "warning",
            CONSECUTIVE_REPEAT,
            count,
            messages.consecutive_repeat(tool, count, level == "critical", stop),
            f"repeat:{call.sig}:{self.outcome}",
            tool_name=tool,
            latest_result_hash=self.outcome,
            stop=stop,
            every=conf.warn_at,
            tools=(tool,),
        )
        return None if _waiting_tools(found) else found

    def thresholds(self) -> list[Threshold]:
        return _warn_block_stop(self.conf, "identical calls in a row with unchanged results")

    def dump(self) -> list[Any]:
        return [self.sig, self.tool, self.outcome, self.streak, self.quiet]

    def load(self, raw: Any) -> None:
        self.sig, self.tool, self.outcome, streak, quiet = raw
        self.streak, self.quiet = int(streak), bool(quiet)


class Cycle(_Own):
    """A cycle of 2 to ``max_period`` calls repeating with unchanged outcomes per position."""

    name = CYCLE
    order = 70
    triggers = Trigger.SEEN
    settings = CycleSettings
    summary = "a round of 2 to 5 calls going round again, results unchanged"

    conf: CycleSettings

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        conf = self.conf
        # A period p can warn (or block) only once rounds = (runs[p] + p + 1) / p reach the
        # lower of the two thresholds, m: runs[p] >= m*p - p - 1. Tested first in check, so
        # the common call (no cycle building up) skips the ring walk.
        low = min(conf.warn_rounds, conf.block_rounds)
        self.need = tuple(low * p - p - 1 for p in range(conf.max_period + 1))
        self.idle_safe = low >= 2
        """With every ``runs`` at 0 (not ``live``) no period can reach a finding."""

    def fresh(self) -> Cycle:
        copy = super().fresh()
        assert isinstance(copy, Cycle)
        copy.need, copy.idle_safe = self.need, self.idle_safe
        return copy

    def reset(self) -> None:
        conf = self.conf
        self.ring: deque[tuple[str, str | None, str]] = deque(maxlen=conf.max_period)
        """The newest ``max_period`` steps as (sig, outcome, tool), oldest first."""
        self.sigs: deque[str] = deque(maxlen=conf.max_period)
        """The signatures of ``ring`` (a C-speed membership test for the common miss)."""
        self.live = False
        """Some ``runs`` entry is above 0."""
        self.runs = [0] * (conf.max_period + 1)
        """``runs[p]``: trailing steps equal (call and outcome) to the step ``p`` before them."""
        self.quiet_age = 1 << 30
        """Steps since the newest waiting or polling step (0: the newest step)."""

    def observe(self, st: RunState, ev: Observed) -> Verdict | None:
        sig, outcome = ev.sig, ev.outcome
        ring = self.ring
        if self.live or (outcome is not None and sig in self.sigs):
            n = len(ring)
            runs = self.runs
            live = False
            for p in range(2, min(n, self.conf.max_period) + 1):
                back = ring[n - p]
                if outcome is not None and back[0] == sig and back[1] == outcome:
                    runs[p] += 1
                    live = True
                else:
                    runs[p] = 0
            self.live = live
        self.quiet_age = 0 if ev.quiet else self.quiet_age + 1
        # Bounded deques: the oldest step falls out by itself.
        ring.append((sig, outcome, ev.tool))
        self.sigs.append(sig)
        return None

    def check(self, st: RunState, call: Call) -> Detection | None:
        if not self.live and self.idle_safe:
            return None  # no round repeats yet: no period can reach a finding
        sig = call.sig
        if call.poll or sig not in self.sigs:
            return None
        ring = self.ring
        n = len(ring)
        conf = self.conf
        runs, need = self.runs, self.need
        for p in range(2, min(conf.max_period, n) + 1):
            if runs[p] < need[p]:
                continue  # too few rounds for a finding at this period
            head = ring[n - p]
            if head[0] != sig or head[1] is None:
                continue
            cycle = list(ring)[n - p :]
            if all(slot[0] == sig for slot in cycle):
                continue  # one call repeating: the consecutive-repeat rule's case
            length = self.runs[p] + p + 1  # calls in the cyclic tail, this one included
            if self.quiet_age < length - 1:
                continue  # a wait or a poll is part of it
            rounds = length / p
            level = _level(rounds, conf.warn_rounds, conf.block_rounds)
            if level is None:
                continue
            stop = length >= conf.block_rounds * p + conf.stop_after_blocks
            # Name the calls from where the cycle began, not from the checked call.
            first = (p - (length - 1)) % p
            tools = tuple(slot[2] for slot in cycle[first:] + cycle[:first])
            text = messages.cycle(tools, length, level == "critical", stop)
            found = Detection(
                "critical" if level == "critical" else "warning",
                CYCLE,
                length,
                text,
                "cycle:" + "|".join(sorted({slot[0] for slot in cycle})),
                paired_tool=ring[-1][2],
                tool_name=call.tool,
                latest_result_hash=head[1],
                stop=stop,
                every=conf.warn_rounds * p,
                tools=tools,
            )
            return None if _waiting_tools(found) else found
        return None

    def thresholds(self) -> list[Threshold]:
        conf, key = self.conf, f"{_LW}.{CycleSettings.KEY}"
        unit = "calls of a cycle of two (rounds x period)"
        return [
            Threshold("warn", conf.warn_rounds * 2, unit, f"{key}.warnRounds"),
            Threshold("block", conf.block_rounds * 2, unit, f"{key}.blockRounds"),
            Threshold(
                "stop",
                conf.block_rounds * 2 + conf.stop_after_blocks,
                unit,
                f"{key}.blockRounds, {key}.stopAfterBlocks",
            ),
        ]

    def dump(self) -> list[Any]:
        return [[list(slot) for slot in self.ring], self.runs[2:], self.quiet_age]

    def load(self, raw: Any) -> None:
        ring, runs, quiet_age = raw
        maxp = self.conf.max_period
        self.ring = deque(((str(s), o, str(t)) for s, o, t in ring), maxlen=maxp)
        self.sigs = deque((slot[0] for slot in self.ring), maxlen=maxp)
        self.runs = [0, 0, *(int(r) for r in runs)][: maxp + 1]
        self.runs += [0] * (maxp + 1 - len(self.runs))
        self.quiet_age = int(quiet_age)
        self.live = any(self.runs)


class FailureStreak(_Own):
    """One tool failing on every call in a row, whatever its arguments."""

    name = FAILURE_STREAK
    order = 80
    triggers = Trigger.FAILING
    settings = FailureStreakSettings
    feeds_failures_only = True
    wants_errors = True
    summary = "one tool failing on every call, whatever its arguments"

    conf: FailureStreakSettings

    def reset(self) -> None:
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

    def observe(self, st: RunState, ev: Observed) -> Verdict | None:
        tool, veto = ev.tool, ev.veto
        same_tool = tool == self.tool
        if ev.outcome is None and not veto:
            if not same_tool:
                self.count = 0  # another call came between
            return None
        if not ev.is_error:
            self.count = 0
            return None
        error = ev.error
        key = None if error is None else digest(error)
        if not same_tool or self.count == 0:
            self.tool, self.count, self.error, self.agree, self.quiet = tool, 1, key, 1, ev.quiet
            self.text = error
            return None
        self.count += 1
        self.quiet = self.quiet or ev.quiet
        if veto or (key is not None and key == self.error):
            self.agree += 1
        else:
            self.error, self.agree, self.text = key, 1, error
        return None

    def check(self, st: RunState, call: Call) -> Detection | None:
        tool = call.tool
        if tool != self.tool or call.poll or self.count == 0 or self.quiet:
            return None
        conf = self.conf
        count = self.count
        level = _level(count, conf.warn_at, conf.block_at)
        if level is None:
            return None
        critical = level == "critical"
        stop = count >= conf.stop_at
        agree = self.agree >= min(count, conf.block_at)
        found = Detection(
            "critical" if critical else "warning",
            FAILURE_STREAK,
            count,
            messages.failure_streak(
                tool, count, critical, stop, (self.text or "") if agree else None
            ),
            f"failures:{tool}",
            tool_name=tool,
            stop=stop,
            every=conf.warn_at,
            # The common error quotes tool output: events and logs get the text without it.
            log_message=messages.failure_streak(tool, count, critical, stop, "" if agree else None),
            tools=(tool,),
        )
        return None if _waiting_tools(found) else found

    def thresholds(self) -> list[Threshold]:
        return _warn_block_stop(
            self.conf, "failed calls of one tool in a row, before the checked call"
        )

    def dump(self) -> list[Any]:
        return [self.tool, self.count, self.error, self.agree, self.quiet]

    def load(self, raw: Any) -> None:
        self.tool, count, self.error, agree, quiet = raw
        self.count, self.agree, self.quiet = int(count), int(agree), bool(quiet)


class BlocksInARow(Detector):
    """Blocked calls in a row, whatever rule blocked them: past ``stopAfter`` of them the
    next block ends the run (the model is not reading the blocks)."""

    name = BLOCKS_IN_A_ROW
    family = "loopwarden"
    order = 90
    settings = BlocksInARowSettings
    summary = "calls blocked one after the other, whatever rule blocked them"

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        super().__init__(cfg)
        conf = cfg.rules.get(BlocksInARowSettings) if cfg.rules is not None else None
        derived = cfg.global_circuit_breaker_threshold - cfg.critical_threshold
        self.stop_after = derived if conf is None or conf.stop_after is None else conf.stop_after

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> BlocksInARow | None:
        if cfg.enabled is not True:
            return None
        if cfg.rules is not None and not cfg.rules.get(BlocksInARowSettings).enabled:
            return None
        return cls(cfg)

    def arbitrate(self, st: RunState, call: Call, det: Detection) -> Detection:
        if det.stop or det.level != "critical" or det.detector == UNKNOWN_TOOL_REPEAT:
            return det
        in_a_row = st.blocks
        if in_a_row < self.stop_after:
            return det
        text = messages.blocked_in_a_row(call.tool, in_a_row, det.detector)
        return det.relabel(
            detector=BLOCKS_IN_A_ROW, count=in_a_row, message=text, log_message=text, stop=True
        )

    def thresholds(self) -> list[Threshold]:
        key = f"{_LW}.{BlocksInARowSettings.KEY}.stopAfter"
        return [Threshold("stop", self.stop_after + 1, "blocked calls in a row", key)]
