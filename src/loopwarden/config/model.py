"""The config value types and their defaults.

Each field's attribute docstring names its key in the config file: a
``tools.loopDetection`` block (OpenClaw's schema, camelCase) or loopwarden's
own top-level ``loopwarden`` block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ..errors import ConfigError, ConfigIssue
from ..profiles import OutcomeProfile, ProfileRegistry

DEFAULT_HISTORY_SIZE = 30
DEFAULT_WARNING_THRESHOLD = 10
DEFAULT_CRITICAL_THRESHOLD = 20
DEFAULT_UNKNOWN_TOOL_THRESHOLD = 10
DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD = 30
DEFAULT_WINDOW_SIZE = 3
DEFAULT_STATE_TTL_SECONDS = 24 * 3600.0
DEFAULT_MAX_TOOL_NAMES = 100
DEFAULT_MAX_AGENTS = 100

# camelCase key -> attribute name, for the integer fields of a block.
INT_FIELDS = {
    "historySize": "history_size",
    "warningThreshold": "warning_threshold",
    "criticalThreshold": "critical_threshold",
    "unknownToolThreshold": "unknown_tool_threshold",
    "globalCircuitBreakerThreshold": "global_circuit_breaker_threshold",
}
DETECTOR_FIELDS = {
    "genericRepeat": "generic_repeat",
    "knownPollNoProgress": "known_poll_no_progress",
    "pingPong": "ping_pong",
}
GUARD_FIELDS = {"windowSize": "window_size"}
BLOCK_KEYS = ("enabled", *INT_FIELDS, "detectors", "postCompactionGuard")
# Every field of a block (dotted for nested ones), in display order.
BLOCK_FIELDS = (
    "enabled",
    *INT_FIELDS,
    *(f"detectors.{key}" for key in DETECTOR_FIELDS),
    *(f"postCompactionGuard.{key}" for key in GUARD_FIELDS),
)
SETTINGS_KEYS = (
    "sendTools",
    "outcomeProfiles",
    "volatileCounters",
    "consecutiveRepeat",
    "cycle",
    "failureStreak",
    "waitSeconds",
    "store",
    "failMode",
    "runRecord",
    "logParams",
    "stateTtlSeconds",
    "telemetry",
)
TELEMETRY_KEYS = {"enabled": "enabled", "maxToolNames": "max_tool_names", "maxAgents": "max_agents"}
PROFILE_KEYS = ("volatileKeys", "volatilePatterns", "volatileCounters", "poll", "send")
# camelCase key -> attribute, for the runtime guard's own detectors (loopwarden block).
REPEAT_KEYS = {
    "enabled": "enabled",
    "warnAt": "warn_at",
    "blockAt": "block_at",
    "stopAt": "stop_at",
}
CYCLE_KEYS = {
    "enabled": "enabled",
    "maxPeriod": "max_period",
    "warnRounds": "warn_rounds",
    "blockRounds": "block_rounds",
    "stopAfterBlocks": "stop_after_blocks",
}
FAILURE_KEYS = REPEAT_KEYS

Source = Literal["default", "global", "agent", "override", "repair", "direct"]
PathKey = tuple[str | int, ...]


def format_path(path: Iterable[str | int]) -> str:
    """``("agents", "list", 2, "id")`` as ``agents.list[2].id``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = part
    return out


def normalize_agent_id(agent_id: object) -> str:
    """Normalise an agent id the way OpenClaw compares them ("" becomes ``main``)."""
    text = str(agent_id).strip().lower() if agent_id is not None else ""
    text = re.sub(r"[^a-z0-9_-]+", "-", text).strip("-")[:64].strip("-")
    return text or "main"


@dataclass(frozen=True)
class DetectorsConfig:
    """Which rolling-history detectors are on (``tools.loopDetection.detectors``)."""

    generic_repeat: bool = True
    """``genericRepeat``: same tool and same params repeated."""
    known_poll_no_progress: bool = True
    """``knownPollNoProgress``: polling tools whose state does not change."""
    ping_pong: bool = True
    """``pingPong``: two calls alternating without progress."""


@dataclass(frozen=True, slots=True)
class RepeatConfig:
    """``loopwarden.consecutiveRepeat``: the same call N times in a row, same outcome each time.

    Counts include the checked call. In the real runs of the development set no
    healthy run repeats a call more than 4 times in a row, so a warning at 5 and
    a block at 6 leave a margin of one and two calls (see docs/detection.md).
    """

    enabled: bool = True
    warn_at: int = 5
    block_at: int = 6
    stop_at: int = 8
    """The block was ignored twice: the run is stopped."""


