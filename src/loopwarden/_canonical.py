"""Canonical serialisation and digests (SPEC section 2.1).

Two values get the same digest exactly when they are logically equal: mapping
keys are sorted, ``1`` equals ``1.0``, tuples are lists, a value that contains
itself becomes ``"[Circular]"``. Digests are SHA-256 over canonical JSON, the
same in every process and Python version.

Speed matters here (every tool call hashes its params and its result), so the
common case takes a fast path: a quick scan proves the value is plain JSON data
that orjson already serialises canonically, and only other values are
normalised in Python first. Both paths produce the same bytes for the same value.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import math
import uuid
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import orjson

__all__ = ["canonical_bytes", "digest", "to_plain"]

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_sha256 = hashlib.sha256
_Fragment = orjson.Fragment

_LEAVES = frozenset({str, int, bool, type(None)})
# orjson refuses nesting deeper than 254, and Python recursion is bounded:
# subtrees nested deeper than this are replaced by their own digest, computed
# without recursion, so equality stays exact at any depth.
_MAX_DEPTH = 100
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_CIRCULAR = "[Circular]"


def _is_plain(value: Any, depth: int = 0) -> bool:
    """True if orjson's sorted output of ``value`` is already canonical.

    Integers outside 64 bits pass the scan; orjson refuses them and the caller
    falls back to the normalising path, which is cheaper than a range check here.
    """
    t = type(value)
    if t is dict:
        if depth > _MAX_DEPTH:
            return False
        for k, v in value.items():
            if type(k) is not str:
                return False
            if type(v) in _LEAVES:
                continue
            if not _is_plain(v, depth + 1):
                return False
        return True
    if t is list:
        if depth > _MAX_DEPTH:
            return False
        for v in value:
            if type(v) in _LEAVES:
                continue
            if not _is_plain(v, depth + 1):
                return False
        return True
    if t in _LEAVES:
        return True
    if t is float:
        # Finite, non-integral floats are already canonical; 1.0, -0.0, NaN are not.
        return value - value == 0.0 and not value.is_integer()
    return False


def _int(value: int) -> Any:
    return value if _INT_MIN <= value <= _INT_MAX else _Fragment(str(value).encode())


def _float(value: float) -> Any:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer():
        return _int(int(value))
    return value


def _decimal(value: decimal.Decimal) -> Any:
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "Infinity" if value > 0 else "-Infinity"
    if value == value.to_integral_value():
        return _int(int(value))
    return _Fragment(str(value.normalize()).replace("E", "e").encode())


class _Normaliser:
    """Turns any Python value into plain JSON data (plus orjson fragments)."""

    __slots__ = ("active", "fix_surrogates")

    def __init__(self, fix_surrogates: bool = False) -> None:
        self.active: set[int] = set()
        self.fix_surrogates = fix_surrogates

    def key(self, key: Any) -> str:
        if isinstance(key, str) and not isinstance(key, enum.Enum):
            text = self.text(key)
            return text if isinstance(text, str) else "$str:" + text["$str"]
        return _dumps(self.value(key, 0), option=_SORT).decode()

    def text(self, value: str) -> Any:
        if type(value) is not str:
            value = str.__str__(value)
        if self.fix_surrogates:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raw = value.encode("utf-8", "surrogatepass")
                return {"$str": base64.b64encode(raw).decode("ascii")}
        return value

    def container(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return {"$deep": self.deep(value)}
        ident = id(value)
        if ident in self.active:
            return _CIRCULAR
        self.active.add(ident)
        try:
            if isinstance(value, Mapping):
                return self.mapping(value, depth)
            if isinstance(value, (set, frozenset)):
                items = [self.value(v, depth + 1) for v in value]
                items.sort(key=lambda item: _dumps(item, option=_SORT))
                return items
            return [self.value(v, depth + 1) for v in value]
        finally:
            self.active.discard(ident)

    def deep(self, root: Any) -> str:
        """Digest of a subtree nested beyond ``_MAX_DEPTH``, walked with an explicit stack.

        Recursing further would hit Python's recursion limit at a depth that
        depends on the caller's stack, and so give one value different digests.
        """
        parts: list[bytes] = []
        # Stack items: (0, bytes) emit, (1, value) visit, (2, id) leave a container.
        stack: list[tuple[int, Any]] = [(1, root)]
        while stack:
            op, item = stack.pop()
            if op == 0:
                parts.append(item)
                continue
            if op == 2:
                self.active.discard(item)
                continue
            value = item
            if isinstance(value, enum.Enum):
                stack.append((1, value.value))
                continue
            if value is None or isinstance(value, _DEEP_LEAVES):
                parts.append(_dumps(self.value(value, 0), option=_SORT))
                continue
            ident = id(value)
            if ident in self.active:
                parts.append(b'"[Circular]"')
                continue
            self.active.add(ident)
            stack.append((2, ident))
            if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
                stack.append((1, _object_data(value)))
                continue
            if isinstance(value, Mapping):
                items = sorted(((self.key(k), v) for k, v in value.items()), key=_first_item)
                stack.append((0, b"}"))
                for index in range(len(items) - 1, -1, -1):
                    key, child = items[index]
                    stack.append((1, child))
                    stack.append((0, (b"," if index else b"") + _dumps(key) + b":"))
                stack.append((0, b"{"))
            else:
                children = list(value)
                if isinstance(value, (set, frozenset)):
                    children.sort(key=lambda child: self.deep(child))
                stack.append((0, b"]"))
                for index in range(len(children) - 1, -1, -1):
                    stack.append((1, children[index]))
                    if index:
                        stack.append((0, b","))
                stack.append((0, b"["))
        return _sha256(b"".join(parts)).hexdigest()

    def mapping(self, value: Mapping[Any, Any], depth: int) -> Any:
        out: dict[str, Any] = {}
        collided = False
        for k, v in value.items():
            ks = self.key(k)
            if ks in out:
                collided = True
            out[ks] = self.value(v, depth + 1)
        if not collided:
            return out
        # Keys that only differ by type (1 and "1") collide as JSON keys; keep
        # every pair, in an order that does not depend on insertion order.
        pairs = [[self.key(k), self.value(v, depth + 1)] for k, v in value.items()]
        pairs.sort(key=lambda item: _dumps(item, option=_SORT))
        return {"$map": pairs}

    def value(self, value: Any, depth: int) -> Any:
        t = type(value)
        if t is str:
            return self.text(value) if self.fix_surrogates else value
        if t is bool or value is None:
            return value
        if t is int:
            return _int(value)
        if t is float:
            return _float(value)
        if t is dict or t is list or t is tuple:
            return self.container(value, depth)
        if isinstance(value, enum.Enum):
            return self.value(value.value, depth + 1)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int):  # int subclasses (bool is handled above)
            return _int(int.__index__(value))
        if isinstance(value, float):
            return _float(float(value))
        if isinstance(value, (Mapping, list, tuple, set, frozenset)):
            return self.container(value, depth)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
            return value.isoformat()
        if isinstance(value, _dt.timedelta):
            return _float(value.total_seconds())
        if isinstance(value, decimal.Decimal):
            return _decimal(value)
        if isinstance(value, (uuid.UUID, PurePath)):
            return str(value)
        if isinstance(value, complex):
            return [_float(value.real), _float(value.imag)]
        return self.obj(value, depth)

    def obj(self, value: Any, depth: int) -> Any:
        """Objects by their data: dataclasses, pydantic, attrs, numpy, others."""
        ident = id(value)
        if ident in self.active:
            return _CIRCULAR
        self.active.add(ident)
        try:
            return self.value(_object_data(value), depth + 1)
        finally:
            self.active.discard(ident)


def _first_item(pair: tuple[str, Any]) -> str:
    return pair[0]


# Values without children: ``_Normaliser.value`` serialises them as they are.
_DEEP_LEAVES = (
    str,
    bytes,
    bytearray,
    memoryview,
    int,
    float,
    complex,
    _dt.datetime,
    _dt.date,
    _dt.time,
    _dt.timedelta,
    decimal.Decimal,
    uuid.UUID,
    PurePath,
)


def _type_name(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}.{t.__qualname__}"


def _object_data(value: Any) -> Any:
    """Plain data for an arbitrary object; never a repr with a memory address."""
    try:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        fields = getattr(type(value), "model_fields", None)
        if isinstance(fields, Mapping) and hasattr(value, "model_dump"):
            data = {name: getattr(value, name, None) for name in fields}
            extra = getattr(value, "__pydantic_extra__", None)
            if isinstance(extra, Mapping):
                data.update(extra)
            return data
        attrs_fields = getattr(type(value), "__attrs_attrs__", None)
        if attrs_fields is not None:
            return {a.name: getattr(value, a.name, None) for a in attrs_fields}
        if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
            return value.tolist()
        if isinstance(value, BaseException):
            return {"$error": _type_name(value), "message": str(value)}
        if isinstance(value, type) or callable(value):
            name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
            return {"$type": _type_name(value), "name": str(name)}
        data = {}
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, Mapping):
            data.update((k, v) for k, v in attrs.items() if isinstance(k, str) and k[:1] != "_")
        for cls in type(value).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and slot[:1] != "_" and hasattr(value, slot):
                    data[slot] = getattr(value, slot)
        return {"$type": _type_name(value), "data": data}
    except Exception:
        return {"$type": _type_name(value)}


def to_plain(value: Any) -> Any:
    """Plain JSON-compatible data for ``value`` (may contain ``orjson.Fragment``)."""
    if _is_plain(value):
        return value
    return _Normaliser().value(value, 0)


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON encoding of ``value``. Never raises."""
    if _is_plain(value):
        try:
            return _dumps(value, option=_SORT)
        except Exception:  # e.g. lone surrogates or huge ints: the slow path handles them
            pass
    try:
        return _dumps(_Normaliser().value(value, 0), option=_SORT)
    except Exception:
        pass
    try:
        return _dumps(_Normaliser(fix_surrogates=True).value(value, 0), option=_SORT)
    except Exception:
        # Last resort (e.g. recursion limit on absurdly deep values): stable, never raises.
        return _dumps({"$unhashable": _type_name(value)})


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical form of ``value``. Never raises."""
    if _is_plain(value):
        try:
            return _sha256(_dumps(value, option=_SORT)).hexdigest()
        except Exception:
            pass
    return _sha256(canonical_bytes(value)).hexdigest()
