"""Checking raw config values: every mistake becomes a :class:`ConfigIssue` with its path.

The checkers collect issues instead of raising, so that one pass reports every
problem of a file; they return only the keys that are set (``null`` is unset).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigIssue
from ..profiles import OutcomeProfile
from . import rules as _builtin_rules  # noqa: F401  (the built-in sections register on import)
from .model import (
    BLOCK_KEYS,
    DETECTOR_FIELDS,
    GUARD_FIELDS,
    PROFILE_KEYS,
    RULE_SETTINGS,
    SETTINGS_KEYS,
    TELEMETRY_KEYS,
    PathKey,
    Rules,
    RuleSettings,
    Settings,
    TelemetrySettings,
    format_path,
)

__all__ = [
    "mapping",
    "rule_settings",
    "validate_block",
    "validate_rule",
    "validate_settings",
    "validate_telemetry",
]


def _close_value(value: object, allowed: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for a string close to one of ``allowed``, else nothing."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value.lower(), list(allowed), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _suggest(key: str, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"unknown key{hint} Allowed keys: {', '.join(allowed)}"


def _member(key: Any) -> str | int:
    """A mapping key as a path part: never an int, which would read as a list index."""
    return key if isinstance(key, str) else repr(key)


MAX_TTL_SECONDS = 10 * 365 * 86400
"""The longest ``stateTtlSeconds`` (ten years)."""
MAX_INT = 1_000_000_000
"""The largest count or threshold a config may set (anything above is a mistake)."""


def _positive_int(value: Any, path: PathKey, issues: list[ConfigIssue]) -> int | None:
    if isinstance(value, bool):
        pass
    elif isinstance(value, int) and 1 <= value <= MAX_INT:
        return value
    elif isinstance(value, float) and value.is_integer() and 1 <= value <= MAX_INT:
        return int(value)
    elif isinstance(value, (int, float)) and value > MAX_INT:
        issues.append(ConfigIssue(format_path(path), f"at most {MAX_INT:,} allowed, got {value!r}"))
        return None
    issues.append(
        ConfigIssue(format_path(path), f"expected a positive integer (1 or more), got {value!r}")
    )
    return None


def _bool(value: Any, path: PathKey, issues: list[ConfigIssue]) -> bool | None:
    if isinstance(value, bool):
        return value
    issues.append(ConfigIssue(format_path(path), f"expected true or false, got {value!r}"))
    return None


def mapping(value: Any, path: PathKey, issues: list[ConfigIssue]) -> Mapping[str, Any] | None:
    """``value`` if it is an object (``None`` when unset or wrong, with an issue)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value
    issues.append(ConfigIssue(format_path(path), f"expected an object, got {type(value).__name__}"))
    return None


def _validate_sub(
    value: Any, path: PathKey, fields: Mapping[str, str], kind: str, issues: list[ConfigIssue]
) -> dict[str, Any] | None:
    block = mapping(value, path, issues)
    if block is None:
        return None
    clean: dict[str, Any] = {}
    for key, item in block.items():
        sub = (*path, _member(key))
        if key not in fields:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), fields)))
        elif item is not None:
            checked = (
                _bool(item, sub, issues) if kind == "bool" else _positive_int(item, sub, issues)
            )
            if checked is not None:
                clean[key] = checked
    return clean


def validate_block(block: Any, path: PathKey, issues: list[ConfigIssue]) -> dict[str, Any]:
    """Check one loopDetection block; returns only the keys that are set (not null)."""
    block_map = mapping(block, path, issues)
    clean: dict[str, Any] = {}
    if block_map is None:
        return clean
    for key, value in block_map.items():
        sub = (*path, _member(key))
        if key not in BLOCK_KEYS:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), BLOCK_KEYS)))
        elif value is None:
            continue
        elif key == "enabled":
            checked = _bool(value, sub, issues)
            if checked is not None:
                clean[key] = checked
        elif key == "detectors":
            detectors = _validate_sub(value, sub, DETECTOR_FIELDS, "bool", issues)
            if detectors is not None:
                clean[key] = detectors
        elif key == "postCompactionGuard":
            guard = _validate_sub(value, sub, GUARD_FIELDS, "int", issues)
            if guard is not None:
                clean[key] = guard
        else:
            number = _positive_int(value, sub, issues)
            if number is not None:
                clean[key] = number
    return clean


def _string_list(value: Any, path: PathKey, issues: list[ConfigIssue]) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return list(value)
    issues.append(ConfigIssue(format_path(path), "expected a list of non-empty strings"))
    return []


def _validate_profile(value: Any, path: PathKey, issues: list[ConfigIssue]) -> OutcomeProfile:
    block = mapping(value, path, issues) or {}
    kwargs: dict[str, Any] = {}
    for key, item in block.items():
        sub = (*path, _member(key))
        if key not in PROFILE_KEYS:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), PROFILE_KEYS)))
        elif key == "volatileCounters":
            checked = _bool(item, sub, issues)
            if checked is not None:
                kwargs["volatile_counters"] = checked
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


