"""Configuration: ``tools.loopDetection`` blocks, per-agent overrides, loopwarden settings.

The block keeps OpenClaw's schema exactly (camelCase keys); an existing
``openclaw.json`` loads as is, reading only ``tools``, ``agents`` and our own
top-level ``loopwarden`` key. Every mistake is reported with its full path
(and the file line when loaded from a file) instead of being ignored.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Union

from .errors import ConfigError, ConfigIssue
from .profiles import OutcomeProfile, ProfileRegistry

__all__ = [
    "Config",
    "DetectorsConfig",
    "LoopDetectionConfig",
    "PostCompactionGuardConfig",
    "Settings",
    "load_config",
    "normalize_agent_id",
    "resolve_config",
]

from ._logging import logger

DEFAULT_HISTORY_SIZE = 30
DEFAULT_WARNING_THRESHOLD = 10
DEFAULT_CRITICAL_THRESHOLD = 20
DEFAULT_UNKNOWN_TOOL_THRESHOLD = 10
DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD = 30
DEFAULT_WINDOW_SIZE = 3
DEFAULT_STATE_TTL_SECONDS = 24 * 3600.0

# camelCase key -> attribute name, for the integer fields of a block.
_INT_FIELDS = {
    "historySize": "history_size",
    "warningThreshold": "warning_threshold",
    "criticalThreshold": "critical_threshold",
    "unknownToolThreshold": "unknown_tool_threshold",
    "globalCircuitBreakerThreshold": "global_circuit_breaker_threshold",
}
_DETECTOR_FIELDS = {
    "genericRepeat": "generic_repeat",
    "knownPollNoProgress": "known_poll_no_progress",
    "pingPong": "ping_pong",
}
_GUARD_FIELDS = {"windowSize": "window_size"}
_BLOCK_KEYS = ("enabled", *_INT_FIELDS, "detectors", "postCompactionGuard")
_SETTINGS_KEYS = (
    "sendTools",
    "outcomeProfiles",
    "store",
    "failMode",
    "runRecord",
    "logParams",
    "stateTtlSeconds",
)
_PROFILE_KEYS = ("volatileKeys", "volatilePatterns", "poll", "send")

Source = Literal["default", "global", "agent", "repair", "direct"]
PathKey = tuple[str | int, ...]

_logged_repairs: set[str] = set()


def _log_repair_once(message: str) -> None:
    if message in _logged_repairs:
        return
    if len(_logged_repairs) > 1000:
        _logged_repairs.clear()
    _logged_repairs.add(message)
    logger.warning("loopwarden config repaired: %s", message)


def format_path(path: Iterable[str | int]) -> str:
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
class PostCompactionGuardConfig:
    """``tools.loopDetection.postCompactionGuard``."""

    window_size: int = DEFAULT_WINDOW_SIZE
    """``windowSize``: attempts the guard stays armed, and identical triples that abort."""


@dataclass(frozen=True)
class LoopDetectionConfig:
    """One effective ``tools.loopDetection`` block (after merge and threshold repair)."""

    enabled: bool | None = None
    """Master switch; ``None`` (unset) keeps the post-compaction and unknown-tool guards on."""
    history_size: int = DEFAULT_HISTORY_SIZE
    warning_threshold: int = DEFAULT_WARNING_THRESHOLD
    critical_threshold: int = DEFAULT_CRITICAL_THRESHOLD
    unknown_tool_threshold: int = DEFAULT_UNKNOWN_TOOL_THRESHOLD
    global_circuit_breaker_threshold: int = DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    post_compaction_guard: PostCompactionGuardConfig = field(
        default_factory=PostCompactionGuardConfig
    )
    repairs: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """Threshold repairs applied to this block, in words."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Where each field's value came from: default, global, agent, repair or direct."""

    def __post_init__(self) -> None:
        issues: list[ConfigIssue] = []
        enabled: object = self.enabled  # direct construction is not type-checked
        if enabled is not None and not isinstance(enabled, bool):
            issues.append(ConfigIssue("enabled", f"expected true, false or null, got {enabled!r}"))
        values = {attr: getattr(self, attr) for attr in _INT_FIELDS.values()}
        values["post_compaction_guard.window_size"] = self.post_compaction_guard.window_size
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                issues.append(ConfigIssue(name, f"expected a positive integer, got {value!r}"))
        for name in _DETECTOR_FIELDS.values():
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
            for message in repairs[len(self.repairs) :]:
                _log_repair_once(message)
            object.__setattr__(self, "repairs", tuple(repairs))
            object.__setattr__(self, "sources", sources)

    @classmethod
    def from_dict(cls, block: Mapping[str, Any] | None) -> LoopDetectionConfig:
        """Validate a ``tools.loopDetection`` mapping (camelCase) and build the config."""
        issues: list[ConfigIssue] = []
        clean = _validate_block(block, ("tools", "loopDetection"), issues)
        if issues:
            raise ConfigError(issues)
        return _build(clean, dict.fromkeys(_flat_keys(clean), "global"))

    def to_dict(self) -> dict[str, Any]:
        """The effective block in OpenClaw's camelCase shape."""
        out: dict[str, Any] = {"enabled": self.enabled}
        for key, attr in _INT_FIELDS.items():
            out[key] = getattr(self, attr)
        out["detectors"] = {k: getattr(self.detectors, a) for k, a in _DETECTOR_FIELDS.items()}
        out["postCompactionGuard"] = {"windowSize": self.post_compaction_guard.window_size}
        return out

    def source_of(self, key: str) -> str:
        """Where ``key`` (camelCase, dotted for nested fields) got its value."""
        return self.sources.get(key, "default")


