"""The config grid of ``loopwarden tune``: ``--grid KEY=V1,V2,...`` axes, validated for real.

Keys are ``tools.loopDetection`` keys (camelCase, dotted for nested ones, the
``tools.loopDetection.`` prefix optional) or ``loopwarden.<setting>`` keys, also
dotted (``loopwarden.consecutiveRepeat.blockAt``).
Every value goes through the config validator itself, so a wrong key or value
gets its path-precise error and "did you mean". Several axes form a product.

Without ``--grid``, :func:`default_changes` builds a grid from the keys the
validator knows (``LoopDetectionConfig().to_dict()`` and the sections of
loopwarden's own rules): OpenClaw's thresholds lowered together in steps and
each alone, each detector switched, each own rule's thresholds moved down and
up and the rule switched off. New detectors and thresholds join it by
themselves. The base config itself is always ``C0``, the one to beat.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..config import Config, LoopDetectionConfig, load_config
from ..errors import ConfigError, LoopwardenError

__all__ = [
    "MAX_CONFIGS",
    "Candidate",
    "GridError",
    "build_candidates",
    "default_changes",
    "parse_grid",
]

MAX_CONFIGS = 256
"""A grid larger than this is refused: every config replays every run."""

_BLOCK_PREFIXES = ("tools.loopDetection.", "loopDetection.")
_SETTINGS_PREFIX = "loopwarden."
_JOINT_STEPS = (0.75, 0.5, 0.3)


class GridError(LoopwardenError, ValueError):
    """A ``--grid`` that cannot be used; the message says which and why."""


@dataclass
class Candidate:
    """One config of the grid."""

    name: str
    """``C1``, ``C2``, ... in grid order."""
    changes: dict[str, Any]
    """The grid values of this config (``key -> value``; settings keys keep ``loopwarden.``)."""
    config: Config
    effective: dict[str, Any]
    """The effective ``tools.loopDetection`` block (camelCase), after threshold repairs."""
    repairs: tuple[str, ...] = ()
    same_as: list[str] = dataclasses.field(default_factory=list)
    """Grid entries that came out identical to this one (after repairs) and were merged."""

    def describe(self) -> str:
        if not self.changes:
            return "defaults"
        return " ".join(f"{key}={_text(value)}" for key, value in self.changes.items())

    def config_block(self) -> dict[str, Any]:
        """The ready-to-paste config: the block with the values that differ from the defaults."""
        defaults = _flat(LoopDetectionConfig().to_dict())
        block: dict[str, Any] = {}
        for key, value in _flat(self.effective).items():
            if key == "enabled" or value != defaults.get(key):
                _put(block, key, value)
        out: dict[str, Any] = {"tools": {"loopDetection": block}}
        settings: dict[str, Any] = {}
        for key, value in self.changes.items():
            if key.startswith(_SETTINGS_PREFIX):
                _put(settings, key[len(_SETTINGS_PREFIX) :], value)
        if settings:
            out["loopwarden"] = settings
        return out


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _flat(block: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in block.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _put(target: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key; a ``true`` switch on the way becomes an object (which keeps it on)."""
    *heads, last = dotted.split(".")
    for head in heads:
        inner = target.get(head)
        if not isinstance(inner, dict):
            inner = target[head] = {} if not isinstance(inner, Mapping) else dict(inner)
        target = inner
    target[last] = value


def _normalise_key(key: str) -> str:
    key = key.strip()
    for prefix in _BLOCK_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _parse_values(raw: str) -> list[Any]:
    import json5

    text = raw.strip()
    if not text:
        return []
    try:
        values = json5.loads(f"[{text}]")
        if isinstance(values, list):
            return values
    except ValueError:
        pass
    out: list[Any] = []
    for item in text.split(","):
        item = item.strip()
        try:
            out.append(json5.loads(item))
        except ValueError:
            out.append(item)
    return out


def validate_change(key: str, value: Any) -> str | None:
    """The validator's complaint about one grid value, or None when it is valid."""
    if key.startswith(_SETTINGS_PREFIX):
        section: dict[str, Any] = {}
        _put(section, key[len(_SETTINGS_PREFIX) :], value)
        raw: dict[str, Any] = {"loopwarden": section}
    else:
        block: dict[str, Any] = {}
        _put(block, key, value)
        raw = {"tools": {"loopDetection": block}}
    try:
        load_config(raw)
    except ConfigError as exc:
        return "; ".join(str(issue) for issue in exc.issues)
    return None


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """``--grid KEY=V1,V2,...`` options as ``(key, values)`` axes, each value validated.

    Raises :class:`GridError` naming the option, the key and the validator's message.
    """
    axes: list[tuple[str, list[Any]]] = []
    seen: set[str] = set()
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = _normalise_key(key)
        if not sep or not key:
            raise GridError(
                f"--grid expects KEY=V1,V2,... (for example --grid criticalThreshold=10,15,20), "
                f"got {spec!r}"
            )
        if key in seen:
            raise GridError(f"--grid {key} is given twice; list all its values in one --grid")
        seen.add(key)
        values = _parse_values(raw)
        if not values:
            raise GridError(f"--grid {key}= has no values")
        for value in values:
            problem = validate_change(key, value)
            if problem is not None:
                raise GridError(f"--grid {key}={_text(value)}: {problem}")
        axes.append((key, values))
    return axes


