"""Small helpers shared across layers (stdlib and orjson only)."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import OrderedDict
from typing import Any, TypeVar

import orjson

__all__ = [
    "MAX_NAME_CHARS",
    "BoundedDict",
    "bounded_set",
    "guard_text",
    "json_bytes",
    "json_value",
    "package_version",
    "parse_arguments",
    "printable",
    "valid_text",
]

MAX_NAME_CHARS = 256
"""Longest tool name, call id, run, session or agent id the guard keeps as it came
(docs/configuration.md#names-and-ids): a longer one is kept as :func:`guard_text` makes it."""
_NAME_PREFIX = 200  # what a bounded name keeps of the original, before "…" and the digest


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate written as its ``\\udXXX`` escape: valid UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def guard_text(text: str) -> str:
    """``text`` as the guard keeps a name or id: valid UTF-8, at most 256 characters.

    A lone surrogate (a JSON escape such as ``\\ud800`` decodes to one; UTF-8 cannot
    encode it, so SQLite, Redis and every JSON encoder would refuse the text) becomes
    its ``\\ud800`` escape. A text longer than :data:`MAX_NAME_CHARS` becomes its first
    200 characters, ``…`` and 32 hex digits of the SHA-256 of the whole, so names that
    differ anywhere stay apart. The same text always gives the same result, and a
    result is its own result (a replayed run record maps to the same names).
    """
    if not text.isascii():
        text = valid_text(text)
    if len(text) > MAX_NAME_CHARS:
        tag = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
        text = f"{text[:_NAME_PREFIX]}…{tag}"
    return text


# C0 and C1 controls (newlines too: a name is one line), DEL, and the Unicode
# line separators and bidirectional overrides that can disguise text.
_UNPRINTABLE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` safe for a terminal: control characters (escape sequences could retitle
    the window, clear the screen or fake output) are shown as ``\\xNN`` escapes."""
    value = text if isinstance(text, str) else str(text)
    return re.sub(_UNPRINTABLE, _escape, value)  # re caches the compiled pattern


K = TypeVar("K")
V = TypeVar("V")


@functools.cache
def package_version() -> str:
    """The installed loopwarden version, or ``0+unknown`` in a bare source tree. Read once
    per process: the package metadata is parsed whole (as long as replaying a few dozen
    calls), and a report names the version every time."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwarden")
    except PackageNotFoundError:
        return "0+unknown"


def parse_arguments(arguments: Any) -> Any:
    """Tool arguments that arrive as a JSON string, parsed so that equal calls hash equal.

    A string that is not JSON is returned unchanged.
    """
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            return orjson.loads(arguments)  # several times faster than json
        except (orjson.JSONDecodeError, TypeError):
            pass
        try:  # what orjson refuses: NaN literals, integers beyond 64 bits
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    return arguments


def json_bytes(value: Any) -> bytes:
    """``orjson.dumps(value)``; text orjson refuses (lone surrogates, which UTF-8 cannot
    encode) is written by the standard library as ``\\u`` escapes instead, so any ``str``
    a caller hands in can be stored."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def json_value(data: bytes | str) -> Any:
    """What :func:`json_bytes` wrote (orjson, or the standard library for the ``\\u``
    escapes of lone surrogates, which orjson refuses to read)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def bounded_set(table: dict[K, V], key: K, value: V, limit: int) -> None:
    """Insert into a plain dict, dropping the oldest key past ``limit`` (insertion order)."""
    table[key] = value
    if len(table) > limit:
        del table[next(iter(table))]


class BoundedDict(OrderedDict[K, V]):
    """A dict that keeps at most ``limit`` keys, dropping the least recently set first."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: K, value: V) -> None:
        if key in self:
            self.move_to_end(key)
        super().__setitem__(key, value)
        if len(self) > self.limit:
            self.popitem(last=False)
