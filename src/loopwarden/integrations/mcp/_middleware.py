"""Guarding ``tools/call`` inside your own ``MCPServer`` (no proxy)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError

from ..._logging import logger
from ...config import ConfigSource
from ...guard import LoopGuard
from ...stopping import OnStop
from .._base import resolve_guard
from ._guarding import Guarding, args_key, wire_outcome_view
from ._onstop import DEFAULT_ASK_TIMEOUT_SECONDS
from ._runs import DEFAULT_RUN_IDLE_SECONDS

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer

__all__ = ["MCPLoopGuardMiddleware"]

_UNKNOWN_REFRESH_INTERVAL = 2.0  # at most one tools/list refresh per this many seconds
_MAX_WAITING = 256  # calls waiting for the client's input, oldest dropped first


class MCPLoopGuardMiddleware:
    """Guard ``tools/call`` inside your own MCP server.

    ::

        mcp = MCPServer("my-server", middleware=[MCPLoopGuardMiddleware(config)])

    ``tools`` are the registered tool names for the unknown-tool guard: a
    collection, or ``server=`` an ``MCPServer`` whose tools are listed (and
    listed again when a call names a tool that was not there before).
    ``on_stop`` and ``ask_timeout`` are as for :class:`GuardedProxy`.
    """

    def __init__(
        self,
        guard: LoopGuard | ConfigSource = None,
        *,
        tools: Iterable[str] | None = None,
        server: MCPServer | None = None,
        run_idle_seconds: float | None = DEFAULT_RUN_IDLE_SECONDS,
        on_stop: OnStop | None = None,
        ask_timeout: float = DEFAULT_ASK_TIMEOUT_SECONDS,
    ) -> None:
        self.guard = resolve_guard(guard)
        self._guarding = Guarding(
            self.guard, run_idle_seconds, on_stop=on_stop, ask_timeout=ask_timeout
        )
        self._tools: frozenset[str] | None = frozenset(tools) if tools is not None else None
        self._server = server
        self._listed = -math.inf
        # (session, tool, args) -> call id of a call waiting for the client's input
        self._waiting: dict[tuple[str, str, str], str] = {}

    async def _tool_names(self, name: str) -> frozenset[str] | None:
        server = self._server
        if server is None:
            return self._tools
        tools = self._tools
        fresh = time.monotonic() - self._listed < _UNKNOWN_REFRESH_INTERVAL
        if tools is None or (name not in tools and not fresh):
            try:
                tools = frozenset(t.name for t in await server.list_tools())
            except Exception:
                logger.exception("loopwarden: could not list the server's tools")
                return self._tools
            self._tools, self._listed = tools, time.monotonic()
        return tools

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        raw = ctx.params or {}
        name = raw.get("name")
        if type(name) is not str:
            return await call_next(ctx)  # malformed: the SDK answers it
        arguments = raw.get("arguments")
        guard_args = arguments if arguments is not None else {}
        guarding = self._guarding
        tools = await self._tool_names(name)
        waiting_key: tuple[str, str, str] | None = None
        state = raw.get("requestState")
        checked = None
        if state is not None:  # a person's answer to a stop, maybe
            checked = await guarding.answered(
                ctx, name, guard_args, state, raw.get("inputResponses")
            )
        if checked is not None:
            run, session, call_id, answer = checked
            if answer is not None:
                return answer
            # Let run once more: the server sees the call as it was first made.
            params = {k: v for k, v in raw.items() if k not in ("requestState", "inputResponses")}
            ctx = replace(ctx, params=params)
        elif state is not None or raw.get("inputResponses") is not None:
            # A retry carrying the client's answers to an input request continues
            # the call checked in its first round: record its outcome, check nothing.
            session = guarding.session(ctx)
            waiting_key = (session, name, args_key(guard_args))
            run = guarding.runs.enter(session, None, tools)[0]
            call_id = self._waiting.pop(waiting_key, None)
        else:
            run, session, call_id, answer = await guarding.before(ctx, name, guard_args, tools)
            if answer is not None:
                return answer
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            return await guarding.after_rpc_error(ctx, run, session, name, guard_args, call_id, exc)
        except BaseException:
            guarding.runs.leave(session, call_id)
            raise
        if not isinstance(result, dict) or result.get("resultType") == "input_required":
            guarding.runs.leave(session, call_id)  # no outcome yet: the client must answer first
            if isinstance(result, dict) and call_id is not None:
                waiting = self._waiting
                waiting[waiting_key or (session, name, args_key(guard_args))] = call_id
                if len(waiting) > _MAX_WAITING:
                    waiting.pop(next(iter(waiting)))
            return result
        note, stop = await guarding.after(
            ctx, run, session, name, guard_args, call_id, result=wire_outcome_view(result)
        )
        if stop is not None:
            return stop
        if note:
            content = result.get("content")
            blocks = list(content) if isinstance(content, list) else []
            result = {**result, "content": [*blocks, {"type": "text", "text": note}]}
        return result
