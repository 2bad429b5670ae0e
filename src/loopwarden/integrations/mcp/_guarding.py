"""The guard around one ``tools/call``, shared by the proxy and the server middleware.

Also what the model reads (:func:`stop_text`, error results, appended notes)
and the outcome views: the parts of an MCP tool result that decide whether two
outcomes are equal.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..._logging import logger
from ...errors import LoopAbort
from ...guard import LoopGuard, RunGuard
from .._base import append_note
from ._runs import RunTable, session_key

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

__all__ = ["stop_text"]


def stop_text(exc: LoopAbort, *, run_idle_seconds: float | None = None, ran: bool = False) -> str:
    """What the model reads when the guard stopped the run."""
    until = (
        f" until no tool has been called for {run_idle_seconds:g} seconds"
        if run_idle_seconds
        else ""
    )
    done = "This call's result is withheld" if ran else "This call was not run"
    return (
        f"{exc.message}\n\nloopwarden stopped this loop. {done}, and every further tool "
        f"call of this agent run will be refused{until}. Do not retry: stop calling tools, "
        "tell the user what you were trying to do and that it kept failing the same way."
    )


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def with_note(result: types.CallToolResult, note: str | None) -> types.CallToolResult:
    if not note:
        return result
    content = [*result.content, types.TextContent(type="text", text=note)]
    return result.model_copy(update={"content": content})


def outcome_view(result: types.CallToolResult) -> dict[str, Any]:
    """The parts of a tool result that decide whether two outcomes are equal.

    Text blocks become ``content`` and ``structuredContent`` becomes
    ``details``, as the engine expects. Images, audio and embedded resources
    have no text, so their data goes into ``details`` too: otherwise every
    image-only result would look identical (false "no progress").
    """
    texts: list[Any] = []
    others: list[Any] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append({"type": "text", "text": block.text})
        else:
            others.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
    return _view(texts, others, result.structured_content, result.is_error)


def wire_outcome_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`outcome_view` of a result in wire form (what server middleware gets)."""
    content = result.get("content")
    texts: list[Any] = []
    others: list[Any] = []
    for block in content if isinstance(content, list) else ():
        (texts if isinstance(block, dict) and block.get("type") == "text" else others).append(block)
    return _view(texts, others, result.get("structuredContent"), result.get("isError") is True)


def _view(texts: list[Any], others: list[Any], structured: Any, is_error: bool) -> dict[str, Any]:
    if isinstance(structured, dict):
        details: dict[str, Any] = structured
    else:
        details = {} if structured is None else {"structuredContent": structured}
    if others:
        details = {**details, "mcpContent": others}
    view: dict[str, Any] = {"content": texts, "details": details}
    if is_error:
        view["isError"] = True
    return view


def args_key(arguments: Any) -> str:
    """A key for a call's arguments (to pair the rounds of an input-required call)."""
    try:
        return json.dumps(arguments, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(arguments)


class Guarding:
    """The guard around one ``tools/call``: shared by the proxy and the middleware."""

    def __init__(self, guard: LoopGuard, run_idle_seconds: float | None) -> None:
        self.guard = guard
        self.runs = RunTable(guard, run_idle_seconds=run_idle_seconds)
        self.default_session = f"mcp-{uuid.uuid4().hex[:8]}"

    def session(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return session_key(ctx, self.default_session)

    async def before(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        arguments: Any,
        tools: frozenset[str] | None,
    ) -> tuple[RunGuard | None, str, str | None, types.CallToolResult | None]:
        """Check a call; returns (run, session, call id, answer-instead-of-running)."""
        session = self.default_session
        try:
            session = self.session(ctx)
            stopped = self.runs.stopped(session)
            if stopped is None:
                run, call_id = self.runs.enter(session, ctx.request_id, tools)
        except Exception:
            logger.exception("loopwarden: could not look up the run of an MCP call; allowing it")
            return None, session, None, None
        if stopped is not None:  # stopped, and pushed out of the table by other sessions
            return None, session, None, self._stopped(stopped)
        try:
            decision = await run.abefore_call(name, arguments, call_id=call_id)
        except LoopAbort as exc:
            self.runs.leave(session, call_id)
            self.runs.stop(session, exc)
            return run, session, call_id, self._stopped(exc)
        if decision.blocked:
            self.runs.leave(session, call_id)
            return run, session, call_id, error_result(decision.message or "blocked by loopwarden")
        return run, session, call_id, None

    def _stopped(self, exc: LoopAbort) -> types.CallToolResult:
        return error_result(stop_text(exc, run_idle_seconds=self.runs.run_idle_seconds))

    async def after(
        self,
        run: RunGuard | None,
        session: str,
        name: str,
        arguments: Any,
        call_id: str | None,
        **outcome: Any,
    ) -> tuple[str | None, types.CallToolResult | None]:
        """Record an outcome; returns (note to append, answer replacing the result)."""
        if run is None:
            return None, None
        try:
            return await run.aafter_call(name, arguments, call_id, **outcome), None
        except LoopAbort as exc:
            self.runs.stop(session, exc)
            return None, error_result(
                stop_text(exc, run_idle_seconds=self.runs.run_idle_seconds, ran=True)
            )
        finally:
            self.runs.leave(session, call_id)

    async def after_rpc_error(
        self,
        run: RunGuard | None,
        session: str,
        name: str,
        arguments: Any,
        call_id: str | None,
        exc: MCPError,
    ) -> types.CallToolResult:
        """Record a JSON-RPC error as the outcome: the stop answer, or the error re-raised
        with the warning appended to its message."""
        note, stop = await self.after(run, session, name, arguments, call_id, error=exc.message)
        if stop is not None:
            return stop
        raise MCPError(exc.code, append_note(exc.message, note), exc.data) from None
