"""The settings of loopwarden's own built-in rules: one section each of the ``loopwarden``
block. The rules themselves live in ``loopwarden.engine.detectors``; their settings live
here so that validating a config never imports the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .model import RULE_SETTINGS, RuleSettings, setting

__all__ = [
    "BlocksInARowSettings",
    "ConsecutiveRepeatSettings",
    "CycleSettings",
    "FailureStreakSettings",
]


@dataclass(frozen=True)
class ConsecutiveRepeatSettings(RuleSettings):
    """``loopwarden.consecutiveRepeat``: the same call N times in a row, same outcome each
    time. Counts include the checked call. In the real runs of the development set no
    healthy run repeats a call more than 4 times in a row, so a warning at 5 and a block at
    6 leave a margin of one and two calls (see docs/detection.md)."""

    KEY: ClassVar[str] = "consecutiveRepeat"
    ORDER: ClassVar[tuple[str, ...]] = ("warnAt", "blockAt", "stopAt")
    warn_at: int = setting(5, "warnAt")
    block_at: int = setting(6, "blockAt")
    stop_at: int = setting(8, "stopAt")
    """The block was ignored twice: the run is stopped."""


@dataclass(frozen=True)
class CycleSettings(RuleSettings):
    """``loopwarden.cycle``: a cycle of 2 to ``maxPeriod`` calls, each round the same."""

    KEY: ClassVar[str] = "cycle"
    ORDER: ClassVar[tuple[str, ...]] = ("warnRounds", "blockRounds")
    max_period: int = setting(5, "maxPeriod", range=(2, 8))
    warn_rounds: int = setting(3, "warnRounds")
    """Rounds of the cycle (the checked call included) that warn."""
    block_rounds: int = setting(4, "blockRounds")
    stop_after_blocks: int = setting(2, "stopAfterBlocks")
    """Blocked calls of the cycle after which the run is stopped."""


@dataclass(frozen=True)
class FailureStreakSettings(RuleSettings):
    """``loopwarden.failureStreak``: one tool failing on every call in a row, whatever the
    args. Counts are the failures before the checked call. No healthy run of the
    development set has more than 4 such failures in a row (9 counting a harness's format
    rejections), so the warning comes at 10."""

    KEY: ClassVar[str] = "failureStreak"
    ORDER: ClassVar[tuple[str, ...]] = ("warnAt", "blockAt", "stopAt")
    warn_at: int = setting(10, "warnAt")
    block_at: int = setting(12, "blockAt")
    stop_at: int = setting(14, "stopAt")


@dataclass(frozen=True)
class BlocksInARowSettings(RuleSettings):
    """``loopwarden.blocksInARow``: blocked calls in a row after which the next block ends
    the run. Unset: ``globalCircuitBreakerThreshold - criticalThreshold`` (10 by default),
    the blocks a repeated call climbs through between OpenClaw's block and its breaker."""

    KEY: ClassVar[str] = "blocksInARow"
    stop_after: int | None = setting(None, "stopAfter")


for _settings in (
    ConsecutiveRepeatSettings,
    CycleSettings,
    FailureStreakSettings,
    BlocksInARowSettings,
):
    RULE_SETTINGS[_settings.KEY] = _settings
