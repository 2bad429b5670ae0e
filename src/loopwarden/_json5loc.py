"""Line numbers for the keys of a JSON5 document.

The ``json5`` package parses the document; this module only maps each key and
array element back to the line it starts on, so validation errors can say
``openclaw.json:14``. It runs only when a config has problems to report, and
tolerates anything it does not understand (the result is then just sparser).
"""

from __future__ import annotations

from typing import Any

import json5

__all__ = ["PathKey", "locate_lines"]

PathKey = tuple[str | int, ...]

_PUNCT = "{}[]:,"
_WS = " \t\r\n\ufeff\u00a0\u2028\u2029\v\f"


def _skip(text: str, i: int, line: int) -> tuple[int, int]:
    """Skip whitespace and comments; returns the new index and line."""
    n = len(text)
    while i < n:
        c = text[i]
        if c in _WS:
            if c == "\n":
                line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            stop = n if end < 0 else end + 2
            line += text.count("\n", i, stop)
            i = stop
        else:
            break
    return i, line


def _token(text: str, i: int) -> int:
    """End index of the scalar token (string, identifier, number) starting at ``i``."""
    n = len(text)
    if text[i] in "\"'":
        quote = text[i]
        j = i + 1
        while j < n and text[j] != quote:
            j += 2 if text[j] == "\\" else 1
        return min(j + 1, n)
    j = i
    while j < n and text[j] not in _PUNCT and text[j] not in _WS and text[j] != "/":
        j += 1
    return max(j, i + 1)


def _key_text(raw: str) -> str:
    if raw[:1] in "\"'":
        try:
            value = json5.loads(raw)
        except Exception:
            return raw[1:-1]
        return value if isinstance(value, str) else raw
    return raw


def locate_lines(text: str) -> dict[PathKey, int]:
    """Map each key path (and array element path) to its 1-based line."""
    lines: dict[PathKey, int] = {}
    # Each frame: [is_object, path, next_index, current_key, expecting_key]
    stack: list[list[Any]] = []
    i, line, n = 0, 1, len(text)
    try:
        while True:
            i, line = _skip(text, i, line)
            if i >= n:
                break
            c = text[i]
            top = stack[-1] if stack else None
            if c in "{[":
                path: PathKey = ()
                if top is not None:
                    path = top[1] + ((top[3],) if top[0] else (top[2],))
                    if not top[0]:
                        lines.setdefault(path, line)
                stack.append([c == "{", path, 0, None, c == "{"])
                i += 1
            elif c in "}]":
                stack.pop()
                i += 1
            elif c == ":":
                if top is not None:
                    top[4] = False
                i += 1
            elif c == ",":
                if top is not None:
                    if top[0]:
                        top[4] = True
                    else:
                        top[2] += 1
                i += 1
            else:
                end = _token(text, i)
                if top is not None and top[0] and top[4]:
                    top[3] = _key_text(text[i:end])
                    lines[top[1] + (top[3],)] = line
                elif top is not None and not top[0]:
                    lines.setdefault(top[1] + (top[2],), line)
                line += text.count("\n", i, end)
                i = end
    except Exception:
        return lines
    return lines