def validate_telemetry(value: Any, path: PathKey, issues: list[ConfigIssue]) -> TelemetrySettings:
    """``loopwarden.telemetry``: true/false, or an object (which turns it on unless it says not)."""
    if isinstance(value, bool):
        return TelemetrySettings(enabled=value)
    if not isinstance(value, Mapping):
        issues.append(
            ConfigIssue(
                format_path(path), f"expected true, false or an object, got {type(value).__name__}"
            )
        )
        return TelemetrySettings()
    kwargs: dict[str, Any] = {"enabled": True}
    for key, item in value.items():
        sub = (*path, _member(key))
        attr = TELEMETRY_KEYS.get(key)
        if attr is None:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(key), TELEMETRY_KEYS)))
            continue
        if item is None:
            continue
        checked = (
            _bool(item, sub, issues) if attr == "enabled" else _positive_int(item, sub, issues)
        )
        if checked is not None:
            kwargs[attr] = checked
    return TelemetrySettings(**kwargs)


def validate_rule(
    cls: type[RuleSettings], value: Any, path: PathKey, issues: list[ConfigIssue]
) -> RuleSettings:
    """One rule's section of the ``loopwarden`` block: ``true``/``false`` or an object."""
    if isinstance(value, bool):
        return cls(enabled=value)
    block = mapping(value, path, issues)
    if block is None:
        return cls()
    keys = cls.keys()
    kwargs: dict[str, Any] = {}
    for name, item in block.items():
        sub = (*path, _member(name))
        attr = keys.get(name)
        if attr is None:
            issues.append(ConfigIssue(format_path(sub), _suggest(str(name), keys)))
        elif item is None:
            continue
        elif attr == "enabled":
            checked: Any = _bool(item, sub, issues)
            if checked is not None:
                kwargs[attr] = checked
        else:
            checked = _positive_int(item, sub, issues)
            if checked is None:
                continue
            low, high = cls.bounds(attr)
            if checked < low or (high is not None and checked > high):
                upper = "" if high is None else f" to {high}"
                issues.append(
                    ConfigIssue(format_path(sub), f"expected {low}{upper}, got {checked}")
                )
                continue
            kwargs[attr] = checked
    made = cls(**kwargs)
    values = [(name, getattr(made, keys[name])) for name in cls.ORDER]
    for (low_name, low_value), (high_name, high_value) in itertools.pairwise(values):
        if high_value < low_value:
            issues.append(
                ConfigIssue(
                    format_path((*path, high_name)),
                    f"{high_name} {high_value} is below {low_name} {low_value}; expected "
                    + " <= ".join(cls.ORDER),
                )
            )
    return made


def rule_settings() -> dict[str, type[RuleSettings]]:
    """The settings type of every registered rule, by section key."""
    return RULE_SETTINGS


def _positive_number(value: Any, path: PathKey, issues: list[ConfigIssue]) -> float | None:
    """A positive number of seconds, bounded so that later arithmetic cannot overflow."""
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 < value <= MAX_TTL_SECONDS
    ):
        return float(value)
    issues.append(
        ConfigIssue(
            format_path(path),
            f"expected a positive number of seconds (at most {MAX_TTL_SECONDS}), got {value!r}",
        )
    )
    return None


def validate_settings(value: Any, issues: list[ConfigIssue]) -> Settings:
    """Check the top-level ``loopwarden`` block."""
    path: PathKey = ("loopwarden",)
    block = mapping(value, path, issues)
    if not block:
        return Settings()
    kwargs: dict[str, Any] = {}
    rules: dict[str, Any] = {}
    sections: dict[str, RuleSettings] = {}
    ruled = rule_settings()
    for key, item in block.items():
        sub = (*path, _member(key))
        if key not in SETTINGS_KEYS and key not in ruled:
            issues.append(
                ConfigIssue(format_path(sub), _suggest(str(key), (*SETTINGS_KEYS, *ruled)))
            )
        elif item is None:
            continue
        elif key == "sendTools":
            kwargs["send_tools"] = frozenset(_string_list(item, sub, issues))
        elif key == "outcomeProfiles":
            profiles = mapping(item, sub, issues) or {}
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
        elif key == "onStop":
            if item in ("answer", "raise", "ask"):
                kwargs["on_stop"] = item
            else:
                issues.append(
                    ConfigIssue(
                        format_path(sub),
                        f"expected 'answer', 'raise' or 'ask', got {item!r}"
                        + _close_value(item, ("answer", "raise", "ask")),
                    )
                )
        elif key == "logParams":
            checked = _bool(item, sub, issues)
            if checked is not None:
                kwargs["log_params"] = checked
        elif key == "stateTtlSeconds":
            number = _positive_number(item, sub, issues)
            if number is not None:
                kwargs["state_ttl_seconds"] = number
        elif key == "telemetry":
            kwargs["telemetry"] = validate_telemetry(item, sub, issues)
        elif key == "volatileCounters":
            checked = _bool(item, sub, issues)
            if checked is not None:
                kwargs["volatile_counters"] = checked
        elif key == "waitSeconds":
            number = _positive_number(item, sub, issues)
            if number is not None:
                rules["wait_seconds"] = number
        else:  # a rule's section
            sections[key] = validate_rule(ruled[key], item, sub, issues)
    if rules or sections:
        kwargs["rules"] = Rules(sections=sections, **rules)
    return Settings(**kwargs)
