"""The proxy's stdin/stdout channel: event-loop pipes, or threads for anything else."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import anyio
import pytest

from loopwarden.integrations.mcp._lines import Splitter, TooLong, _request_id
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


# -- the bound on one message line -------------------------------------------------------------
LIMIT = 200
SHORT = ['{"jsonrpc":"2.0","id":1,"method":"ping"}', '{"jsonrpc":"2.0","id":"b","method":"ping"}']
LONG_REQUEST = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"' + "y" * 500 + '"}}'
LONG_NOTE = '{"jsonrpc":"2.0","method":"notifications/x","params":{"x":"' + "y" * 500 + '"}}'


@pytest.mark.parametrize("chunk", [1, 7, 64, 199, 200, 201, 4096])
def test_splitter_cuts_lines_and_skips_long_ones_at_any_chunking(chunk: int):
    stream = "\n".join([SHORT[0], LONG_REQUEST, SHORT[1], "z" * LIMIT, "", LONG_NOTE]) + "\n"
    stream += SHORT[0]  # a last line without its newline
    data = stream.encode()
    splitter = Splitter(LIMIT)
    items: list[bytes | TooLong] = []
    for start in range(0, len(data), chunk):
        items += splitter.feed(data[start : start + chunk])
        assert len(splitter._buffer) <= LIMIT  # never more than the bound held
    items += splitter.finish()
    lines = [item.decode() if isinstance(item, bytes) else item for item in items]
    assert lines[0] == SHORT[0] and lines[2] == SHORT[1] and lines[3] == "z" * LIMIT
    assert lines[4] == "" and lines[6] == SHORT[0] and len(lines) == 7
    for refused, text in ((lines[1], LONG_REQUEST), (lines[5], LONG_NOTE)):
        assert isinstance(refused, TooLong) and refused.size == len(text)
        assert text.encode().startswith(refused.head)


@pytest.mark.parametrize(
    ("head", "ident"),
    [
        ('{"jsonrpc":"2.0","id":7,"method":"x","params":{', 7),
        ('{"method":"x","params":{"arguments":{"id":5},"a":"\\"id\\": 9"},"id":"req-1","', "req-1"),
        ('{"jsonrpc": "2.0", "id" : -3, "method"', -3),
        ('{"method":"tools/call","params":{"id":5,"text":"aaaa', None),  # id not in the head
        ('{"id":true,"method":"x"}', None),
        ('{"id":"cut off', None),
    ],
)
def test_the_request_id_is_read_from_the_top_level_only(head: str, ident: object):
    assert _request_id(head.encode()) == ident


async def test_an_oversized_line_is_answered_and_the_channel_goes_on(tmp_path: Path):
    """Over pipes and over files: the long request gets an error under its id, the long
    notification nothing, and the lines around them pass."""
    stream = "\n".join([SHORT[0], LONG_REQUEST, LONG_NOTE, SHORT[1]]) + "\n"

    async def run(read_fd: int, write_fd: int) -> list[str]:
        async with stdio_channel(read_fd, write_fd, max_line=LIMIT) as (lines, _):
            return [line async for line in lines]

    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, stream.encode())
    os.close(in_write)
    try:
        received = await run(in_read, out_write)
        os.close(out_write)
        with os.fdopen(out_read, "rb") as out:
            piped = out.read().decode().splitlines()
    finally:
        os.close(in_read)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(stream, encoding="utf-8")
    with source.open("rb") as reader, target.open("wb") as writer:
        from_files = await run(reader.fileno(), writer.fileno())
    for lines, written in ((received, piped), (from_files, target.read_text().splitlines())):
        assert [line.strip() for line in lines] == SHORT
        assert len(written) == 1, written
        answer = json.loads(written[0])
        assert answer["id"] == 7 and answer["error"]["code"] == -32600
        assert f"{len(LONG_REQUEST)} bytes" in answer["error"]["message"]
