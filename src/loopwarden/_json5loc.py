"""Line numbers for the keys of a JSON5 document, and where its first syntax error is.

:mod:`loopwarden.config.load` parses the document (a strict JSON parser
first, the ``json5`` package when that fails); this module maps each key and
array element back to the line it starts on, so validation errors can say
``openclaw.json:14`` (and a key written twice can name both lines), and finds
the line and column of a syntax error (the ``json5`` package reports the point
its parser gave up, often a token or two later: ``,,`` at column 56 came out
as column 58). :func:`locate_lines` runs only when lines are shown (problems,
``config check``), one regular-expression pass over the text (a megabyte in a
fraction of a second), and tolerates anything it does not understand (the
result is then just sparser).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import json5

__all__ = ["Duplicate", "PathKey", "SyntaxProblem", "locate_lines", "syntax_error"]

PathKey = tuple[str | int, ...]

_PUNCT = "{}[]:,"
_WS = " \t\r\n\ufeff\u00a0\u2028\u2029\v\f"


def _skip(text: str, i: int, line: int, line_start: int = 0) -> tuple[int, int, int]:
    """Skip whitespace and comments: the new index, line and index where that line starts.

    A ``/*`` comment that is never closed is not skipped (the index stays on it).
    """
    n = len(text)
    while i < n:
        c = text[i]
        if c in _WS:
            i += 1
            if c == "\n":
                line, line_start = line + 1, i
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                break
            newlines = text.count("\n", i, end)
            if newlines:
                line, line_start = line + newlines, text.rfind("\n", i, end) + 1
            i = end + 2
        else:
            break
    return i, line, line_start


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
        if "\\" not in raw:
            return raw[1:-1]
        try:
            value = json5.loads(raw)
        except Exception:
            return raw[1:-1]
        return value if isinstance(value, str) else raw
    return raw


# One token of a JSON5 text: a string (an escaped newline continues one), a comment,
# a bracket or separator, a scalar (number, literal, identifier), or any other character.
# Only run on text that parsed, so every string and comment is closed.
_TOKENS = re.compile(
    r""""(?:[^"\\]++|\\.)*+"|'(?:[^'\\]++|\\.)*+'|//[^\n]*|/\*.*?\*/|[{}\[\]:,]"""
    r"""|[^\s{}\[\]:,"'/]+|\S""",
    re.DOTALL,
)

Duplicate = tuple[PathKey, int, int]
"""A key written twice in one object: its path, the line of the earlier copy, of this one."""


def locate_lines(text: str, duplicates: list[Duplicate] | None = None) -> dict[PathKey, int]:
    """Map each key path (and array element path) to its 1-based line.

    ``duplicates``, when given, receives every key written again in the same
    object (as JSON parsers keep the last copy, so do the lines).
    """
    lines: dict[PathKey, int] = {}
    # Each frame: [is_object, path, next_index, current_key, expecting_key, keys seen: line]
    stack: list[list[Any]] = []
    line, last = 1, 0
    count = text.count
    try:
        for match in _TOKENS.finditer(text):
            start = match.start()
            line += count("\n", last, start)
            last = start
            token = match[0]
            c = token[0]
            top = stack[-1] if stack else None
            if c == "{" or c == "[":
                path: PathKey = ()
                if top is not None:
                    path = top[1] + ((top[3],) if top[0] else (top[2],))
                    if not top[0]:
                        lines.setdefault(path, line)
                stack.append([c == "{", path, 0, None, c == "{", {}])
            elif c == "}" or c == "]":
                stack.pop()
            elif c == ":":
                if top is not None:
                    top[4] = False
            elif c == ",":
                if top is not None:
                    if top[0]:
                        top[4] = True
                    else:
                        top[2] += 1
            elif c == "/" and token[1:2] in ("/", "*"):
                continue  # a comment
            elif top is not None:
                if top[0] and top[4]:
                    key = top[3] = _key_text(token)
                    seen = top[5]
                    if duplicates is not None and key in seen:
                        duplicates.append((top[1] + (key,), seen[key], line))
                    seen[key] = lines[top[1] + (key,)] = line
                elif not top[0]:
                    lines.setdefault(top[1] + (top[2],), line)
    except Exception:
        return lines
    return lines


