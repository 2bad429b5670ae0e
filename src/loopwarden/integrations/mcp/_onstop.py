"""What a stop looks like over MCP (``onStop``): the last result, the error, the question.

* ``answer``: an ``isError`` result telling the model to write its final answer (the
  core's :func:`~loopwarden.stopping.final_answer_request`), the user-visible summary
  as a second text block, and the stop's report under ``_meta.loopwarden``.
* ``raise``: a JSON-RPC error (:data:`STOP_ERROR_CODE`) whose ``data.loopwarden`` is the
  report: the client's MCP library raises it.
* ``ask``: a form elicitation (``elicitation/create``) with the three choices and a note;
  sent to the client mid-call on handshake-era sessions, or embedded in an
  ``input_required`` result on 2026-07-28 sessions.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import is_version_at_least

from ...errors import LoopAbort
from ...stopping import (
    Choice,
    StopReport,
    ask_options,
    ask_question,
    final_answer_request,
    parse_choice,
)
from .._base import stop_report

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

__all__ = [
    "ASK_KEY",
    "DEFAULT_ASK_TIMEOUT_SECONDS",
    "MAX_NOTE_CHARS",
    "STOP_ERROR_CODE",
    "TOKEN_PREFIX",
    "answer_result",
    "can_ask",
    "embeds_questions",
    "new_token",
    "note_result",
    "question_form",
    "question_request",
    "read_reply",
    "stop_error",
    "stop_text",
]

DEFAULT_ASK_TIMEOUT_SECONDS = 600.0
"""How long a person has to answer a stop (``onStop: ask``) before the run ends."""
STOP_ERROR_CODE = -32070
"""The JSON-RPC error code of a stop under ``onStop: raise`` (a server-defined code)."""
MAX_NOTE_CHARS = 4000
"""A person's note for the model is cut to this many characters."""
ASK_KEY = "loopwarden"
"""The key of loopwarden's question in an ``input_required`` result's ``inputRequests``."""
TOKEN_PREFIX = "loopwarden-ask."
"""How loopwarden's ``requestState`` starts (a server's own states never do)."""
_MODERN = "2026-07-28"  # the first revision that embeds questions in input_required results


def stop_text(exc: LoopAbort, *, run_idle_seconds: float | None = None, ran: bool = False) -> str:
    """What the model reads when the guard stopped the run (``onStop: raise``: the
    error's message)."""
    until = _until(run_idle_seconds)
    done = "This call's result is withheld" if ran else "This call was not run"
    return (
        f"{exc.message}\n\nloopwarden stopped this loop. {done}, and every further tool "
        f"call of this agent run will be refused{until}. Do not retry: stop calling tools, "
        "tell the user what you were trying to do and that it kept failing the same way."
    )


def _until(run_idle_seconds: float | None) -> str:
    return (
        f" until no tool has been called for {run_idle_seconds:g} seconds"
        if run_idle_seconds
        else ""
    )


def answer_result(
    report: StopReport, *, run_idle_seconds: float | None, ran: bool
) -> types.CallToolResult:
    """``onStop: answer``: the last result the model reads, and what the person sees."""
    done = "This call's result is withheld" if ran else "This call was not run"
    text = (
        f"{final_answer_request(report)}\n\n{done}, and every further call of this "
        f"server's tools in this agent run will be refused{_until(run_idle_seconds)}."
    )
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text=text),
            types.TextContent(type="text", text=report.summary()),
        ],
        is_error=True,
        _meta={"loopwarden": report.to_dict()},
    )


def stop_error(exc: LoopAbort, *, run_idle_seconds: float | None, ran: bool) -> MCPError:
    """``onStop: raise``: the stop as a JSON-RPC error, its report in ``data``."""
    return MCPError(
        STOP_ERROR_CODE,
        stop_text(exc, run_idle_seconds=run_idle_seconds, ran=ran),
        {"loopwarden": stop_report(exc).to_dict()},
    )


def note_result(text: str) -> types.CallToolResult:
    """``continue``: the text the model reads instead of the refused call's result.

    An ``isError`` result, as for a blocked call: the call did not run, and a client
    checks a successful result of a tool with an output schema for structured content.
    """
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def can_ask(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a person can be asked through this request's client: it declared form
    elicitation (a bare ``elicitation: {}`` counts), and the question can reach it (a
    2026-07-28 request embeds it in its result; an older one needs a channel back)."""
    caps = ctx.session.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return False
    return embeds_questions(ctx) or ctx.session.can_send_request


def embeds_questions(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request speaks 2026-07-28 or later: a question rides an
    ``input_required`` result, not a request of the server's own."""
    version = ctx.protocol_version
    return bool(version) and is_version_at_least(version, _MODERN)


def question_form(report: StopReport) -> tuple[str, dict[str, Any]]:
    """The elicitation's message and its form: a choice of the three answers (default
    ``stop``) and an optional note for the model."""
    options = ask_options()
    message = f"{ask_question(report)}\n\n{report.summary()}"
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "choice": {
                "type": "string",
                "title": "What should the agent do?",
                "enum": [option["choice"] for option in options],
                "enumNames": [option["label"] for option in options],
                "default": "stop",
            },
            "note": {
                "type": "string",
                "title": "Note for the agent",
                "description": "What the agent should do instead (read with 'continue').",
                "maxLength": MAX_NOTE_CHARS,
            },
        },
        "required": ["choice"],
    }
    return message, schema


def question_request(report: StopReport) -> types.ElicitRequest:
    """The question as an embedded ``elicitation/create`` request."""
    message, schema = question_form(report)
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def new_token() -> str:
    """A ``requestState`` for one question: unguessable, meaningful only to this proxy."""
    return TOKEN_PREFIX + secrets.token_urlsafe(24)


def read_reply(reply: object) -> tuple[Choice, str | None] | None:
    """The person's choice and note from an elicitation's answer (an ``ElicitResult`` or
    its wire form); ``None`` for decline, cancel, or anything that is not a choice."""
    if isinstance(reply, Mapping):
        try:
            reply = types.ElicitResult.model_validate(reply)
        except ValueError:
            return None
    if not isinstance(reply, types.ElicitResult) or reply.action != "accept":
        return None
    content = reply.content or {}
    choice = parse_choice(content.get("choice"))
    if choice is None:
        return None
    note = content.get("note")
    text = note.strip()[:MAX_NOTE_CHARS] if isinstance(note, str) else ""
    return choice, text or None
