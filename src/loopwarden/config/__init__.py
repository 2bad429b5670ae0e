"""Configuration: ``tools.loopDetection`` blocks, per-agent overrides, loopwarden settings.

The block keeps OpenClaw's schema exactly (camelCase keys); an existing
``openclaw.json`` loads as is, reading only ``tools``, ``agents`` and our own
top-level ``loopwarden`` key. Every mistake is reported with its full path
(and the file line when loaded from a file) instead of being ignored.

::

    model.py     the value types and defaults (each field names its config key)
    validate.py  checking raw values; every mistake becomes a ConfigIssue
    merge.py     laying blocks over each other field by field; building the config
    load.py      Config, load_config, resolve_config: files, mappings, per agent
"""

from __future__ import annotations

from .load import Config, ConfigSource, load_config, log_repairs, resolve_config
from .model import (
    DEFAULT_STATE_TTL_SECONDS,
    DetectorsConfig,
    FieldView,
    LoopDetectionConfig,
    PostCompactionGuardConfig,
    Settings,
    TelemetrySettings,
    format_path,
    normalize_agent_id,
)

__all__ = [
    "DEFAULT_STATE_TTL_SECONDS",
    "Config",
    "ConfigSource",
    "DetectorsConfig",
    "FieldView",
    "LoopDetectionConfig",
    "PostCompactionGuardConfig",
    "Settings",
    "TelemetrySettings",
    "format_path",
    "load_config",
    "log_repairs",
    "normalize_agent_id",
    "resolve_config",
]
