"""Merging validated blocks field by field, and building the effective config.

Layers are laid over each other in order (the global block, then the agent's
block, with ``--set`` overrides where they apply); each field remembers the
layer it came from, so that ``config check`` can say why it has its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import (
    DETECTOR_FIELDS,
    GUARD_FIELDS,
    INT_FIELDS,
    DetectorsConfig,
    LoopDetectionConfig,
    PostCompactionGuardConfig,
)

__all__ = ["build", "merge", "nest"]

Layer = tuple[str, Mapping[str, Any]]
"""A block and the name of its origin (``global``, ``agent``, ``override``)."""


def merge(*layers: Layer) -> tuple[dict[str, Any], dict[str, str]]:
    """Lay the blocks over each other in order, field by field (nested blocks too).

    Returns the merged block and the origin of each field (dotted keys).
    """
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for origin, block in layers:
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


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys (``detectors.pingPong``) as a block (``{"detectors": {"pingPong": ...}}``)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, tail = key.partition(".")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[key] = value
    return nested


def build(clean: Mapping[str, Any], sources: Mapping[str, str]) -> LoopDetectionConfig:
    """The effective config of a merged, validated block."""
    kwargs: dict[str, Any] = {}
    if "enabled" in clean:
        kwargs["enabled"] = clean["enabled"]
    for key, attr in INT_FIELDS.items():
        if key in clean:
            kwargs[attr] = clean[key]
    detectors = clean.get("detectors", {})
    kwargs["detectors"] = DetectorsConfig(
        **{a: detectors[k] for k, a in DETECTOR_FIELDS.items() if k in detectors}
    )
    guard = clean.get("postCompactionGuard", {})
    kwargs["post_compaction_guard"] = PostCompactionGuardConfig(
        **{a: guard[k] for k, a in GUARD_FIELDS.items() if k in guard}
    )
    return LoopDetectionConfig(**kwargs, sources=dict(sources))
