"""The telemetry front: one object the guard driver calls, fanning out to the recorders.

Nothing here imports OpenTelemetry or prometheus-client; the recorders that
need them are imported when a :class:`Telemetry` that uses them is created.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from .._logging import logger
from ..config.model import DEFAULT_MAX_AGENTS, DEFAULT_MAX_TOOL_NAMES
from ..events import LoopEvent
from ._names import Capped

__all__ = ["Recorder", "Telemetry"]


class Recorder(Protocol):
    """A metrics/tracing backend. Label values arrive already capped."""

    def call(self, action: str, tool: str, agent: str, seconds: float) -> None: ...

    def outcome(self, tool: str, agent: str, seconds: float) -> None: ...

    def event(self, event: LoopEvent, tool: str, agent: str) -> None: ...


class Telemetry:
    """loopwarden's OpenTelemetry and Prometheus output for one :class:`~loopwarden.LoopGuard`.

    Args:
        otel: span events on the current span and metrics through the
            OpenTelemetry API (needs ``loopwarden[otel]``); the SDK the
            application configured decides where they go.
        meter_provider: the OpenTelemetry meter provider; default: the global one.
        prometheus: Prometheus metrics to update as well (see
            :func:`loopwarden.telemetry.serve_metrics`).
        max_tool_names: distinct tool names kept as metric labels; later
            names are counted under ``_other``. Span events always carry the real name.
        max_agents: the same cap for agent ids.

    The guard driver calls :meth:`on_event` for every event (it is an
    ``EventSink``), :meth:`record_call` after each ``before_call`` and
    :meth:`record_outcome` after each ``after_call``. No method raises: a
    failing backend is logged and the agent goes on.
    """

    def __init__(
        self,
        *,
        otel: bool = True,
        meter_provider: Any = None,
        prometheus: Recorder | None = None,
        max_tool_names: int = DEFAULT_MAX_TOOL_NAMES,
        max_agents: int = DEFAULT_MAX_AGENTS,
    ) -> None:
        self._tool = Capped(max_tool_names)
        self._agent = Capped(max_agents)
        recorders: list[Recorder] = []
        if otel:
            try:
                from ._otel import OtelRecorder
            except ImportError as exc:
                raise ImportError(
                    "loopwarden telemetry needs the OpenTelemetry API; install it with: "
                    "pip install 'loopwarden[otel]'"
                ) from exc
            recorders.append(OtelRecorder(meter_provider))
        if prometheus is not None:
            recorders.append(prometheus)
        self.otel = otel
        self.recorders: tuple[Recorder, ...] = tuple(recorders)

    def _labels(self, tool: str, agent_id: str | None) -> tuple[str, str]:
        return self._tool(tool), "" if agent_id is None else self._agent(agent_id)

    def record_call(self, action: str, tool: str, agent_id: str | None, seconds: float) -> None:
        """After ``before_call``: count the call by decision (``allow``, ``warn``, ``block``).

        A call that raised a stop counts as ``block``: it was not run. For a
        ``block`` no ``after_call`` follows, so ``seconds`` (the guard's time in
        ``before_call``) is recorded as the call's guard duration.
        """
        try:
            tool_label, agent = self._labels(tool, agent_id)
            for recorder in self.recorders:
                recorder.call(action, tool_label, agent, seconds)
        except Exception:
            logger.exception("loopwarden telemetry failed to record a call")

    def record_outcome(self, tool: str, agent_id: str | None, seconds: float) -> None:
        """After ``after_call``: record the call's guard duration.

        ``seconds`` is the guard's whole time for the call: its ``before_call``
        plus this ``after_call``.
        """
        try:
            tool_label, agent = self._labels(tool, agent_id)
            for recorder in self.recorders:
                recorder.outcome(tool_label, agent, seconds)
        except Exception:
            logger.exception("loopwarden telemetry failed to record an outcome")

    def on_event(self, event: LoopEvent) -> None:
        """An ``EventSink``: span event, detection and stop counters for one guard event.

        Call it in the thread or task that made the tool call, so that the
        framework's tool span is still the current span.
        """
        try:
            tool_label, agent = self._labels(event.tool, event.agent_id)
            for recorder in self.recorders:
                recorder.event(event, tool_label, agent)
            if self.otel and "agents.tracing" in sys.modules:
                # OpenAI Agents traces with its own span model, not OTel's.
                from ._agents import annotate

                annotate(event)
        except Exception:
            logger.exception("loopwarden telemetry failed to record an event")

    __call__ = on_event