class SyntaxProblem(NamedTuple):
    """The first syntax error of a JSON5 text: 1-based line and column, and what is wrong."""

    line: int
    column: int
    message: str


# JSON5 scalars other than strings: numbers, literals, identifiers (object keys).
_NUMBER = re.compile(
    r"[+-]?(?:Infinity|NaN|0[xX][0-9a-fA-F]+|(?:(?:0|[1-9]\d*)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
)
_LITERAL = re.compile(r"true|false|null")
_IDENTIFIER = re.compile(r"[^\W\d]|[$_]", re.UNICODE)


def syntax_error(text: str) -> SyntaxProblem | None:
    """Where ``text`` stops being JSON5 (None if this check finds nothing wrong).

    Strings, numbers, literals and identifiers are checked as tokens; ``json5``
    remains the parser, and its message is used for anything this misses.
    """
    n = len(text)
    # Each open bracket: (its char, its line); expect is what may come next:
    # "value", "value?" (value or ]), "key?" (key or }), "key", ":", "," (, or close), "end".
    stack: list[tuple[str, int]] = []
    expect = "value"
    i, line, line_start = 0, 1, 0
    last_comma: tuple[int, int] | None = None

    def at(index: int, message: str) -> SyntaxProblem:
        return SyntaxProblem(line, index - line_start + 1, message)

    while True:
        i, line, line_start = _skip(text, i, line, line_start)
        if text.startswith("/*", i):
            return at(i, "a /* comment is not closed")
        if i >= n:
            if expect == "end":
                return None
            if stack:
                bracket, opened = stack[-1]
                return at(i, f"unexpected end of input: the {bracket!r} of line {opened} is open")
            return at(i, "unexpected end of input: no value")
        c = text[i]
        comma, last_comma = last_comma, None
        if expect == "end":
            return at(i, f"unexpected {c!r} after the end of the document")
        if c == "," and expect in ("value?", "key?", "key"):
            if comma is not None:
                return SyntaxProblem(*comma, '",," (an empty entry between two commas)')
            return at(i, "unexpected ','")
        if c in "}]":
            want = "}" if stack and stack[-1][0] == "{" else "]"
            allowed = {"}": ("key?", ","), "]": ("value?", ",")}[c]
            if not stack or c != want or expect not in allowed:
                return at(i, f"unexpected {c!r}")
            stack.pop()
            i += 1
            expect = "," if stack else "end"
            continue
        if expect == ":":
            if c != ":":
                return at(i, f"expected ':' after the key, got {c!r}")
            i, expect = i + 1, "value"
            continue
        if expect == ",":
            if c != ",":
                return at(i, f"expected ',' or a closing bracket, got {c!r}")
            last_comma = (line, i - line_start + 1)
            i += 1
            expect = "key?" if stack[-1][0] == "{" else "value?"
            continue
        # a key, or a value
        if c in "\"'":
            closed = _string_end(text, i)
            if closed is None:
                return at(i, "a string is not closed on its line")
            i = closed
            expect = ":" if expect in ("key?", "key") else ("," if stack else "end")
            continue
        if expect in ("key?", "key"):
            match = _IDENTIFIER.match(text, i)
            if match is None:
                return at(i, f"expected a key, got {c!r}")
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "$_" or text[j] == "\u200c"):
                j += 1
            i, expect = j, ":"
            continue
        if c in "{[":
            stack.append((c, line))
            i += 1
            expect = "key?" if c == "{" else "value?"
            continue
        match = _NUMBER.match(text, i) or _LITERAL.match(text, i)
        end = match.end() if match else i
        if match is None or (end < n and (text[end].isalnum() or text[end] in "_$.")):
            j = i
            while j < n and text[j] not in _PUNCT and text[j] not in _WS and text[j] != "/":
                j += 1
            return at(i, f"not a value: {text[i : max(j, i + 1)][:40]!r}")
        i = end
        expect = "," if stack else "end"


def _string_end(text: str, i: int) -> int | None:
    """Index after the string starting at ``i`` (None: not closed before its line ends)."""
    quote, j, n = text[i], i + 1, len(text)
    while j < n:
        c = text[j]
        if c == quote:
            return j + 1
        if c == "\\":
            j += 2  # an escape, or a line continuation
        elif c == "\n":
            return None
        else:
            j += 1
    return None
