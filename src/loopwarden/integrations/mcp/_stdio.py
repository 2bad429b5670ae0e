"""Serving the proxy over stdin/stdout, without a thread round trip per message.

The MCP SDK's stdio server reads each line and writes (then flushes) each
answer in an anyio worker thread: three event-loop round trips per call, each
costing hundreds of microseconds on a busy machine, and a read that SIGTERM
cannot interrupt. MCP clients start servers with pipes, so on asyncio the
channel uses the event loop's own pipe transports. Anything else (a terminal,
a file, another event loop) gets one daemon thread per direction.

One message is one line, at most ``max_line`` bytes
(:data:`DEFAULT_MAX_MESSAGE_BYTES`); a longer one is refused (see :mod:`._lines`).
"""

from __future__ import annotations

import asyncio
import os
import queue
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from ..._logging import logger
from ._lines import Splitter, TooLong, refusal

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.models import InitializationOptions

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "serve_stdio", "stdio_channel"]

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""The longest MCP message line the proxy reads from stdin (base64 images can be large)."""

_CHUNK = 65536


async def serve_stdio(
    server: Server[Any], options: InitializationOptions, *, max_line: int
) -> None:
    """Serve one client over this process's stdin/stdout until stdin closes (or cancelled)."""
    from mcp.server.stdio import stdio_server

    # The wire gets a private copy of fd 1; fd 1 itself now points at stderr,
    # so a stray print() from any library cannot corrupt the protocol.
    wire = os.dup(1)
    os.dup2(2, 1)
    try:
        async with (
            stdio_channel(0, wire, max_line=max_line) as (lines, writer),
            stdio_server(stdin=lines, stdout=writer) as (read_stream, write_stream),
        ):
            await server.run(read_stream, write_stream, options)
    finally:
        os.dup2(wire, 1)
        os.close(wire)


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def stdio_channel(
    read_fd: int, write_fd: int, *, max_line: int = DEFAULT_MAX_MESSAGE_BYTES
) -> AsyncIterator[tuple[Any, Any]]:
    """(lines, writer) for ``mcp.server.stdio.stdio_server(stdin=..., stdout=...)``.

    ``read_fd`` and ``write_fd`` stay open: the channel works on duplicates.
    A line over ``max_line`` bytes is not passed on; the channel answers it.
    """
    if max_line <= 0:
        raise ValueError(f"max_line must be positive, got {max_line!r}")
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio)
        loop = None
    if loop is not None and _is_pipe(read_fd) and _is_pipe(write_fd):
        async with _pipes(loop, read_fd, write_fd, max_line) as channel:
            yield channel
        return
    writer = _ThreadWriter(write_fd)
    lines = _ThreadLines(read_fd, Splitter(max_line), _refuser(writer, max_line))
    try:
        yield lines, writer
    finally:
        lines.close()
        writer.close()


def _refuser(
    writer: _PipeWriter | _ThreadWriter, limit: int
) -> Callable[[TooLong], Awaitable[None]]:
    async def refuse(line: TooLong) -> None:
        answer = refusal(line, limit)
        if answer is not None:
            # One write call per answer: whole lines never interleave with the SDK's.
            await writer.write(answer)
            await writer.flush()

    return refuse


@asynccontextmanager
async def _pipes(
    loop: asyncio.AbstractEventLoop, read_fd: int, write_fd: int, max_line: int
) -> AsyncIterator[tuple[_PipeLines, _PipeWriter]]:
    reader = asyncio.StreamReader(limit=_CHUNK)  # only read(): lines are cut by _Splitter
    read_file = os.fdopen(os.dup(read_fd), "rb", buffering=0)
    write_file = os.fdopen(os.dup(write_fd), "wb", buffering=0)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), read_file
    )
    write_transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, write_file
    )
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    pipe_writer = _PipeWriter(writer)
    try:
        yield _PipeLines(reader, Splitter(max_line), _refuser(pipe_writer, max_line)), pipe_writer
    finally:
        read_transport.close()
        with anyio.move_on_after(2, shield=True), suppress(Exception):
            await writer.drain()  # answers still queued go out (bounded)
        write_transport.close()
        with anyio.CancelScope(shield=True):
            for _ in range(3):  # the transports close their pipes on the next loop turns
                await anyio.lowlevel.checkpoint()
        # The pipes' O_NONBLOCK is shared with whoever else holds them.
        for fd in (read_fd, write_fd):
            with suppress(OSError):
                os.set_blocking(fd, True)


class _PipeLines:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        splitter: Splitter,
        refuse: Callable[[TooLong], Awaitable[None]],
    ) -> None:
        self._reader = reader
        self._splitter = splitter
        self._refuse = refuse
        self._ready: list[bytes | TooLong] = []  # in reverse order: pop() takes the next
        self._done = False

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            while self._ready:
                item = self._ready.pop()
                if isinstance(item, TooLong):
                    await self._refuse(item)
                else:
                    return item.decode("utf-8", "replace")
            if self._done:
                raise StopAsyncIteration
            chunk = await self._reader.read(_CHUNK)
            if chunk:
                items = self._splitter.feed(chunk)
            else:
                items, self._done = self._splitter.finish(), True
            items.reverse()
            self._ready = items


class _PipeWriter:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


class _ThreadLines:
    """stdin lines read by a daemon thread with ``os.read``.

    A daemon thread blocked in ``os.read`` (no buffered-reader lock held) can
    simply be left behind at shutdown.
    """

    def __init__(
        self, fd: int, splitter: Splitter, refuse: Callable[[TooLong], Awaitable[None]]
    ) -> None:
        self._fd = fd
        self._splitter = splitter
        self._refuse = refuse
        self._send, self._recv = anyio.create_memory_object_stream[str | TooLong](16)
        self._token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, name="lw-mcp-stdin", daemon=True).start()

    def _pump(self) -> None:
        send, token, splitter = self._send, self._token, self._splitter
        try:
            while chunk := os.read(self._fd, _CHUNK):
                for item in splitter.feed(chunk):
                    line = item if isinstance(item, TooLong) else item.decode("utf-8", "replace")
                    anyio.from_thread.run(send.send, line, token=token)
            for item in splitter.finish():
                line = item if isinstance(item, TooLong) else item.decode("utf-8", "replace")
                anyio.from_thread.run(send.send, line, token=token)
        except Exception:  # the loop is gone or stdin broke: nothing left to feed
            pass
        finally:
            with suppress(Exception):
                anyio.from_thread.run_sync(send.close, token=token)

    def __aiter__(self) -> _ThreadLines:
        return self

    def close(self) -> None:
        """Stop taking lines (a thread still blocked in ``os.read`` is left behind)."""
        self._recv.close()

    async def __anext__(self) -> str:
        while True:
            try:
                item = await self._recv.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
            if not isinstance(item, TooLong):
                return item
            await self._refuse(item)


class _ThreadWriter:
    """Writes handed to a daemon thread through a queue, in order."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._pump, name="loopwarden-mcp-stdout", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        while (data := self._queue.get()) is not None:
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:  # the client closed its end: nobody is listening
                logger.debug("loopwarden mcp-proxy: stdout closed: %s", exc)
                return

    async def write(self, text: str) -> None:
        self._queue.put(text.encode("utf-8"))

    async def flush(self) -> None:
        """Writes go out as soon as the thread gets to them."""

    def close(self, timeout: float = 2.0) -> None:
        """Let queued answers go out (bounded), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)