def grid_changes(axes: Sequence[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """The product of the axes, in order (the first axis varies slowest)."""
    keys = [key for key, _ in axes]
    return [
        dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))
    ]


def default_changes() -> list[dict[str, Any]]:
    """A grid from the keys the validator knows, around the defaults.

    OpenClaw's thresholds: all lowered together in steps, each halved alone, each detector
    switched. loopwarden's own rules, which act first on most loops: each rule's
    escalation thresholds one lower and two higher together, and each rule switched off.
    """
    from ..config.model import RULE_SETTINGS

    defaults = _flat(LoopDetectionConfig().to_dict())
    thresholds = {
        key: value
        for key, value in defaults.items()
        if key.endswith("Threshold") and isinstance(value, int) and not isinstance(value, bool)
    }
    switches = {k: v for k, v in defaults.items() if isinstance(v, bool) and k != "enabled"}
    out: list[dict[str, Any]] = [{}]
    for step in _JOINT_STEPS:
        out.append({key: max(1, round(value * step)) for key, value in thresholds.items()})
    for key, value in thresholds.items():
        out.append({key: max(1, round(value * 0.5))})
    for key, value in switches.items():
        out.append({key: not value})
    for section, cls in RULE_SETTINGS.items():
        rule = cls().to_dict()
        prefix = f"{_SETTINGS_PREFIX}{section}."
        order = [key for key in cls.ORDER if isinstance(rule.get(key), int)]
        if order:
            low = {prefix + k: max(cls.bounds(cls.keys()[k])[0], rule[k] - 1) for k in order}
            if list(low.values()) != [rule[k] for k in order]:
                out.append(low)
            out.append({prefix + k: rule[k] + 2 for k in order})
        out.append({prefix + "enabled": False})
    return out


def build_candidates(
    base: Config,
    changes: Sequence[dict[str, Any]],
    *,
    agent: str | None = None,
    baseline: bool = True,
) -> list[Candidate]:
    """One config per change set, laid over ``base`` like ``--set`` (and settings over its own).

    With ``baseline`` (the default) the first candidate, ``C0``, is ``base`` itself: the
    defaults a recommendation has to beat (an empty change set is that same config).
    Entries that come out identical after threshold repairs are merged into the first.
    """
    if baseline:
        changes = [{}, *(change for change in changes if change)]
    if len(changes) > MAX_CONFIGS:
        raise GridError(
            f"the grid has {len(changes)} configs; at most {MAX_CONFIGS} are replayed at once "
            "(use fewer values or fewer --grid keys)"
        )
    out: list[Candidate] = []
    index: dict[bytes, Candidate] = {}
    for number, change in enumerate(changes, 1):
        block = {k: v for k, v in change.items() if not k.startswith(_SETTINGS_PREFIX)}
        settings = {
            k[len(_SETTINGS_PREFIX) :]: v
            for k, v in change.items()
            if k.startswith(_SETTINGS_PREFIX)
        }
        config = base
        try:
            if settings:
                raw = copy.deepcopy(dict(base.raw))
                section = dict(raw.get("loopwarden") or {})
                for dotted, value in settings.items():
                    _put(section, dotted, value)
                raw["loopwarden"] = section
                config = load_config(raw)
                config.source = base.source
            if block:
                config = config.with_overrides(block, all_agents=True)
        except ConfigError as exc:
            raise GridError(f"grid entry {_describe(change)}: {exc}") from None
        # Tuning never writes the user's run record or touches their store.
        config.settings = dataclasses.replace(config.settings, run_record=None, store=None)
        effective_cfg = config.for_agent(agent)
        effective = effective_cfg.to_dict()
        key = orjson.dumps([effective, settings], option=orjson.OPT_SORT_KEYS)
        if key in index:
            index[key].same_as.append(_describe(change))
            continue
        candidate = Candidate(f"C{number}", dict(change), config, effective, effective_cfg.repairs)
        index[key] = candidate
        out.append(candidate)
    for number, candidate in enumerate(out, 0 if baseline else 1):
        candidate.name = f"C{number}"
    return out


def _describe(change: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_text(v)}" for k, v in change.items()) or "defaults"
