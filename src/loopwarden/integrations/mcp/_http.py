"""Serving the proxy over streamable HTTP (uvicorn, imported only here)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mcp.server.lowlevel import Server


def listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket listening on ``host:port`` whose connections skip Nagle.

    asyncio sets ``TCP_NODELAY`` only on connections of a socket made with
    ``IPPROTO_TCP`` (proto 0 does not count). Without it, Nagle's algorithm
    holds the second piece of a response written in two (uvicorn writes the
    headers, then the body) until the client's delayed ACK: ~40 ms per call.
    The option is also set on the listening socket, which Linux passes on to
    the connections it accepts, for event loops that do not set it themselves.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    path: str,
    on_ready: Callable[[str], None] | None,
    should_exit: anyio.Event | None,
    max_body_bytes: int | None,
) -> None:
    """Serve ``server`` over streamable HTTP until ``should_exit`` is set (or cancelled)."""
    import uvicorn

    sock = listening_socket(host, port)
    try:
        bound = sock.getsockname()[1]
        options: dict[str, Any] = {"streamable_http_path": path, "host": host}
        if max_body_bytes is not None:
            options["max_request_body_size"] = max_body_bytes
        app = server.streamable_http_app(**options)
        config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on")
        uv = _Uvicorn(config)
        shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}{path}")

        async def stop_when_asked() -> None:
            if should_exit is not None:
                await should_exit.wait()
                uv.should_exit = True

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_when_asked)
            try:
                await uv.serve(sockets=[sock])
            finally:
                tg.cancel_scope.cancel()
    finally:
        sock.close()


class _Uvicorn:
    """A uvicorn server that leaves signals to the caller (built lazily: uvicorn is heavy)."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextmanager
            def capture_signals(self) -> Iterator[None]:
                # The caller owns signals; uvicorn would re-raise them after shutdown.
                yield

        return Server(config)
