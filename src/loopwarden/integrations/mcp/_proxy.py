"""The proxy: an MCP server fronting upstream MCP servers, guarding their ``tools/call``.

Tools, resources and prompts of every upstream pass through (renamed with a
prefix when there are several); each ``tools/call`` goes through the guard
first (:mod:`._guarding`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError

from ..._logging import logger
from ...config import ConfigSource
from ...guard import LoopGuard
from ...stopping import OnStop
from .._base import append_note, resolve_guard
from ._changes import ChangeRelay, quietly
from ._guarding import Guarding, error_result, outcome_view, with_note
from ._http import serve_http
from ._onstop import DEFAULT_ASK_TIMEOUT_SECONDS
from ._passthrough import Passthrough, own
from ._runs import DEFAULT_RUN_IDLE_SECONDS
from ._stdio import DEFAULT_MAX_MESSAGE_BYTES, serve_stdio
from ._upstream import Link, Route, Upstream, all_pages, connect, name_links, reason

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcp.server.context import ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.server.models import InitializationOptions

__all__ = ["GuardedProxy"]

_UNKNOWN_REFRESH_INTERVAL = 2.0  # at most one tools/list refresh per this many seconds
# What a tools/call gets: a result, or loopwarden's question about a stop.
_Result = types.CallToolResult | types.InputRequiredResult


class GuardedProxy:
    """An MCP server that fronts upstream MCP servers and guards their ``tools/call``.

    Use it as an async context manager: entering connects every upstream
    (raising :class:`UpstreamError` with a clear message when one cannot be
    started or reached) and builds :attr:`server`, a low-level MCP ``Server``;
    serve it with :meth:`serve_stdio` or :meth:`serve_http`, or connect to it
    in-process with ``mcp.Client(proxy.server)``. Leaving stops the upstreams.

    Args:
        upstreams: the servers to front (:class:`Upstream`, or a bare target).
        guard: a :class:`~loopwarden.LoopGuard` or a config (path or mapping).
        name: the server name the proxy reports to its clients.
        agent_id: the agent whose per-agent config block applies.
        run_idle_seconds: a session's next call after this much idle time
            starts a new run (``None``/``0``: one run per session).
        prefix_tools: prefix tool and prompt names with ``<upstream name>__``;
            default: only when there are several upstreams.
        connect_timeout: seconds allowed for each upstream to start and initialise.
        max_message_bytes: the longest message accepted from a client: one
            stdin line (default :data:`DEFAULT_MAX_MESSAGE_BYTES`, 256 MiB), or
            one HTTP request body (default: the MCP SDK's, 4 MiB). A longer one
            is refused with an error; the proxy goes on.
        on_stop: what a stop does (``answer``, ``raise`` or ``ask``); default: the
            config's ``loopwarden.onStop``, else ``ask`` for a client that declared
            elicitation and ``answer`` for one that did not (docs/mcp.md).
        ask_timeout: seconds a person has to answer a stop (``ask``); no answer in
            time ends the run as under ``answer``.
    """

    def __init__(
        self,
        upstreams: Iterable[Upstream | StdioServerParameters | str | Server[Any] | MCPServer],
        guard: LoopGuard | ConfigSource = None,
        *,
        name: str = "loopwarden",
        agent_id: str | None = None,
        run_idle_seconds: float | None = DEFAULT_RUN_IDLE_SECONDS,
        prefix_tools: bool | None = None,
        separator: str = "__",
        connect_timeout: float = 30.0,
        max_message_bytes: int | None = None,
        on_stop: OnStop | None = None,
        ask_timeout: float = DEFAULT_ASK_TIMEOUT_SECONDS,
    ) -> None:
        self.upstreams = [u if isinstance(u, Upstream) else Upstream(u) for u in upstreams]
        if not self.upstreams:
            raise ValueError("GuardedProxy needs at least one upstream server")
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout!r}")
        if max_message_bytes is not None and max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes!r}")
        self._owns_guard = not isinstance(guard, LoopGuard)
        self.guard = resolve_guard(guard, agent_id=agent_id) if agent_id else resolve_guard(guard)
        self.name = name
        self.prefix_tools = prefix_tools
        self.separator = separator
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self._guarding = Guarding(
            self.guard, run_idle_seconds, on_stop=on_stop, ask_timeout=ask_timeout
        )
        self._links: list[Link] = []
        self._routes: dict[str, Route] = {}
        self._tools: list[types.Tool] = []
        self._tool_names: frozenset[str] | None = None
        self._last_refresh = -math.inf
        self._refresh_lock = anyio.Lock()
        self._passthrough = Passthrough(self._links, self._remember)
        self._changes = ChangeRelay(self._refresh_tools, self._passthrough.refresh_prompts)
        self._stack: AsyncExitStack | None = None
        self._closing = anyio.Event()
        self._server: Server[Any] | None = None

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> GuardedProxy:  # noqa: PYI034 - not meant to be subclassed
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._closing = anyio.Event()
            self._links.clear()  # the same list: the passthrough holds it too
            tg = await stack.enter_async_context(anyio.create_task_group())
            changes = self._changes
            changes.tg = tg
            stack.callback(self._closing.set)  # runs first: lets the upstream tasks exit
            for index, upstream in enumerate(self.upstreams):
                link = await connect(
                    tg,
                    upstream,
                    index,
                    timeout=self.connect_timeout,
                    closing=self._closing,
                    on_message=changes.on_upstream_message,
                    follow=changes.follow,
                )
                self._links.append(link)
            prefix = self.prefix_tools if self.prefix_tools is not None else len(self._links) > 1
            name_links(self._links, prefix, self.separator)
            await self._refresh_tools()
            await self._passthrough.refresh_prompts()
            self._server = self._build_server()
        except BaseException:
            self._closing.set()
            try:
                await stack.__aexit__(None, None, None)
            except BaseException as cleanup:  # the failed start again, wrapped in a group
                logger.debug("loopwarden mcp-proxy: while stopping upstreams: %r", cleanup)
            if self._owns_guard:
                self.guard.close()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        self._guarding.runs.close()
        self._changes.close()
        try:
            if stack is not None:
                await stack.__aexit__(None, None, None)
        finally:
            if self._owns_guard:
                self.guard.close()

    @property
    def server(self) -> Server[Any]:
        """The MCP server object (available inside ``async with``)."""
        if self._server is None:
            raise RuntimeError("GuardedProxy must be entered with 'async with' first")
        return self._server

    @property
    def tool_names(self) -> frozenset[str]:
        """The tool names the proxy currently exposes."""
        return self._tool_names or frozenset()

    def _build_server(self) -> Server[Any]:
        handlers: dict[str, Any] = {
            "on_list_tools": self._list_tools,
            "on_call_tool": self._call_tool,
            "on_subscriptions_listen": self._changes.listen,
        }
        passthrough = self._passthrough
        if any(link.has_resources for link in self._links):
            handlers["on_list_resources"] = passthrough.list_resources
            handlers["on_list_resource_templates"] = passthrough.list_resource_templates
            handlers["on_read_resource"] = passthrough.read_resource
        if any(link.has_prompts for link in self._links):
            handlers["on_list_prompts"] = passthrough.list_prompts
            handlers["on_get_prompt"] = passthrough.get_prompt
        instructions = self._links[0].client.instructions if len(self._links) == 1 else None
        return _ProxyServer(
            self.name,
            version=_version(),
            instructions=instructions,
            get_tool_input_schema=self._input_schema,
            **handlers,
        )

    def initialization_options(self) -> InitializationOptions:
        """Initialisation options for ``server.run`` (advertises list-changed notifications)."""
        return self.server.create_initialization_options()

    # -- serving -----------------------------------------------------------------
    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout until stdin closes (or cancelled)."""
        limit = self.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        await serve_stdio(self.server, self.initialization_options(), max_line=limit)

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        path: str = "/mcp",
        on_ready: Callable[[str], None] | None = None,
        should_exit: anyio.Event | None = None,
    ) -> None:
        """Serve streamable HTTP on ``host:port`` until ``should_exit`` is set (or cancelled).

        ``port=0`` picks a free port; ``on_ready`` receives the URL once the
        socket is listening. Binding to a non-loopback address is the
        caller's decision (the CLI refuses it unless asked explicitly).
        """
        await serve_http(
            self.server,
            host,
            port,
            path=path,
            on_ready=on_ready,
            should_exit=should_exit,
            max_body_bytes=self.max_message_bytes,
        )

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._changes.remember(ctx, self._guarding.session(ctx))

    # -- tools -----------------------------------------------------------------
    async def _refresh_tools(self, *, force: bool = True) -> None:
        async with self._refresh_lock:
            if not force and time.monotonic() - self._last_refresh < _UNKNOWN_REFRESH_INTERVAL:
                return
            routes: dict[str, Route] = {}
            tools: list[types.Tool] = []
            for link in self._links:
                if not link.has_tools:
                    continue
                try:
                    link.tools = await all_pages(link.client.list_tools, "tools")
                except Exception as exc:
                    logger.warning(
                        "loopwarden mcp-proxy: tools/list of upstream %s failed (%s); "
                        "keeping its previous tool list",
                        link.name,
                        reason(exc),
                    )
                for tool in link.tools:
                    exposed = link.prefix + tool.name
                    if exposed in routes:
                        logger.warning(
                            "loopwarden mcp-proxy: tool %r is offered twice; hiding upstream %s's",
                            exposed,
                            link.name,
                        )
                        continue
                    routes[exposed] = Route(link, tool.name, tool.input_schema)
                    tools.append(tool.model_copy(update={"name": exposed}) if link.prefix else tool)
            self._routes, self._tools = routes, tools
            self._tool_names = frozenset(routes)
            self._last_refresh = time.monotonic()

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        route = self._routes.get(name)
        return route.input_schema if route is not None else None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._remember(ctx)
        await self._refresh_tools()
        return types.ListToolsResult(tools=list(self._tools))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> _Result:
        name = params.name
        arguments = params.arguments
        guard_args: Any = arguments if arguments is not None else {}
        route = self._routes.get(name)
        if route is None:
            # A tool added upstream since the last listing is not "unknown".
            await self._refresh_tools(force=False)
            route = self._routes.get(name)
        guarding = self._guarding
        checked = None
        if params.request_state is not None:  # a person's answer to a stop, maybe
            checked = await guarding.answered(
                ctx, name, guard_args, params.request_state, params.input_responses
            )
        if checked is None:
            checked = await guarding.before(ctx, name, guard_args, self._tool_names)
        run, session, call_id, answer = checked
        if answer is not None:
            return answer
        if route is None:
            text = f"Unknown tool: {name}"
            _, stop = await guarding.after(ctx, run, session, name, guard_args, call_id, error=text)
            return stop or error_result(text)
        try:
            result = await route.link.client.call_tool(
                route.name, arguments, progress_callback=_progress_relay(ctx)
            )
        except MCPError as exc:
            return await guarding.after_rpc_error(ctx, run, session, name, guard_args, call_id, exc)
        except Exception as exc:
            text = f"upstream {route.link.name} failed to run {route.name}: {reason(exc)}"
            logger.error("loopwarden mcp-proxy: %s", text)
            note, stop = await guarding.after(
                ctx, run, session, name, guard_args, call_id, error=text
            )
            return stop or error_result(append_note(text, note))
        except BaseException:  # cancelled by the client: no outcome, but the call is over
            guarding.runs.leave(session, call_id)
            raise
        note, stop = await guarding.after(
            ctx, run, session, name, guard_args, call_id, result=outcome_view(result)
        )
        if stop is not None:
            return stop
        return with_note(own(result), note)


class _ProxyServer(Server[Any]):
    """A low-level ``Server`` that advertises list-changed notifications by default.

    The proxy forwards them from its upstreams, and streamable HTTP builds the
    handshake answer from the defaults.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(
                prompts_changed=True, resources_changed=True, tools_changed=True
            ),
            experimental_capabilities,
            extensions,
        )


def _progress_relay(ctx: ServerRequestContext[Any, Any]) -> Any:
    """Relay upstream progress to the client (a no-op for a client that did not ask for it)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        with quietly():
            await ctx.session.report_progress(progress, total, message)

    return relay


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwarden")
    except PackageNotFoundError:
        return "0+unknown"
