"""The proxy's stdin/stdout channel: event-loop pipes, or threads for anything else."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio
import pytest

from loopwarden.integrations.mcp._stdio import _PipeLines, _ThreadLines, stdio_channel

MESSAGES = ['{"jsonrpc":"2.0","id":1,"method":"ping"}', '{"jsonrpc":"2.0","id":2,"method":"é"}']


async def _roundtrip(read_fd: int, write_fd: int) -> tuple[type, list[str]]:
    async with stdio_channel(read_fd, write_fd) as (lines, writer):
        received = [line async for line in lines]
        for message in MESSAGES:
            await writer.write(message + "\n")
            await writer.flush()
    return type(lines), received


async def test_pipes_use_the_event_loop():
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        os.write(in_write, ("\n".join(MESSAGES) + "\n").encode())
        os.close(in_write)
        kind, received = await _roundtrip(in_read, out_write)
        assert kind is _PipeLines
        assert [line.strip() for line in received] == MESSAGES
        assert os.get_blocking(in_read) and os.get_blocking(out_write)
        os.close(out_write)
        with os.fdopen(out_read, "rb") as out:
            assert out.read().decode().splitlines() == MESSAGES
    finally:
        for fd in (in_read, out_write):
            with contextlib.suppress(OSError):  # closed already when the test got that far
                os.close(fd)


async def test_files_use_threads(tmp_path: Path):
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("\n".join(MESSAGES), encoding="utf-8")  # no newline at the end
    with source.open("rb") as reader, target.open("wb") as writer:
        kind, received = await _roundtrip(reader.fileno(), writer.fileno())
    assert kind is _ThreadLines
    assert [line.strip() for line in received] == MESSAGES
    assert target.read_text(encoding="utf-8").splitlines() == MESSAGES


async def test_a_pipe_read_can_be_cancelled():
    """SIGTERM cancels the serving task: a read waiting for the client must not hold it up."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        with anyio.fail_after(5):
            async with stdio_channel(in_read, out_write) as (lines, _):
                with anyio.move_on_after(0.2) as waiting:
                    await lines.__anext__()
        assert waiting.cancelled_caught
    finally:
        for fd in (in_read, in_write, out_read, out_write):
            os.close(fd)


@pytest.mark.parametrize("size", [70_000, 3_000_000])
async def test_long_messages_pass_whole(size: int):
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    big = '{"data":"' + "x" * size + '"}'
    try:
        async with anyio.create_task_group() as tg, stdio_channel(in_read, out_write) as (lines, _):

            def feed() -> None:
                with os.fdopen(in_write, "wb") as pipe:
                    pipe.write(big.encode() + b"\n")

            tg.start_soon(anyio.to_thread.run_sync, feed)
            assert (await lines.__anext__()).strip() == big
    finally:
        for fd in (in_read, out_read, out_write):
            os.close(fd)
