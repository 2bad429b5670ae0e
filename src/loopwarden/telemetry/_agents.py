"""Guard events in OpenAI Agents traces.

The Agents SDK traces with its own span model (``agents.tracing``), which has
no span events and is what its trace processors (OpenAI's dashboard, or an
OpenTelemetry bridge such as OpenInference's) receive. So each guard event
becomes a short ``custom`` span named ``loopwarden.<action>`` under the
current Agents span (the ``function`` span of the tool call when the guard
runs inside one), with the same attributes as the OpenTelemetry span event;
a stop also sets the error of that span.
"""

from __future__ import annotations

from agents.tracing import custom_span, get_current_span
from agents.tracing.spans import SpanError

from ..events import LoopEvent
from ._names import event_attributes, event_name, stop_code

__all__ = ["annotate"]


def annotate(event: LoopEvent) -> None:
    parent = get_current_span()
    if parent is None:
        return
    attrs = event_attributes(event)
    with custom_span(event_name(event), data=attrs, parent=parent):
        pass
    code = stop_code(event)
    if code is not None:
        parent.set_error(SpanError(message=f"loopwarden: {code}", data=attrs))
