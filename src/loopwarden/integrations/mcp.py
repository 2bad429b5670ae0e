"""MCP: a proxy that guards ``tools/call`` of upstream MCP servers, and a server middleware.

Requires the official ``mcp`` SDK 2.x (``pip install 'loopwarden[mcp]'``).

:class:`GuardedProxy` is an MCP server that fronts one or more upstream MCP
servers (stdio subprocesses, streamable-HTTP URLs or in-process servers). It
passes tools, resources and prompts through and runs every ``tools/call``
through the runtime guard first::

    async with GuardedProxy([Upstream.stdio("npx", ["-y", "some-mcp-server"])], config) as proxy:
        await proxy.serve_stdio()

:class:`LoopGuardMiddleware` does the same inside your own ``MCPServer``.

What the model sees: a warning is appended to the tool result as an extra text
block; a blocked call is not forwarded and is answered with an ``isError``
result that says why; when the circuit breaker stops the run, the call (and
every later call of that run) is answered with an ``isError`` result saying
the loop was stopped.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ._base import require

require("mcp", "mcp")

import anyio  # noqa: E402
import anyio.abc  # noqa: E402
import anyio.from_thread  # noqa: E402
import anyio.lowlevel  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp.client.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.server.lowlevel import NotificationOptions, Server  # noqa: E402
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp.shared.subscriptions import (  # noqa: E402
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS  # noqa: E402

from .._logging import logger  # noqa: E402
from ..config import ConfigSource  # noqa: E402
from ..errors import LoopAbort  # noqa: E402
from ..guard import LoopGuard, RunGuard  # noqa: E402
from ._base import append_note, resolve_guard  # noqa: E402
from ._mcp_runs import DEFAULT_RUN_IDLE_SECONDS, RunTable  # noqa: E402
from ._mcp_stdio import stdio_channel  # noqa: E402

if TYPE_CHECKING:
    from mcp.client._transport import Transport
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.server.models import InitializationOptions

__all__ = [
    "DEFAULT_RUN_IDLE_SECONDS",
    "GuardedProxy",
    "LoopGuardMiddleware",
    "Upstream",
    "UpstreamError",
    "stop_text",
]

_SERVER_INFO_KEY = types.SERVER_INFO_META_KEY
_MAX_PAGES = 100  # a paginator that never ends must not hang a listing
_UNKNOWN_REFRESH_INTERVAL = 2.0  # at most one tools/list refresh per this many seconds
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_T = TypeVar("_T")


class UpstreamError(RuntimeError):
    """An upstream MCP server could not be started, reached or initialised."""


@dataclass(frozen=True)
class Upstream:
    """One upstream MCP server.

    ``target`` is anything :class:`mcp.Client` accepts: ``StdioServerParameters``
    (a subprocess), a streamable-HTTP URL, an in-process ``Server``/``MCPServer``
    or a ``Transport``. ``name`` is used to prefix tool and prompt names when
    the proxy fronts several upstreams (default: the server's own name).
    """

    target: StdioServerParameters | str | Server[Any] | MCPServer | Transport
    name: str | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        inherit_env: bool = True,
    ) -> Upstream:
        """A server started as a subprocess that speaks MCP over stdin/stdout.

        With ``inherit_env`` (the default) the subprocess gets this process's
        whole environment plus ``env``: MCP clients pass API keys to the server
        they launch through the environment, and the proxy sits in between.
        """
        full_env = {**os.environ, **(env or {})} if inherit_env else dict(env or {})
        params = StdioServerParameters(
            command=command, args=list(args), env=full_env, cwd=os.fspath(cwd) if cwd else None
        )
        return cls(params, name)

    @classmethod
    def http(cls, url: str, *, name: str | None = None) -> Upstream:
        """A server reachable over streamable HTTP (``http://host:port/mcp``)."""
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"not an http(s) URL: {url!r}")
        return cls(url, name)

    def describe(self) -> str:
        target = self.target
        if isinstance(target, StdioServerParameters):
            return f"command `{shlex.join([target.command, *target.args])}`"
        if isinstance(target, str):
            return target
        return f"in-process {type(target).__name__}"


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


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _with_note(result: types.CallToolResult, note: str | None) -> types.CallToolResult:
    if not note:
        return result
    content = [*result.content, types.TextContent(type="text", text=note)]
    return result.model_copy(update={"content": content})


def _outcome_view(result: types.CallToolResult) -> dict[str, Any]:
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


def _wire_outcome_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`_outcome_view` of a result in wire form (what server middleware gets)."""
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


def _own(result: _T) -> _T:
    """Drop the upstream's ``serverInfo`` stamp: the proxy answers under its own name."""
    meta = getattr(result, "meta", None)
    if isinstance(meta, dict) and _SERVER_INFO_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != _SERVER_INFO_KEY}
        return result.model_copy(update={"meta": rest or None})  # type: ignore[attr-defined,no-any-return]
    return result


