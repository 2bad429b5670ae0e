"""Forwarding the upstreams' list-changed notifications to the proxy's clients.

An upstream says its tools, prompts or resources changed either with a
spontaneous notification (handshake-era servers) or with a
``subscriptions/listen`` event (2026-07-28 servers). The proxy lists them
again, then tells its own clients the same two ways: an event on its
subscription bus, and a notification to every handshake-era session that has
listed something.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio.abc
import mcp_types as types
from mcp.client.client import Client
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..._logging import logger
from ._upstream import reason

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mcp.server.context import ServerRequestContext

_MAX_LEGACY_SESSIONS = 256


@contextmanager
def quietly() -> Iterator[None]:
    """A client that went away cannot be told anything: log it at DEBUG, go on."""
    try:
        yield
    except Exception as exc:
        logger.debug("loopwarden mcp-proxy: could not notify a client: %s", exc)


class ChangeRelay:
    """Hears upstream changes, refreshes the proxy's listings, tells downstream clients."""

    def __init__(
        self,
        refresh_tools: Callable[[], Awaitable[None]],
        refresh_prompts: Callable[[], Awaitable[Any]],
    ) -> None:
        self._refresh_tools = refresh_tools
        self._refresh_prompts = refresh_prompts
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)  # the proxy's subscriptions/listen handler
        self._legacy_sessions: dict[str, Any] = {}
        self.tg: anyio.abc.TaskGroup | None = None  # where refreshes run (set while entered)

    def close(self) -> None:
        self.listen.close()

    async def on_upstream_message(self, message: Any) -> None:
        """An upstream client's message handler."""
        if isinstance(message, Exception):
            # Not the exception's text: a line that failed to parse is in it.
            logger.info("loopwarden mcp-proxy: upstream transport error: %s", reason(message))
            return
        if isinstance(message, types.ToolListChangedNotification):
            self._spawn(self._changed, ToolsListChanged())
        elif isinstance(message, types.PromptListChangedNotification):
            self._spawn(self._changed, PromptsListChanged())
        elif isinstance(message, types.ResourceListChangedNotification):
            self._spawn(self._changed, ResourcesListChanged())

    def _spawn(
        self, fn: Callable[[ServerEvent], Coroutine[Any, Any, None]], event: ServerEvent
    ) -> None:
        # Not awaited inline: refreshing calls the upstream from its own message handler.
        if self.tg is not None:
            self.tg.start_soon(fn, event)

    async def follow(self, client: Client) -> None:
        """Follow a 2026-07-28 upstream's change events (no spontaneous notifications there)."""
        try:
            async with client.listen(
                tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
            ) as subscription:
                async for event in subscription:
                    self._spawn(self._changed, event)
        except Exception as exc:
            logger.info("loopwarden mcp-proxy: not following upstream changes: %s", reason(exc))

    async def _changed(self, event: ServerEvent) -> None:
        try:
            if isinstance(event, ToolsListChanged):
                await self._refresh_tools()
            elif isinstance(event, PromptsListChanged):
                await self._refresh_prompts()
            await self.bus.publish(event)
            for session in list(self._legacy_sessions.values()):
                with quietly():
                    if isinstance(event, ToolsListChanged):
                        await session.send_tool_list_changed()
                    elif isinstance(event, PromptsListChanged):
                        await session.send_prompt_list_changed()
                    elif isinstance(event, ResourcesListChanged):
                        await session.send_resource_list_changed()
        except Exception:
            logger.exception("loopwarden mcp-proxy: could not forward an upstream list change")

    def remember(self, ctx: ServerRequestContext[Any, Any], key: str) -> None:
        """Keep handshake-era sessions, to forward list-changed notifications to them."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        sessions = self._legacy_sessions
        sessions.pop(key, None)
        sessions[key] = ctx.session
        if len(sessions) > _MAX_LEGACY_SESSIONS:
            sessions.pop(next(iter(sessions)))
