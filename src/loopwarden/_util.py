"""Small helpers shared across layers (stdlib and orjson only)."""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from typing import Any, TypeVar

import orjson

__all__ = ["BoundedDict", "bounded_set", "package_version", "parse_arguments", "printable"]

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