@dataclass(frozen=True, slots=True)
class CycleConfig:
    """``loopwarden.cycle``: a cycle of 2 to ``max_period`` calls, each round the same."""

    enabled: bool = True
    max_period: int = 5
    warn_rounds: int = 3
    """Rounds of the cycle (the checked call included) that warn."""
    block_rounds: int = 4
    stop_after_blocks: int = 2
    """Blocked calls of the cycle after which the run is stopped."""


@dataclass(frozen=True, slots=True)
class FailureStreakConfig:
    """``loopwarden.failureStreak``: one tool failing on every call in a row, whatever the args.

    Counts are the failures before the checked call. No healthy run of the
    development set has more than 4 such failures in a row (9 counting a
    harness's format rejections), so the warning comes at 10.
    """

    enabled: bool = True
    warn_at: int = 10
    block_at: int = 12
    stop_at: int = 14


@dataclass(frozen=True, slots=True)
class ExtrasConfig:
    """The detectors the runtime guard adds to OpenClaw's, from the ``loopwarden`` block.
    ``LoopGuard`` runs them by default whenever detection is ``enabled``; the engine
    objects (``ToolCallHistory``, OpenClaw's semantics) only when a config says so."""

    consecutive_repeat: RepeatConfig = RepeatConfig()
    cycle: CycleConfig = CycleConfig()
    failure_streak: FailureStreakConfig = FailureStreakConfig()
    wait_seconds: float = 10.0
    """``waitSeconds``: a call that takes this long (``before_call`` to ``after_call``) is a
    wait, not a spin: the extra detectors leave its pattern to OpenClaw's thresholds."""

    @property
    def active(self) -> bool:
        """Any of the three detectors is on."""
        return self.consecutive_repeat.enabled or self.cycle.enabled or self.failure_streak.enabled

    @classmethod
    def off(cls) -> ExtrasConfig:
        """Every extra detector off (OpenClaw's rules alone)."""
        return cls(
            RepeatConfig(enabled=False),
            CycleConfig(enabled=False),
            FailureStreakConfig(enabled=False),
        )


@dataclass(frozen=True)
class PostCompactionGuardConfig:
    """``tools.loopDetection.postCompactionGuard``."""

    window_size: int = DEFAULT_WINDOW_SIZE
    """``windowSize``: attempts the guard stays armed, and identical triples that abort."""


@dataclass(frozen=True)
class LoopDetectionConfig:
    """One effective ``tools.loopDetection`` block (after merge and threshold repair).

    Thresholds that break the order warning < critical < global breaker are
    raised to keep it (``repairs`` says how); :meth:`Config.for_agent` logs them.
    """

    enabled: bool | None = None
    """``enabled``: master switch; ``None`` (unset) keeps the post-compaction and
    unknown-tool guards on and the rolling-history detectors off."""
    history_size: int = DEFAULT_HISTORY_SIZE
    """``historySize``: calls kept in a run's rolling window."""
    warning_threshold: int = DEFAULT_WARNING_THRESHOLD
    """``warningThreshold``: repeats that warn (and the warning delivery bucket)."""
    critical_threshold: int = DEFAULT_CRITICAL_THRESHOLD
    """``criticalThreshold``: identical no-progress outcomes that block the call."""
    unknown_tool_threshold: int = DEFAULT_UNKNOWN_TOOL_THRESHOLD
    """``unknownToolThreshold``: attempts of a missing tool before they are blocked."""
    global_circuit_breaker_threshold: int = DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD
    """``globalCircuitBreakerThreshold``: identical no-progress outcomes that end the run."""
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    """``detectors``: which rolling-history detectors are on."""
    post_compaction_guard: PostCompactionGuardConfig = field(
        default_factory=PostCompactionGuardConfig
    )
    """``postCompactionGuard``: the guard armed after a context compaction."""
    extras: ExtrasConfig | None = None
    """The runtime guard's extra detectors (``loopwarden`` block), ``None``: not chosen here.
    ``LoopGuard`` fills it from its settings (on by default); the engine objects
    (``ToolCallHistory``) run them only when it is set."""
    repairs: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """Threshold repairs applied to this block, in words."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Where each field's value came from: default, global, agent, override, repair or direct."""

    def __post_init__(self) -> None:
        issues: list[ConfigIssue] = []
        enabled: object = self.enabled  # direct construction is not type-checked
        if enabled is not None and not isinstance(enabled, bool):
            issues.append(ConfigIssue("enabled", f"expected true, false or null, got {enabled!r}"))
        values = {attr: getattr(self, attr) for attr in INT_FIELDS.values()}
        values["post_compaction_guard.window_size"] = self.post_compaction_guard.window_size
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                issues.append(ConfigIssue(name, f"expected a positive integer, got {value!r}"))
        for name in DETECTOR_FIELDS.values():
            if not isinstance(getattr(self.detectors, name), bool):
                issues.append(ConfigIssue(f"detectors.{name}", "expected true or false"))
        if issues:
            raise ConfigError(issues)
        self._repair()

    def _repair(self) -> None:
        warning, critical = self.warning_threshold, self.critical_threshold
        breaker = self.global_circuit_breaker_threshold
        repairs = list(self.repairs)
        sources = dict(self.sources)
        if critical <= warning:
            repairs.append(
                f"criticalThreshold {critical} is not above warningThreshold {warning}; "
                f"using criticalThreshold {warning + 1}"
            )
            critical = warning + 1
            object.__setattr__(self, "critical_threshold", critical)
            sources["criticalThreshold"] = "repair"
        if breaker <= critical:
            repairs.append(
                f"globalCircuitBreakerThreshold {breaker} is not above criticalThreshold "
                f"{critical}; using globalCircuitBreakerThreshold {critical + 1}"
            )
            object.__setattr__(self, "global_circuit_breaker_threshold", critical + 1)
            sources["globalCircuitBreakerThreshold"] = "repair"
        if len(repairs) != len(self.repairs):
            object.__setattr__(self, "repairs", tuple(repairs))
            object.__setattr__(self, "sources", sources)

    @classmethod
    def from_dict(cls, block: Mapping[str, Any] | None) -> LoopDetectionConfig:
        """Validate a ``tools.loopDetection`` mapping (camelCase) and build the config."""
        from .load import load_config

        return load_config({"tools": {"loopDetection": block}}).for_agent(None)

    def to_dict(self) -> dict[str, Any]:
        """The effective block in OpenClaw's camelCase shape."""
        out: dict[str, Any] = {"enabled": self.enabled}
        for key, attr in INT_FIELDS.items():
            out[key] = getattr(self, attr)
        out["detectors"] = {k: getattr(self.detectors, a) for k, a in DETECTOR_FIELDS.items()}
        out["postCompactionGuard"] = {"windowSize": self.post_compaction_guard.window_size}
        return out

    def source_of(self, key: str) -> str:
        """Where ``key`` (camelCase, dotted for nested fields) got its value."""
        return self.sources.get(key, "default")


