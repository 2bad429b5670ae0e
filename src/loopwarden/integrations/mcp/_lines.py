"""Cutting the client's stdin into MCP message lines, with a bound on their length.

A line over the bound is skipped as it arrives (never held whole), answered
with a JSON-RPC error when its request id can be read from its start, and the
channel goes on with the next line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..._logging import logger

_HEAD = 4096  # bytes of an oversized line kept to find its request id
_INVALID_REQUEST = -32600


@dataclass(frozen=True)
class TooLong:
    """A line over the bound: its first bytes and its length."""

    head: bytes
    size: int


class Splitter:
    """Cuts a byte stream into lines of at most ``limit`` bytes, skipping longer ones.

    Memory stays within ``limit`` plus one chunk whatever arrives.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._skipped: int | None = None  # bytes of the oversized line seen so far
        self._head = b""

    def feed(self, chunk: bytes) -> list[bytes | TooLong]:
        items: list[bytes | TooLong] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._skipped is None and not self._buffer and end - start <= self.limit:
                items.append(chunk[start:end])  # the common case: a whole line in one chunk
            else:
                self._take(chunk, start, end)
                if self._skipped is not None:
                    items.append(TooLong(self._head, self._skipped))
                    self._skipped, self._head = None, b""
                else:
                    items.append(bytes(self._buffer))
                    self._buffer.clear()
            start = end + 1
        self._take(chunk, start, len(chunk))
        return items

    def _take(self, chunk: bytes, start: int, end: int) -> None:
        """Add ``chunk[start:end]`` (no newline in it) to the line being read."""
        size = end - start
        if self._skipped is not None:
            self._skipped += size
        elif len(self._buffer) + size > self.limit:
            kept = bytes(self._buffer[:_HEAD])
            self._head = kept + chunk[start : min(end, start + _HEAD - len(kept))]
            self._skipped = len(self._buffer) + size
            self._buffer.clear()
        elif size:
            self._buffer += chunk[start:end]

    def finish(self) -> list[bytes | TooLong]:
        """What is left at end of input: a last line without its newline."""
        if self._skipped is not None:
            return [TooLong(self._head, self._skipped)]
        rest = bytes(self._buffer)
        self._buffer.clear()
        return [rest] if rest.strip() else []


def _request_id(head: bytes) -> Any:
    """The top-level ``"id"`` of a JSON-RPC message from its first bytes (None if not there).

    Only a key at depth 1 counts: an ``"id"`` inside ``params`` belongs to the
    arguments, and answering it could fail an unrelated request.
    """
    text = head.decode("utf-8", "replace")
    depth, i, n = 0, 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            if end < 0:
                return None
            if depth == 1 and text[i + 1 : end] == "id":
                value = text[end + 1 :].lstrip()
                if value.startswith(":"):
                    decoder = json.JSONDecoder()
                    try:
                        found, _ = decoder.raw_decode(value[1:].lstrip())
                    except ValueError:
                        return None
                    return found if type(found) in (str, int) else None  # not bool
            i = end + 1
            continue
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        i += 1
    return None


def _string_end(text: str, start: int) -> int:
    """Index of the quote closing the JSON string opened at ``start`` (-1: not in ``text``)."""
    i = start + 1
    while (i := text.find('"', i)) >= 0:
        backslashes = 0
        while text[i - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return i
        i += 1
    return -1


def refusal(line: TooLong, limit: int) -> str | None:
    """The JSON-RPC error answering an oversized line (None for a notification)."""
    ident = _request_id(line.head)
    # Without an id near its start, a line naming a method is a notification.
    notification = ident is None and b'"method"' in line.head and b'"id"' not in line.head
    logger.warning(
        "loopwarden mcp-proxy: refused an MCP %s of %d bytes (the limit is %d bytes)",
        "notification" if notification else "message",
        line.size,
        limit,
    )
    if notification:
        return None  # nobody waits for an answer
    error = {
        "code": _INVALID_REQUEST,
        "message": f"message too large: {line.size} bytes, over the proxy's limit of {limit} "
        "bytes (loopwarden mcp-proxy --max-message-bytes)",
    }
    return json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}) + "\n"
