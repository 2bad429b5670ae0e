"""The ``telemetry`` key of the ``loopwarden`` settings block, and the one switch.

::

    {"loopwarden": {"telemetry": true}}
    {"loopwarden": {"telemetry": {"enabled": true, "maxToolNames": 50, "maxAgents": 20}}}

Off when absent. ``LoopGuard(telemetry=...)`` overrides the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigIssue
from ._names import DEFAULT_MAX_AGENTS, DEFAULT_MAX_TOOL_NAMES

if TYPE_CHECKING:
    from ._core import Recorder, Telemetry

__all__ = ["TelemetrySettings", "parse_telemetry_setting", "resolve_telemetry"]

_KEYS = {"enabled": "enabled", "maxToolNames": "max_tool_names", "maxAgents": "max_agents"}


@dataclass(frozen=True)
class TelemetrySettings:
    """``loopwarden.telemetry``: OpenTelemetry span events and metrics."""

    enabled: bool = False
    max_tool_names: int = DEFAULT_MAX_TOOL_NAMES
    """``maxToolNames``: distinct tool names kept as metric labels (the rest: ``_other``)."""
    max_agents: int = DEFAULT_MAX_AGENTS
    """``maxAgents``: distinct agent ids kept as metric labels."""


def parse_telemetry_setting(
    value: Any, path: str = "loopwarden.telemetry"
) -> tuple[TelemetrySettings, list[ConfigIssue]]:
    """Validate the value: a boolean, or an object of enabled, maxToolNames, maxAgents."""
    if value is None:
        return TelemetrySettings(), []
    if isinstance(value, bool):
        return TelemetrySettings(enabled=value), []
    if not isinstance(value, Mapping):
        return TelemetrySettings(), [
            ConfigIssue(path, f"expected true, false or an object, got {type(value).__name__}")
        ]
    issues: list[ConfigIssue] = []
    kwargs: dict[str, Any] = {"enabled": True}  # an object turns it on unless it says otherwise
    for key, item in value.items():
        sub = f"{path}.{key}"
        field = _KEYS.get(str(key))
        if field is None:
            issues.append(ConfigIssue(sub, f"unknown key; expected one of {', '.join(_KEYS)}"))
        elif field == "enabled":
            if isinstance(item, bool):
                kwargs[field] = item
            else:
                issues.append(ConfigIssue(sub, "expected true or false"))
        elif type(item) is int and item >= 1:
            kwargs[field] = item
        else:
            issues.append(ConfigIssue(sub, "expected an integer of at least 1"))
    return TelemetrySettings(**kwargs), issues


def resolve_telemetry(
    telemetry: bool | Telemetry | None,
    settings: TelemetrySettings | None = None,
    *,
    prometheus: Recorder | None = None,
) -> Telemetry | None:
    """What ``LoopGuard(telemetry=...)`` uses: ``None`` when everything is off.

    ``telemetry``: a ready :class:`Telemetry`, ``True``/``False``, or ``None``
    to follow the settings. ``prometheus`` (the ``--metrics`` server's metrics)
    is recorded even when OpenTelemetry output is off.
    """
    if telemetry is not None and not isinstance(telemetry, bool):
        return telemetry  # a ready Telemetry
    settings = settings if settings is not None else TelemetrySettings()
    otel = telemetry if telemetry is not None else settings.enabled
    if not otel and prometheus is None:
        return None
    from ._core import Telemetry

    return Telemetry(
        otel=otel,
        prometheus=prometheus,
        max_tool_names=settings.max_tool_names,
        max_agents=settings.max_agents,
    )