def _flat_keys(block: Mapping[str, Any]) -> list[str]:
    keys: list[str] = []
    for key, value in block.items():
        if isinstance(value, Mapping):
            keys.extend(f"{key}.{sub}" for sub in value)
        else:
            keys.append(key)
    return keys


def _build(clean: Mapping[str, Any], sources: Mapping[str, str]) -> LoopDetectionConfig:
    kwargs: dict[str, Any] = {}
    if "enabled" in clean:
        kwargs["enabled"] = clean["enabled"]
    for key, attr in _INT_FIELDS.items():
        if key in clean:
            kwargs[attr] = clean[key]
    detectors = clean.get("detectors", {})
    kwargs["detectors"] = DetectorsConfig(
        **{a: detectors[k] for k, a in _DETECTOR_FIELDS.items() if k in detectors}
    )
    guard = clean.get("postCompactionGuard", {})
    kwargs["post_compaction_guard"] = PostCompactionGuardConfig(
        **{a: guard[k] for k, a in _GUARD_FIELDS.items() if k in guard}
    )
    return LoopDetectionConfig(**kwargs, sources=dict(sources))


def _suggest(key: str, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} Allowed keys: {', '.join(allowed)}"


def _positive_int(value: Any, path: PathKey, issues: list[ConfigIssue]) -> int | None:
    if isinstance(value, bool):
        pass
    elif isinstance(value, int) and value >= 1:
        return value
    elif isinstance(value, float) and value.is_integer() and value >= 1:
        return int(value)
    issues.append(
        ConfigIssue(format_path(path), f"expected a positive integer (1 or more), got {value!r}")
    )
    return None


def _bool(value: Any, path: PathKey, issues: list[ConfigIssue]) -> bool | None:
    if isinstance(value, bool):
        return value
    issues.append(ConfigIssue(format_path(path), f"expected true or false, got {value!r}"))
    return None


def _mapping(value: Any, path: PathKey, issues: list[ConfigIssue]) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value
    issues.append(ConfigIssue(format_path(path), f"expected an object, got {type(value).__name__}"))
    return None


def _validate_sub(
    value: Any, path: PathKey, fields: Mapping[str, str], kind: str, issues: list[ConfigIssue]
) -> dict[str, Any] | None:
    block = _mapping(value, path, issues)
    if block is None:
        return None
    clean: dict[str, Any] = {}
    for key, item in block.items():
        sub = (*path, key)
        if key not in fields:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), fields)))
        elif item is not None:
            checked = (
                _bool(item, sub, issues) if kind == "bool" else _positive_int(item, sub, issues)
            )
            if checked is not None:
                clean[key] = checked
    return clean


