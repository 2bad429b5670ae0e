"""The config value types and their defaults.

Each field's attribute docstring names its key in the config file: a
``tools.loopDetection`` block (OpenClaw's schema, camelCase) or loopwarden's
own top-level ``loopwarden`` block.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

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
SETTINGS_KEYS = (  # the rules' own sections come from the registered rules
    "sendTools",
    "outcomeProfiles",
    "volatileCounters",
    "waitSeconds",
    "store",
    "failMode",
    "onStop",
    "runRecord",
    "logParams",
    "stateTtlSeconds",
    "telemetry",
)
TELEMETRY_KEYS = {"enabled": "enabled", "maxToolNames": "max_tool_names", "maxAgents": "max_agents"}
PROFILE_KEYS = ("volatileKeys", "volatilePatterns", "volatileCounters", "poll", "send")
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


@dataclass(frozen=True)
class RuleSettings:
    """The settings of one of loopwarden's own rules: one section of the ``loopwarden`` block.

    A rule declares its settings as a frozen dataclass subclass: ``KEY`` is the section's
    key, each field a setting whose camelCase key is given by :func:`setting` (``enabled``
    is every section's switch), and ``ORDER`` names thresholds that must not decrease in
    that order. ``loopwarden.config`` validates a section from this declaration alone.
    """

    KEY: ClassVar[str] = ""
    ORDER: ClassVar[tuple[str, ...]] = ()
    enabled: bool = True
    """``enabled``: the rule's switch."""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """camelCase key -> attribute name, in declaration order."""
        return {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(cls)}

    @classmethod
    def bounds(cls, attr: str) -> tuple[int, int | None]:
        """The smallest and largest value an integer setting accepts (``None``: no limit)."""
        for f in dataclasses.fields(cls):
            if f.name == attr:
                low, high = f.metadata.get("range", (1, None))
                return int(low), None if high is None else int(high)
        raise KeyError(attr)

    def to_dict(self) -> dict[str, Any]:
        """The section in the config file's camelCase shape."""
        return {key: getattr(self, attr) for key, attr in self.keys().items()}


def setting(default: Any, key: str, *, range: tuple[int, int | None] = (1, None)) -> Any:
    """A field of a :class:`RuleSettings`: its default, its camelCase key and, for an
    integer, the values it accepts."""
    return field(default=default, metadata={"key": key, "range": range})


R = TypeVar("R", bound=RuleSettings)

RULE_SETTINGS: dict[str, type[RuleSettings]] = {}
"""The settings type of every registered rule, by its section key (filled by
``loopwarden.engine.detectors.register``)."""


@dataclass(frozen=True)
class Rules:
    """The settings of loopwarden's own rules (the ``loopwarden`` block's rule sections).

    ``LoopGuard`` runs these rules by default whenever detection is ``enabled``; the
    engine-level API (``ToolCallHistory``) only when a config sets ``rules`` explicitly.
    """

    sections: Mapping[str, RuleSettings] = field(default_factory=dict)
    """The sections the config sets, by key; a rule whose section is absent uses its defaults."""
    wait_seconds: float = 10.0
    """``waitSeconds``: a call that takes this long (``before_call`` to ``after_call``) is a
    wait, not a spin: loopwarden's own rules leave its pattern to OpenClaw's thresholds."""

    def get(self, cls: type[R]) -> R:
        """The settings of the rule whose settings type is ``cls``."""
        found = self.sections.get(cls.KEY)
        return found if isinstance(found, cls) else cls()


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
    rules: Rules | None = None
    """loopwarden's own rules (``loopwarden`` block); ``None``: not chosen here.
    ``LoopGuard`` fills it from its settings (on by default); the engine-level objects
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
    on_stop: Literal["answer", "raise", "ask"] | None = None
    """``onStop``: what a stop does — end with a last answer without tools (``answer``),
    raise (``raise``), or ask a person (``ask``); ``None``: each host's default."""
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
    rules: Rules = Rules()
    """The sections of loopwarden's own rules (``consecutiveRepeat``, ``cycle``, ...) and
    ``waitSeconds``."""

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
