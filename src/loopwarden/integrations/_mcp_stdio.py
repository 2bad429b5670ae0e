"""The proxy's stdin/stdout channel, without a thread round trip per message.

The MCP SDK's stdio server reads each line and writes (then flushes) each
answer in an anyio worker thread: three event-loop round trips per call, each
costing hundreds of microseconds on a busy machine, and a read that SIGTERM
cannot interrupt. MCP clients start servers with pipes, so on asyncio the
channel uses the event loop's own pipe transports. Anything else (a terminal,
a file, another event loop) gets one daemon thread per direction.
"""

from __future__ import annotations

import asyncio
import os
import queue
import stat
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from .._logging import logger

__all__ = ["stdio_channel"]

_MAX_LINE = 256 * 1024 * 1024  # one JSON-RPC message; base64 images can be large


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def stdio_channel(read_fd: int, write_fd: int) -> AsyncIterator[tuple[Any, Any]]:
    """(lines, writer) for ``mcp.server.stdio.stdio_server(stdin=..., stdout=...)``.

    ``read_fd`` and ``write_fd`` stay open: the channel works on duplicates.
    """
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio)
        loop = None
    if loop is not None and _is_pipe(read_fd) and _is_pipe(write_fd):
        async with _pipes(loop, read_fd, write_fd) as channel:
            yield channel
        return
    lines, writer = _ThreadLines(read_fd), _ThreadWriter(write_fd)
    try:
        yield lines, writer
    finally:
        lines.close()
        writer.close()


@asynccontextmanager
async def _pipes(
    loop: asyncio.AbstractEventLoop, read_fd: int, write_fd: int
) -> AsyncIterator[tuple[_PipeLines, _PipeWriter]]:
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    read_file = os.fdopen(os.dup(read_fd), "rb", buffering=0)
    write_file = os.fdopen(os.dup(write_fd), "wb", buffering=0)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), read_file
    )
    write_transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, write_file
    )
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    try:
        yield _PipeLines(reader), _PipeWriter(writer)
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
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


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

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._send, self._recv = anyio.create_memory_object_stream[str](16)
        self._token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, name="lw-mcp-stdin", daemon=True).start()

    def _pump(self) -> None:
        send, token = self._send, self._token
        pending = b""
        try:
            while chunk := os.read(self._fd, 65536):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)
            if pending.strip():
                anyio.from_thread.run(send.send, pending.decode("utf-8", "replace"), token=token)
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
        try:
            return await self._recv.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


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