def _validate_block(block: Any, path: PathKey, issues: list[ConfigIssue]) -> dict[str, Any]:
    """Check one loopDetection block; returns only the keys that are set (not null)."""
    mapping = _mapping(block, path, issues)
    clean: dict[str, Any] = {}
    if mapping is None:
        return clean
    for key, value in mapping.items():
        sub = (*path, key)
        if key not in _BLOCK_KEYS:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), _BLOCK_KEYS)))
        elif value is None:
            continue
        elif key == "enabled":
            checked = _bool(value, sub, issues)
            if checked is not None:
                clean[key] = checked
        elif key == "detectors":
            detectors = _validate_sub(value, sub, _DETECTOR_FIELDS, "bool", issues)
            if detectors is not None:
                clean[key] = detectors
        elif key == "postCompactionGuard":
            guard = _validate_sub(value, sub, _GUARD_FIELDS, "int", issues)
            if guard is not None:
                clean[key] = guard
        else:
            number = _positive_int(value, sub, issues)
            if number is not None:
                clean[key] = number
    return clean


def _merge(
    global_block: Mapping[str, Any], agent_block: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Lay the agent block over the global block field by field (nested blocks too)."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for origin, block in (("global", global_block), ("agent", agent_block or {})):
        for key, value in block.items():
            if isinstance(value, Mapping):
                nested = merged.setdefault(key, {})
                for sub, item in value.items():
                    nested[sub] = item
                    sources[f"{key}.{sub}"] = origin
            else:
                merged[key] = value
                sources[key] = origin
    return merged, sources


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

    def profile_registry(self) -> ProfileRegistry:
        return ProfileRegistry.create(self.outcome_profiles, self.send_tools)


def _string_list(value: Any, path: PathKey, issues: list[ConfigIssue]) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return list(value)
    issues.append(ConfigIssue(format_path(path), "expected a list of non-empty strings"))
    return []


def _validate_profile(value: Any, path: PathKey, issues: list[ConfigIssue]) -> OutcomeProfile:
    block = _mapping(value, path, issues) or {}
    kwargs: dict[str, Any] = {}
    for key, item in block.items():
        sub = (*path, key)
        if key not in _PROFILE_KEYS:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), _PROFILE_KEYS)))
        elif key == "volatileKeys":
            kwargs["volatile_keys"] = _string_list(item, sub, issues)
        elif key == "volatilePatterns":
            patterns = []
            for index, pattern in enumerate(_string_list(item, sub, issues)):
                try:
                    patterns.append(re.compile(pattern))
                except re.error as exc:
                    issues.append(
                        ConfigIssue(
                            format_path((*sub, index)), f"invalid regular expression: {exc}"
                        )
                    )
            kwargs["volatile_patterns"] = patterns
        elif item is not None:
            checked = _bool(item, sub, issues)
            if checked is not None:
                kwargs[key] = checked
    return OutcomeProfile.build(**kwargs)


def _validate_settings(value: Any, issues: list[ConfigIssue]) -> Settings:
    path: PathKey = ("loopwarden",)
    block = _mapping(value, path, issues)
    if not block:
        return Settings()
    kwargs: dict[str, Any] = {}
    for key, item in block.items():
        sub = (*path, key)
        if key not in _SETTINGS_KEYS:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), _SETTINGS_KEYS)))
        elif item is None:
            continue
        elif key == "sendTools":
            kwargs["send_tools"] = frozenset(_string_list(item, sub, issues))
        elif key == "outcomeProfiles":
            profiles = _mapping(item, sub, issues) or {}
            kwargs["outcome_profiles"] = {
                str(tool): _validate_profile(spec, (*sub, str(tool)), issues)
                for tool, spec in profiles.items()
            }
        elif key in ("store", "runRecord"):
            if isinstance(item, str) and item:
                kwargs["store" if key == "store" else "run_record"] = item
            else:
                issues.append(ConfigIssue(format_path(sub), "expected a non-empty string"))
        elif key == "failMode":
            if item in ("open", "closed"):
                kwargs["fail_mode"] = item
            else:
                issues.append(
                    ConfigIssue(format_path(sub), f"expected 'open' or 'closed', got {item!r}")
                )
        elif key == "logParams":
            checked = _bool(item, sub, issues)
            if checked is not None:
                kwargs["log_params"] = checked
        elif key == "stateTtlSeconds":
            if isinstance(item, (int, float)) and not isinstance(item, bool) and item > 0:
                kwargs["state_ttl_seconds"] = float(item)
            else:
                issues.append(
                    ConfigIssue(format_path(sub), f"expected a positive number, got {item!r}")
                )
    return Settings(**kwargs)


