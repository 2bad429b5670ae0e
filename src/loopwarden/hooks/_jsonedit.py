"""Edit a JSON document in place: add or remove array items and object members while
every other byte (indentation, key order, spacing, final newline) stays as it was.

Settings files belong to the user; ``loopwarden install`` changes only its own
entries. The parser here records where each value starts and ends (it runs on
text ``json.loads`` has accepted) and also finds duplicate keys, which
``json.loads`` silently resolves to the last one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Node", "append_item", "duplicate_keys", "parse", "remove_item", "set_member"]

_WS = " \t\r\n"
_SCALAR_END = re.compile(r"[\s,\]}]")


@dataclass
class Node:
    """A JSON value and where it is in the text (``end`` is exclusive)."""

    kind: str  # "object", "array" or "scalar"
    start: int
    end: int
    items: list[Node] = field(default_factory=list)
    """Array items; for objects, the member values (same order as ``keys``)."""
    keys: list[tuple[str, int]] = field(default_factory=list)
    """Object member names and where each member (its key) starts."""

    def get(self, key: str) -> Node | None:
        """The value of the last member named ``key`` (as ``json.loads`` reads it)."""
        found = None
        for (name, _), value in zip(self.keys, self.items, strict=True):
            if name == key:
                found = value
        return found

    def index(self, key: str) -> int:
        return max(i for i, (name, _) in enumerate(self.keys) if name == key)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """Index after the string literal starting at ``i``."""
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _value(text: str, i: int) -> Node:
    i = _skip(text, i)
    c = text[i]
    if c == "{":
        node = Node("object", i, i)
        i = _skip(text, i + 1)
        if text[i] != "}":
            while True:
                key_start = i
                key_end = _string_end(text, i)
                key = json.loads(text[key_start:key_end])
                i = _skip(text, key_end) + 1  # the colon
                value = _value(text, i)
                node.keys.append((key, key_start))
                node.items.append(value)
                i = _skip(text, value.end)
                if text[i] == "}":
                    break
                i = _skip(text, i + 1)  # the comma
        node.end = i + 1
        return node
    if c == "[":
        node = Node("array", i, i)
        i = _skip(text, i + 1)
        if text[i] != "]":
            while True:
                value = _value(text, i)
                node.items.append(value)
                i = _skip(text, value.end)
                if text[i] == "]":
                    break
                i = _skip(text, i + 1)
        node.end = i + 1
        return node
    if c == '"':
        return Node("scalar", i, _string_end(text, i))
    match = _SCALAR_END.search(text, i)
    return Node("scalar", i, match.start() if match else len(text))


def parse(text: str) -> Node:
    """The tree of a valid JSON document (check it with ``json.loads`` first)."""
    return _value(text, 0)


def duplicate_keys(node: Node, path: str = "") -> list[tuple[str, int]]:
    """``(path, offset)`` of every member whose name repeats an earlier one in its object."""
    found: list[tuple[str, int]] = []
    if node.kind == "object":
        seen: set[str] = set()
        for (key, offset), value in zip(node.keys, node.items, strict=True):
            where = f"{path}.{key}" if path else key
            if key in seen:
                found.append((where, offset))
            seen.add(key)
            found += duplicate_keys(value, where)
    elif node.kind == "array":
        for index, value in enumerate(node.items):
            found += duplicate_keys(value, f"{path}[{index}]")
    return found


def _item_start(node: Node, index: int) -> int:
    return node.keys[index][1] if node.kind == "object" else node.items[index].start


def remove_item(text: str, node: Node, index: int) -> str:
    """``text`` without item ``index`` of an array or object ``node`` (and one comma)."""
    items = node.items
    if len(items) == 1:
        return text[: node.start + 1] + text[node.end - 1 :]
    if index > 0:  # from the end of the previous item: its comma and our item go
        return text[: items[index - 1].end] + text[items[index].end :]
    return text[: _item_start(node, 0)] + text[_item_start(node, 1) :]


def _line_indent(text: str, offset: int) -> str:
    line = text.rfind("\n", 0, offset) + 1
    return text[line : len(text[line:]) - len(text[line:].lstrip(" \t")) + line]


def _unit(text: str) -> str:
    """The document's indentation step (two spaces when it has none)."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            return line[: len(line) - len(stripped)]
    return "  "


def _render(value: Any, indent: str, unit: str, inline: bool) -> str:
    if inline:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


def _insert(text: str, node: Node, rendered: str, inline: bool) -> str:
    """Add ``rendered`` (an item, or ``"key": value``) as the last item of ``node``."""
    if node.items:
        last = node.items[-1]
        if inline:
            return text[: last.end] + ", " + rendered + text[last.end :]
        before = node.items[-2].end if len(node.items) > 1 else node.start + 1
        gap = text[before : _item_start(node, len(node.items) - 1)]
        gap = gap[gap.rfind("\n") :] if "\n" in gap else "\n" + _line_indent(text, last.start)
        return text[: last.end] + "," + gap + rendered + text[last.end :]
    if inline:
        return text[: node.start + 1] + rendered + text[node.end - 1 :]
    outer = _line_indent(text, node.start)
    body = "\n" + outer + _unit(text) + rendered + "\n" + outer
    return text[: node.start + 1] + body + text[node.end - 1 :]


def _layout(text: str, node: Node) -> tuple[str, str, bool]:
    """Indentation of a new item of ``node``, the indentation step, and whether the
    container is written on one line (then the new item is too)."""
    unit = _unit(text)
    one_line = "\n" not in text[node.start : node.end]
    inline = one_line and (bool(node.items) or "\n" not in text.strip())
    if node.items:
        indent = _line_indent(text, _item_start(node, len(node.items) - 1))
    else:
        indent = _line_indent(text, node.start) + unit
    return indent, unit, inline


def append_item(text: str, node: Node, value: Any) -> str:
    """``text`` with ``value`` as the last item of the array ``node``."""
    indent, unit, inline = _layout(text, node)
    return _insert(text, node, _render(value, indent, unit, inline), inline)


def set_member(text: str, node: Node, key: str, value: Any) -> str:
    """``text`` with a new member ``key`` (absent so far) as the last one of object ``node``."""
    indent, unit, inline = _layout(text, node)
    rendered = json.dumps(key, ensure_ascii=False) + ": " + _render(value, indent, unit, inline)
    return _insert(text, node, rendered, inline)