@dataclass(frozen=True)
class TelemetrySettings:
    """``loopwarden.telemetry``: OpenTelemetry span events and metrics (off by default)."""

    enabled: bool = False
    """``enabled`` (or ``telemetry: true``): report to the OpenTelemetry API."""
    max_tool_names: int = DEFAULT_MAX_TOOL_NAMES
    """``maxToolNames``: distinct tool names kept as metric labels (the rest: ``_other``)."""
    max_agents: int = DEFAULT_MAX_AGENTS
    """``maxAgents``: distinct agent ids kept as metric labels."""


@dataclass(frozen=True)
class Settings:
    """loopwarden's own settings (top-level ``loopwarden`` key of a config)."""

    send_tools: frozenset[str] = frozenset()
    """``sendTools``: extra tool names whose results are hashed as message sends."""
    outcome_profiles: Mapping[str, OutcomeProfile] = field(default_factory=dict)
    """``outcomeProfiles``: per-tool volatile keys/patterns, poll and send flags."""
    store: str | None = None
    """``store``: state store URL (``memory://``, ``sqlite:///path``, ``redis://...``)."""
    fail_mode: Literal["open", "closed"] = "open"
    """``failMode``: on an internal error allow the call (open) or block it (closed)."""
    run_record: str | None = None
    """``runRecord``: path of a JSONL file that records calls, outcomes and guard events."""
    log_params: bool = False
    """``logParams``: also write raw params and results to the run record."""
    state_ttl_seconds: float = DEFAULT_STATE_TTL_SECONDS
    """``stateTtlSeconds``: runs idle for longer than this are forgotten."""
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    """``telemetry``: ``true``, or ``{enabled, maxToolNames, maxAgents}``."""
    volatile_counters: bool = True
    """``volatileCounters``: mask volatile counters in outcomes before they are compared."""
    extras: ExtrasConfig = ExtrasConfig()
    """``consecutiveRepeat``, ``cycle``, ``failureStreak``, ``waitSeconds``."""

    def profile_registry(self) -> ProfileRegistry:
        return ProfileRegistry.create(
            self.outcome_profiles, self.send_tools, volatile=self.volatile_counters
        )


class FieldView(NamedTuple):
    """One field of an agent's effective block, and where its value came from."""

    key: str
    """camelCase, dotted for nested fields (``detectors.pingPong``)."""
    value: Any
    source: str
    """``default``, ``global``, ``agent``, ``override`` or ``repair``."""
    line: int | None = None
    """The line of the config file that set it (values from the file only)."""
    detail: str | None = None
    """For a repair, what was repaired."""