def _session_key(ctx: ServerRequestContext[Any, Any], default: str) -> str:
    """Which downstream session a request belongs to (see module ``_mcp_runs``).

    stdio and in-process: the one client of this server. Streamable HTTP: the
    ``Mcp-Session-Id`` of a stateful session; stateless requests (the
    2026-07-28 protocol has no sessions) are grouped by an
    ``X-Loopwarden-Session`` header, else by the client's name.
    """
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is None:
        return default
    sid = headers.get("mcp-session-id")
    if sid:
        return f"http:{sid[:128]}"
    explicit = headers.get("x-loopwarden-session")
    if explicit:
        return f"http-client:{explicit[:128]}"
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else "anonymous"
    return f"http-client:{name[:128]}"


@dataclass
class _Link:
    """A connected upstream."""

    upstream: Upstream
    client: Client
    name: str
    prefix: str = ""
    tools: list[types.Tool] = field(default_factory=list)
    has_tools: bool = True
    has_resources: bool = False
    has_prompts: bool = False


@dataclass(frozen=True)
class _Route:
    link: _Link
    name: str
    input_schema: dict[str, Any] | None


class _Guarding:
    """The guard around one ``tools/call``: shared by the proxy and the middleware."""

    def __init__(self, guard: LoopGuard, run_idle_seconds: float | None) -> None:
        self.guard = guard
        self.runs = RunTable(guard, run_idle_seconds=run_idle_seconds)
        self.default_session = f"mcp-{uuid.uuid4().hex[:8]}"

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
            session = _session_key(ctx, self.default_session)
            run, call_id = self.runs.enter(session, ctx.request_id, tools)
        except Exception:
            logger.exception("loopwarden: could not look up the run of an MCP call; allowing it")
            return None, session, None, None
        try:
            decision = await run.abefore_call(name, arguments, call_id=call_id)
        except LoopAbort as exc:
            self.runs.leave(session, call_id)
            return (
                run,
                session,
                call_id,
                _error_result(stop_text(exc, run_idle_seconds=self.runs.run_idle_seconds)),
            )
        if decision.blocked:
            self.runs.leave(session, call_id)
            return run, session, call_id, _error_result(decision.message or "blocked by loopwarden")
        return run, session, call_id, None

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
            return None, _error_result(
                stop_text(exc, run_idle_seconds=self.runs.run_idle_seconds, ran=True)
            )
        finally:
            self.runs.leave(session, call_id)


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
    ) -> None:
        self.upstreams = [u if isinstance(u, Upstream) else Upstream(u) for u in upstreams]
        if not self.upstreams:
            raise ValueError("GuardedProxy needs at least one upstream server")
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout!r}")
        self._owns_guard = not isinstance(guard, LoopGuard)
        self.guard = resolve_guard(guard, agent_id=agent_id) if agent_id else resolve_guard(guard)
        self.name = name
        self.prefix_tools = prefix_tools
        self.separator = separator
        self.connect_timeout = connect_timeout
        self._guarding = _Guarding(self.guard, run_idle_seconds)
        self._links: list[_Link] = []
        self._routes: dict[str, _Route] = {}
        self._tools: list[types.Tool] = []
        self._tool_names: frozenset[str] | None = None
        self._prompt_routes: dict[str, tuple[_Link, str]] = {}
        self._resource_routes: dict[str, _Link] = {}
        self._last_refresh = -math.inf
        self._refresh_lock = anyio.Lock()
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._legacy_sessions: dict[str, Any] = {}
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = anyio.Event()
        self._server: Server[Any] | None = None

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> GuardedProxy:  # noqa: PYI034 - not meant to be subclassed
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._closing = anyio.Event()
            self._links = []
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            stack.callback(self._closing.set)  # runs first: lets the upstream tasks exit
            for index, upstream in enumerate(self.upstreams):
                link = await self._start_link(tg, upstream, index)
                self._links.append(link)
            self._name_links()
            await self._refresh_tools()
            await self._refresh_prompts()
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
        self._listen.close()
        try:
            if stack is not None:
                await stack.__aexit__(None, None, None)
        finally:
            if self._owns_guard:
                self.guard.close()

    async def _start_link(self, tg: anyio.abc.TaskGroup, upstream: Upstream, index: int) -> _Link:
        try:
            client: Client = await tg.start(self._hold, upstream, index)
        except UpstreamError:
            raise
        except Exception as exc:
            raise UpstreamError(_describe_failure(upstream, exc)) from exc
        caps = client.server_capabilities
        info = client.server_info
        return _Link(
            upstream,
            client,
            name=upstream.name or (info.name if info is not None else "") or f"upstream{index + 1}",
            has_tools=caps.tools is not None,
            has_resources=caps.resources is not None,
            has_prompts=caps.prompts is not None,
        )

    async def _hold(
        self,
        upstream: Upstream,
        index: int,
        *,
        task_status: anyio.abc.TaskStatus[Client] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one upstream connection from connect to shutdown (same task throughout)."""
        client = Client(
            upstream.target,
            cache=None,  # pass listings through fresh; the downstream client caches
            message_handler=self._on_upstream_message,
        )
        started = False
        # The deadline covers connecting only; it is lifted once the client is up.
        with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
            async with client:
                scope.deadline = math.inf
                started = True
                task_status.started(client)
                async with anyio.create_task_group() as inner:
                    if _can_listen(client):
                        inner.start_soon(self._listen_upstream, client)
                    await self._closing.wait()
                    inner.cancel_scope.cancel()
        if not started:
            raise UpstreamError(
                f"upstream {upstream.describe()} did not finish MCP initialisation within "
                f"{self.connect_timeout:g} seconds"
            )

    def _name_links(self) -> None:
        prefix = self.prefix_tools if self.prefix_tools is not None else len(self._links) > 1
        seen: set[str] = set()
        for link in self._links:
            base = _NAME_CHARS.sub("_", link.name).strip("_") or "upstream"
            name, n = base, 1
            while name in seen:
                n += 1
                name = f"{base}_{n}"
            seen.add(name)
            link.name = name
            link.prefix = f"{name}{self.separator}" if prefix else ""

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
            "on_subscriptions_listen": self._listen,
        }
        if any(link.has_resources for link in self._links):
            handlers["on_list_resources"] = self._list_resources
            handlers["on_list_resource_templates"] = self._list_resource_templates
            handlers["on_read_resource"] = self._read_resource
        if any(link.has_prompts for link in self._links):
            handlers["on_list_prompts"] = self._list_prompts
            handlers["on_get_prompt"] = self._get_prompt
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

    # -- serving ---------------------------------------------------------------
    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout until stdin closes (or cancelled)."""
        from mcp.server.stdio import stdio_server

        # The wire gets a private copy of fd 1; fd 1 itself now points at stderr,
        # so a stray print() from any library cannot corrupt the protocol.
        wire = os.dup(1)
        os.dup2(2, 1)
        try:
            async with (
                stdio_channel(0, wire) as (lines, writer),
                stdio_server(stdin=lines, stdout=writer) as (read_stream, write_stream),
            ):
                await self.server.run(read_stream, write_stream, self.initialization_options())
        finally:
            os.dup2(wire, 1)
            os.close(wire)

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
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        bound = sock.getsockname()[1]
        app = self.server.streamable_http_app(streamable_http_path=path, host=host)
        config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on")
        server = _Uvicorn(config)
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}{path}")

        async def stop_when_asked() -> None:
            if should_exit is not None:
                await should_exit.wait()
                server.should_exit = True

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_when_asked)
                try:
                    await server.serve(sockets=[sock])
                finally:
                    tg.cancel_scope.cancel()
        finally:
            sock.close()

    # -- upstream events -----------------------------------------------------
    async def _on_upstream_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            logger.info("loopwarden mcp-proxy: upstream transport error: %s", message)
            return
        if isinstance(message, types.ToolListChangedNotification):
            self._spawn(self._upstream_changed, ToolsListChanged())
        elif isinstance(message, types.PromptListChangedNotification):
            self._spawn(self._upstream_changed, PromptsListChanged())
        elif isinstance(message, types.ResourceListChangedNotification):
            self._spawn(self._upstream_changed, ResourcesListChanged())

    def _spawn(
        self, fn: Callable[[ServerEvent], Coroutine[Any, Any, None]], event: ServerEvent
    ) -> None:
        # Not awaited inline: refreshing calls the upstream from its own message handler.
        if self._tg is not None:
            self._tg.start_soon(fn, event)

    async def _listen_upstream(self, client: Client) -> None:
        """Follow a 2026-07-28 upstream's change events (no spontaneous notifications there)."""
        try:
            async with client.listen(
                tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
            ) as subscription:
                async for event in subscription:
                    self._spawn(self._upstream_changed, event)
        except Exception as exc:
            logger.info("loopwarden mcp-proxy: not following upstream changes: %s", exc)

    async def _upstream_changed(self, event: ServerEvent) -> None:
        try:
            if isinstance(event, ToolsListChanged):
                await self._refresh_tools(force=True)
            elif isinstance(event, PromptsListChanged):
                await self._refresh_prompts()
            await self._bus.publish(event)
            for session in list(self._legacy_sessions.values()):
                with _quietly():
                    if isinstance(event, ToolsListChanged):
                        await session.send_tool_list_changed()
                    elif isinstance(event, PromptsListChanged):
                        await session.send_prompt_list_changed()
                    elif isinstance(event, ResourcesListChanged):
                        await session.send_resource_list_changed()
        except Exception:
            logger.exception("loopwarden mcp-proxy: could not forward an upstream list change")

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep handshake-era sessions, to forward list-changed notifications to them."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        key = _session_key(ctx, self._guarding.default_session)
        sessions = self._legacy_sessions
        sessions.pop(key, None)
        sessions[key] = ctx.session
        if len(sessions) > 256:
            sessions.pop(next(iter(sessions)))

    # -- tools -----------------------------------------------------------------
    async def _refresh_tools(self, *, force: bool = True) -> None:
        async with self._refresh_lock:
            if not force and time.monotonic() - self._last_refresh < _UNKNOWN_REFRESH_INTERVAL:
                return
            routes: dict[str, _Route] = {}
            tools: list[types.Tool] = []
            for link in self._links:
                if not link.has_tools:
                    continue
                try:
                    link.tools = await _all_pages(link.client.list_tools, "tools")
                except Exception as exc:
                    logger.warning(
                        "loopwarden mcp-proxy: tools/list of upstream %s failed (%s); "
                        "keeping its previous tool list",
                        link.name,
                        exc,
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
                    routes[exposed] = _Route(link, tool.name, tool.input_schema)
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
    ) -> types.CallToolResult:
        name = params.name
        arguments = params.arguments
        guard_args: Any = arguments if arguments is not None else {}
        route = self._routes.get(name)
        if route is None:
            # A tool added upstream since the last listing is not "unknown".
            await self._refresh_tools(force=False)
            route = self._routes.get(name)
        guarding = self._guarding
        run, session, call_id, answer = await guarding.before(
            ctx, name, guard_args, self._tool_names
        )
        if answer is not None:
            return answer
        if route is None:
            text = f"Unknown tool: {name}"
            _, stop = await guarding.after(run, session, name, guard_args, call_id, error=text)
            return stop or _error_result(text)
        try:
            result = await route.link.client.call_tool(
                route.name, arguments, progress_callback=_progress_relay(ctx)
            )
        except MCPError as exc:
            note, stop = await guarding.after(
                run, session, name, guard_args, call_id, error=exc.message
            )
            if stop is not None:
                return stop
            raise MCPError(exc.code, append_note(exc.message, note), exc.data) from None
        except Exception as exc:
            text = f"upstream {route.link.name} failed to run {route.name}: {_reason(exc)}"
            logger.error("loopwarden mcp-proxy: %s", text)
            note, stop = await guarding.after(run, session, name, guard_args, call_id, error=text)
            return stop or _error_result(append_note(text, note))
        except BaseException:  # cancelled by the client: no outcome, but the call is over
            guarding.runs.leave(session, call_id)
            raise
        note, stop = await guarding.after(
            run, session, name, guard_args, call_id, result=_outcome_view(result)
        )
        if stop is not None:
            return stop
        return _with_note(_own(result), note)

    # -- resources ---------------------------------------------------------------
    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._remember(ctx)
        resources: list[types.Resource] = []
        for link in self._links:
            if link.has_resources:
                found = await _all_pages(link.client.list_resources, "resources")
                for resource in found:
                    self._resource_routes[str(resource.uri)] = link
                resources.extend(found)
        if len(self._resource_routes) > 10_000:
            self._resource_routes.clear()
        return types.ListResourcesResult(resources=resources)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates: list[types.ResourceTemplate] = []
        for link in self._links:
            if link.has_resources:
                templates.extend(
                    await _all_pages(link.client.list_resource_templates, "resource_templates")
                )
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        known = self._resource_routes.get(uri)
        candidates = [known] if known else [link for link in self._links if link.has_resources]
        error: MCPError | None = None
        for link in candidates:
            try:
                return _own(await link.client.read_resource(uri))
            except MCPError as exc:  # templated URIs are not listed: try the next upstream
                error = exc
        if error is not None:
            raise error
        raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")

    # -- prompts -----------------------------------------------------------------
    async def _refresh_prompts(self) -> list[types.Prompt]:
        prompts: list[types.Prompt] = []
        routes: dict[str, tuple[_Link, str]] = {}
        for link in self._links:
            if not link.has_prompts:
                continue
            try:
                found = await _all_pages(link.client.list_prompts, "prompts")
            except Exception as exc:
                logger.warning(
                    "loopwarden mcp-proxy: prompts/list of %s failed: %s", link.name, exc
                )
                continue
            for prompt in found:
                exposed = link.prefix + prompt.name
                routes.setdefault(exposed, (link, prompt.name))
                prompts.append(
                    prompt.model_copy(update={"name": exposed}) if link.prefix else prompt
                )
        self._prompt_routes = routes
        return prompts

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._remember(ctx)
        return types.ListPromptsResult(prompts=await self._refresh_prompts())

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        route = self._prompt_routes.get(params.name)
        if route is None:
            await self._refresh_prompts()
            route = self._prompt_routes.get(params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        link, name = route
        return _own(await link.client.get_prompt(name, params.arguments))


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


class LoopGuardMiddleware:
    """Guard ``tools/call`` inside your own MCP server.

    ::

        mcp = MCPServer("my-server", middleware=[LoopGuardMiddleware(config)])

    ``tools`` are the registered tool names for the unknown-tool guard: a
    collection, or ``server=`` an ``MCPServer`` whose tools are listed (and
    listed again when a call names a tool that was not there before).
    """

    def __init__(
        self,
        guard: LoopGuard | ConfigSource = None,
        *,
        tools: Iterable[str] | None = None,
        server: MCPServer | None = None,
        run_idle_seconds: float | None = DEFAULT_RUN_IDLE_SECONDS,
    ) -> None:
        self.guard = resolve_guard(guard)
        self._guarding = _Guarding(self.guard, run_idle_seconds)
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
        if raw.get("requestState") is not None or raw.get("inputResponses") is not None:
            # A retry carrying the client's answers to an input request continues
            # the call checked in its first round: record its outcome, check nothing.
            session = _session_key(ctx, guarding.default_session)
            waiting_key = (session, name, _args_key(guard_args))
            run: RunGuard | None = guarding.runs.enter(session, None, tools)[0]
            call_id = self._waiting.pop(waiting_key, None)
        else:
            run, session, call_id, answer = await guarding.before(ctx, name, guard_args, tools)
            if answer is not None:
                return answer
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            note, stop = await guarding.after(
                run, session, name, guard_args, call_id, error=exc.message
            )
            if stop is not None:
                return stop
            raise MCPError(exc.code, append_note(exc.message, note), exc.data) from None
        except BaseException:
            guarding.runs.leave(session, call_id)
            raise
        if not isinstance(result, dict) or result.get("resultType") == "input_required":
            guarding.runs.leave(session, call_id)  # no outcome yet: the client must answer first
            if isinstance(result, dict) and call_id is not None:
                waiting = self._waiting
                waiting[waiting_key or (session, name, _args_key(guard_args))] = call_id
                if len(waiting) > 256:
                    waiting.pop(next(iter(waiting)))
            return result
        note, stop = await guarding.after(
            run, session, name, guard_args, call_id, result=_wire_outcome_view(result)
        )
        if stop is not None:
            return stop
        if note:
            content = result.get("content")
            blocks = list(content) if isinstance(content, list) else []
            result = {**result, "content": [*blocks, {"type": "text", "text": note}]}
        return result


# -- helpers -------------------------------------------------------------------
class _Uvicorn:
    """Built lazily (uvicorn is imported only for HTTP serving)."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextmanager
            def capture_signals(self) -> Any:
                # The caller owns signals; uvicorn would re-raise them after shutdown.
                yield

        return Server(config)


@contextmanager
def _quietly() -> Any:
    try:
        yield
    except Exception as exc:
        logger.debug("loopwarden mcp-proxy: could not notify a client: %s", exc)


def _can_listen(client: Client) -> bool:
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = client.server_capabilities
    return any(
        cap is not None and getattr(cap, "list_changed", False)
        for cap in (caps.tools, caps.prompts, caps.resources)
    )


async def _all_pages(fetch: Callable[..., Awaitable[Any]], attr: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, attr))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


def _progress_relay(ctx: ServerRequestContext[Any, Any]) -> Any:
    """Relay upstream progress to the client (a no-op for a client that did not ask for it)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        with _quietly():
            await ctx.session.report_progress(progress, total, message)

    return relay


def _args_key(arguments: Any) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(arguments)


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap failures)."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if not inner or not isinstance(inner[0], BaseException):
            return exc
        exc = inner[0]


def _reason(exc: BaseException) -> str:
    """A one-line cause, looking through exception groups."""
    exc = _innermost(exc)
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe_failure(upstream: Upstream, exc: BaseException) -> str:
    inner = _innermost(exc)
    target = upstream.target
    if isinstance(target, StdioServerParameters) and isinstance(inner, OSError):
        return f"cannot start upstream {upstream.describe()}: {inner.strerror or inner}"
    if isinstance(target, str):
        return f"cannot reach upstream MCP server at {target}: {_reason(inner)}"
    return (
        f"upstream {upstream.describe()} did not complete the MCP handshake "
        f"({_reason(inner)}); is it an MCP server speaking on stdout?"
        if isinstance(target, StdioServerParameters)
        else f"cannot connect to upstream {upstream.describe()}: {_reason(inner)}"
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwarden")
    except PackageNotFoundError:
        return "0+unknown"
