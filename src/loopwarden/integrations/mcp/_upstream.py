"""Upstream MCP servers: what one is, holding a connection to it, saying why it failed."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from ...errors import LoopwardenError

if TYPE_CHECKING:
    from mcp.client._transport import Transport
    from mcp.client.session import MessageHandlerFnT
    from mcp.server.mcpserver import MCPServer

__all__ = ["Upstream", "UpstreamError"]

_MAX_PAGES = 100  # a paginator that never ends must not hang a listing
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_REASON_ERRORS = 3  # validation errors named in a one-line reason


class UpstreamError(LoopwardenError, RuntimeError):
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


@dataclass
class Link:
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
class Route:
    """Where an exposed tool name goes: which upstream, under which name."""

    link: Link
    name: str
    input_schema: dict[str, Any] | None


async def connect(
    tg: anyio.abc.TaskGroup,
    upstream: Upstream,
    index: int,
    *,
    timeout: float,
    closing: anyio.Event,
    on_message: MessageHandlerFnT,
    follow: Callable[[Client], Coroutine[Any, Any, None]],
) -> Link:
    """Connect ``upstream`` in a task of ``tg`` that holds it until ``closing`` is set."""
    try:
        client: Client = await tg.start(_hold, upstream, timeout, closing, on_message, follow)
    except UpstreamError:
        raise
    except Exception as exc:
        raise UpstreamError(_describe_failure(upstream, exc)) from exc
    caps = client.server_capabilities
    info = client.server_info
    return Link(
        upstream,
        client,
        name=upstream.name or (info.name if info is not None else "") or f"upstream{index + 1}",
        has_tools=caps.tools is not None,
        has_resources=caps.resources is not None,
        has_prompts=caps.prompts is not None,
    )


async def _hold(
    upstream: Upstream,
    timeout: float,
    closing: anyio.Event,
    on_message: MessageHandlerFnT,
    follow: Callable[[Client], Coroutine[Any, Any, None]],
    *,
    task_status: anyio.abc.TaskStatus[Client] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Own one upstream connection from connect to shutdown (same task throughout)."""
    target = upstream.target
    if isinstance(target, StdioServerParameters):
        target = Answering(stdio_client(target))
    elif isinstance(target, str):
        target = Answering(streamable_http_client(target))
    elif not isinstance(target, Server) and not _is_mcpserver(target):
        target = Answering(target)
    client = Client(
        target,
        cache=None,  # pass listings through fresh; the downstream client caches
        message_handler=on_message,
    )
    started = False
    # The deadline covers connecting only; it is lifted once the client is up.
    with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
        async with client:
            scope.deadline = math.inf
            started = True
            task_status.started(client)
            async with anyio.create_task_group() as inner:
                if _can_listen(client):
                    inner.start_soon(follow, client)
                await closing.wait()
                inner.cancel_scope.cancel()
    if not started:
        raise UpstreamError(
            f"upstream {upstream.describe()} did not finish MCP initialisation within "
            f"{timeout:g} seconds"
        )


def _is_mcpserver(target: object) -> bool:
    from mcp.server.mcpserver import MCPServer

    return isinstance(target, MCPServer)


class Answering:
    """A transport whose every reply to a request of ours reaches the session.

    The SDK drops a reply that is not valid JSON-RPC (an error code that is a
    string or a float, an error without a message, ``error: null``, ``result:
    null``, a list result...), and the request it answers would wait forever.
    Here such a reply becomes a JSON-RPC error for that request id, naming only
    where the reply is invalid (never its content).
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _AnsweringReads(read), write

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._inner.__aexit__(*exc)  # type: ignore[no-any-return]


class _AnsweringReads:
    """The read stream of :class:`Answering`: invalid replies turned into errors."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # last_context and the like
        return getattr(self._inner, name)

    async def receive(self) -> SessionMessage | Exception:
        return _answer(await self._inner.receive())

    def __aiter__(self) -> _AnsweringReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return _answer(await self._inner.__anext__())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._inner.__aexit__(*exc)  # type: ignore[no-any-return]


def _answer(item: SessionMessage | Exception) -> SessionMessage | Exception:
    if not isinstance(item, ValidationError):
        return item
    ident = _reply_id(item)
    if ident is None:
        return item
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message=f"the upstream MCP server sent an invalid reply to this request ({reason(item)})",
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


def _reply_id(exc: ValidationError) -> str | int | None:
    """The id of the reply that failed validation: pydantic reports the whole message as
    the input of a missing field (``method``, which no reply has; a message with an id
    and no method can only be a reply)."""
    for error in exc.errors(include_url=False, include_context=False):
        found = error.get("input")
        if isinstance(found, dict) and "method" not in found:
            ident = found.get("id")
            if type(ident) in (str, int):  # not a bool, not a float
                return ident
    return None


def name_links(links: Sequence[Link], prefix: bool, separator: str) -> None:
    """Give each link a unique, name-safe name, and its tool prefix when ``prefix``."""
    seen: set[str] = set()
    for link in links:
        base = _NAME_CHARS.sub("_", link.name).strip("_") or "upstream"
        name, n = base, 1
        while name in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name)
        link.name = name
        link.prefix = f"{name}{separator}" if prefix else ""


def _can_listen(client: Client) -> bool:
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = client.server_capabilities
    return any(
        cap is not None and getattr(cap, "list_changed", False)
        for cap in (caps.tools, caps.prompts, caps.resources)
    )


async def all_pages(fetch: Callable[..., Awaitable[Any]], attr: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, attr))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


def innermost(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap failures)."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if not inner or not isinstance(inner[0], BaseException):
            return exc
        exc = inner[0]


def reason(exc: BaseException) -> str:
    """A one-line cause, looking through exception groups; never the data that failed.

    A pydantic ``ValidationError`` (an upstream answer that is not valid MCP)
    prints the offending values, which are tool results and arguments: name
    only where and how they are invalid.
    """
    exc = innermost(exc)
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        where = "; ".join(
            f"{'.'.join(str(part)[:40] for part in error['loc']) or 'value'}: {error['type']}"
            for error in errors[:_MAX_REASON_ERRORS]
        )
        extra = len(errors) - _MAX_REASON_ERRORS
        more = f" (+{extra} more)" if extra > 0 else ""
        return f"invalid {exc.title} ({where}{more})"
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe_failure(upstream: Upstream, exc: BaseException) -> str:
    inner = innermost(exc)
    target = upstream.target
    if isinstance(target, StdioServerParameters) and isinstance(inner, OSError):
        return f"cannot start upstream {upstream.describe()}: {inner.strerror or inner}"
    if isinstance(target, str):
        return f"cannot reach upstream MCP server at {target}: {reason(inner)}"
    return (
        f"upstream {upstream.describe()} did not complete the MCP handshake "
        f"({reason(inner)}); is it an MCP server speaking on stdout?"
        if isinstance(target, StdioServerParameters)
        else f"cannot connect to upstream {upstream.describe()}: {reason(inner)}"
    )