@dataclass(frozen=True)
class _AgentBlock:
    block: dict[str, Any]
    path: str


class Config:
    """A whole config (OpenClaw layout): global block, per-agent blocks, loopwarden settings.

    Build it with :func:`load_config`. ``for_agent()`` returns the effective
    :class:`LoopDetectionConfig` of one agent; results are cached, so threshold
    repairs are logged once.
    """

    def __init__(
        self,
        global_block: Mapping[str, Any],
        agents: Mapping[str, _AgentBlock],
        settings: Settings,
        *,
        source: str | None = None,
        raw: Mapping[str, Any] | None = None,
    ) -> None:
        self._global = dict(global_block)
        self._agents = dict(agents)
        self.settings = settings
        self.source = source
        self.raw: Mapping[str, Any] = raw if raw is not None else {}
        self._cache: dict[str, LoopDetectionConfig] = {}

    @property
    def global_block(self) -> Mapping[str, Any]:
        """The validated global ``tools.loopDetection`` keys that are set."""
        return self._global

    def agent_ids(self) -> list[str]:
        """Normalised ids of the agents that have their own ``loopDetection`` block."""
        return sorted(self._agents)

    def agent_block(self, agent_id: str | None) -> Mapping[str, Any] | None:
        if agent_id is None:
            return None
        entry = self._agents.get(normalize_agent_id(agent_id))
        return entry.block if entry is not None else None

    def agent_block_path(self, agent_id: str | None) -> str | None:
        entry = self._agents.get(normalize_agent_id(agent_id)) if agent_id is not None else None
        return entry.path if entry is not None else None

    def for_agent(self, agent_id: str | None = None) -> LoopDetectionConfig:
        """The effective loop-detection config of ``agent_id`` (or the global one)."""
        key = normalize_agent_id(agent_id) if agent_id is not None else ""
        cached = self._cache.get(key)
        if cached is None:
            merged, sources = _merge(self._global, self.agent_block(agent_id))
            cached = _build(merged, sources)
            self._cache[key] = cached
        return cached

    def with_overrides(self, overrides: Mapping[str, Any], *, all_agents: bool = False) -> Config:
        """A copy whose global block has ``overrides`` (camelCase, dotted) laid over it.

        With ``all_agents`` the overrides are laid over every agent's block too,
        so they win everywhere (what a command-line ``--set`` means).
        """
        nested: dict[str, Any] = {}
        for key, value in overrides.items():
            head, _, tail = key.partition(".")
            if tail:
                nested.setdefault(head, {})[tail] = value
            else:
                nested[key] = value
        issues: list[ConfigIssue] = []
        clean = _validate_block(nested, ("tools", "loopDetection"), issues)
        if issues:
            raise ConfigError(issues)
        merged, _ = _merge(self._global, clean)
        agents = self._agents
        if all_agents:
            agents = {
                agent_id: _AgentBlock(_merge(entry.block, clean)[0], entry.path)
                for agent_id, entry in agents.items()
            }
        return Config(merged, agents, self.settings, source=self.source, raw=self.raw)


_FIELD_NAMES = {*_BLOCK_KEYS}


