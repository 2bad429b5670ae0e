"""The one switch: ``LoopGuard(telemetry=...)`` over the ``loopwarden.telemetry`` setting.

::

    {"loopwarden": {"telemetry": true}}
    {"loopwarden": {"telemetry": {"enabled": true, "maxToolNames": 50, "maxAgents": 20}}}

Off when absent. The setting itself is validated with the rest of the config
(:mod:`loopwarden.config.validate`); this module turns it into a :class:`Telemetry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config.model import TelemetrySettings
from ..config.validate import validate_telemetry
from ..errors import ConfigIssue

if TYPE_CHECKING:
    from ._core import Recorder, Telemetry

__all__ = ["TelemetrySettings", "parse_telemetry_setting", "resolve_telemetry"]


def parse_telemetry_setting(
    value: Any, path: str = "loopwarden.telemetry"
) -> tuple[TelemetrySettings, list[ConfigIssue]]:
    """Validate the value: a boolean, or an object of enabled, maxToolNames, maxAgents."""
    if value is None:
        return TelemetrySettings(), []
    issues: list[ConfigIssue] = []
    settings = validate_telemetry(value, tuple(path.split(".")), issues)
    return settings, issues


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