def _parse(raw: Any, issues: list[ConfigIssue]) -> Config:
    if raw is None:
        return Config({}, {}, Settings())
    if not isinstance(raw, Mapping):
        issues.append(ConfigIssue("", f"expected a config object, got {type(raw).__name__}"))
        return Config({}, {}, Settings())
    stray = [k for k in raw if k in _FIELD_NAMES] if "tools" not in raw else []
    for key in stray:
        issues.append(
            ConfigIssue(
                key,
                "loop-detection fields belong under tools.loopDetection "
                f"(use {{'tools': {{'loopDetection': {{{key!r}: ...}}}}}}, "
                "or LoopDetectionConfig.from_dict() for a bare block)",
            )
        )
    tools = _mapping(raw.get("tools"), ("tools",), issues) or {}
    global_block = _validate_block(tools.get("loopDetection"), ("tools", "loopDetection"), issues)
    agents_raw = _mapping(raw.get("agents"), ("agents",), issues) or {}
    agents: dict[str, _AgentBlock] = {}

    def add(agent_id: Any, entry: Mapping[str, Any], path: PathKey) -> None:
        entry_tools = _mapping(entry.get("tools"), (*path, "tools"), issues) or {}
        if entry_tools.get("loopDetection") is None:
            return
        block_path = (*path, "tools", "loopDetection")
        block = _validate_block(entry_tools["loopDetection"], block_path, issues)
        if not isinstance(agent_id, str) or not agent_id.strip():
            issues.append(
                ConfigIssue(
                    format_path((*path, "id")), "an agent with a loopDetection block needs an id"
                )
            )
            return
        norm = normalize_agent_id(agent_id)
        if norm in agents:
            issues.append(
                ConfigIssue(
                    format_path(block_path),
                    f"agent {norm!r} already has a loopDetection block at {agents[norm].path}",
                )
            )
            return
        agents[norm] = _AgentBlock(block, format_path(block_path))

    agent_list = agents_raw.get("list")
    if agent_list is not None:
        if not isinstance(agent_list, list):
            issues.append(ConfigIssue("agents.list", "expected a list of agent objects"))
        else:
            for index, entry in enumerate(agent_list):
                entry_map = _mapping(entry, ("agents", "list", index), issues)
                if entry_map is not None:
                    add(entry_map.get("id"), entry_map, ("agents", "list", index))
    entries = _mapping(agents_raw.get("entries"), ("agents", "entries"), issues) or {}
    for agent_id, entry in entries.items():
        entry_map = _mapping(entry, ("agents", "entries", str(agent_id)), issues)
        if entry_map is not None:
            add(agent_id, entry_map, ("agents", "entries", str(agent_id)))
    settings = _validate_settings(raw.get("loopwarden"), issues)
    return Config(global_block, agents, settings, raw=raw)


def _parse_path_key(path: str) -> PathKey:
    parts: list[str | int] = []
    for piece in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        parts.append(int(piece[1:-1]) if piece.startswith("[") else piece)
    return tuple(parts)


def _with_lines(issues: list[ConfigIssue], text: str, file: str) -> list[ConfigIssue]:
    from ._json5loc import locate_lines

    lines = locate_lines(text)
    located = []
    for issue in issues:
        key = _parse_path_key(issue.path)
        line = None
        while key and line is None:
            line = lines.get(key)
            key = key[:-1]
        located.append(replace(issue, file=file, line=line))
    return located


_JSON5_ERROR = re.compile(r"^<string>:(\d+)\s*(.*)$", re.DOTALL)


def _load_text(text: str, file: str) -> Config:
    import json5

    try:
        raw = json5.loads(text)
    except ValueError as exc:
        match = _JSON5_ERROR.match(str(exc))
        line = int(match.group(1)) if match else None
        reason = match.group(2) if match else str(exc)
        raise ConfigError(
            [ConfigIssue("", f"not valid JSON5: {reason}", file=file, line=line)]
        ) from None
    issues: list[ConfigIssue] = []
    config = _parse(raw, issues)
    if issues:
        raise ConfigError(_with_lines(issues, text, file))
    config.source = file
    return config


ConfigSource = Union[Config, Mapping[str, Any], str, "os.PathLike[str]", None]


def load_config(source: ConfigSource) -> Config:
    """Load a whole config from a JSON5/JSON file path, a mapping, or ``None`` (defaults).

    Raises :class:`ConfigError` listing every problem with its path (and file line).
    """
    if isinstance(source, Config):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                [ConfigIssue("", f"cannot read config file: {exc.strerror or exc}", file=str(path))]
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                [ConfigIssue("", "config file is not UTF-8 text", file=str(path))]
            ) from None
        return _load_text(text, str(path))
    issues: list[ConfigIssue] = []
    config = _parse(source, issues)
    if issues:
        raise ConfigError(issues)
    return config


def resolve_config(
    full_config: Mapping[str, Any] | None, agent_id: str | None = None
) -> LoopDetectionConfig:
    """Effective ``tools.loopDetection`` for ``agent_id`` from a whole config mapping."""
    return load_config(full_config).for_agent(agent_id)
