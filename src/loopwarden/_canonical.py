"""Canonical serialisation and digests: equal values, equal digests, whatever their type.

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
import collections
import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import math
import uuid
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, NamedTuple

import orjson

__all__ = ["canonical_bytes", "digest", "encodable", "to_plain"]

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
# Integers wider than this many bits (about 4,200 digits) are tagged by their hex
# digits: Python refuses (or takes quadratic time) to write them in decimal.
_MAX_INT_BITS = 14_000
# A Decimal integer with more digits than this is tagged by its own digits, not
# turned into an int (quadratic time); it then differs from the equal int.
_MAX_DECIMAL_INT_DIGITS = 4_200


def _tag(name: str, value: Any, extra: bytes = b"") -> Any:
    """A tagged value (bytes, a set of colliding keys, an object...) that no plain data
    can produce: compact JSON never has a space after a colon, a tag does (it stays
    valid JSON, for the run record)."""
    return _Fragment(b'{"' + name.encode() + b'": ' + _dumps(value, option=_SORT) + extra + b"}")


class _Tagged(NamedTuple):
    """An object's canonical form when it is not plain data: a tag and its fields."""

    name: str
    head: Any
    fields: dict[str, Any]


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


def _plain_values(value: Any, depth: int = 0) -> bool:
    """:func:`_is_plain` without the key test, for a value that orjson writes next.

    orjson refuses every dict key that is not exactly a ``str`` (without
    ``OPT_NON_STR_KEYS``), and the callers then take the normalising path, which is
    where the full scan would have sent them: the key test is orjson's (a test
    keeps it so). Only the values are scanned, a third less work per dict.
    """
    t = type(value)
    if t is dict:
        if depth > _MAX_DEPTH:
            return False
        for v in value.values():
            if type(v) in _LEAVES:
                continue
            if not _plain_values(v, depth + 1):
                return False
        return True
    if t is list:
        if depth > _MAX_DEPTH:
            return False
        for v in value:
            if type(v) in _LEAVES:
                continue
            if not _plain_values(v, depth + 1):
                return False
        return True
    if t in _LEAVES:
        return True
    if t is float:
        return value - value == 0.0 and not value.is_integer()
    return False


def _int(value: int) -> Any:
    if _INT_MIN <= value <= _INT_MAX:
        return value
    if value.bit_length() <= _MAX_INT_BITS:
        return _Fragment(str(value).encode())
    return _tag("$int", hex(value))


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
    # Exact, in linear time: trailing zeros stripped by hand (normalize() rounds to
    # the context's 28 digits, so longer values would collide).
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    end = len(digits)
    while end > 1 and digits[end - 1] == 0:
        end -= 1
    exponent += len(digits) - end
    digits = digits[:end]
    if digits == (0,):
        return 0
    if exponent >= 0:
        if end + exponent <= _MAX_DECIMAL_INT_DIGITS:
            return _int(int(value))
        return _tag("$decimal", f"{'-' if sign else ''}{''.join(map(str, digits))}e{exponent}")
    text = str(decimal.Decimal((sign, digits, exponent)))
    return _Fragment(text.replace("E", "e").encode())


class _Normaliser:
    """Turns any Python value into plain JSON data (plus orjson fragments)."""

    __slots__ = ("active", "fix_surrogates")

    def __init__(self, fix_surrogates: bool = False) -> None:
        self.active: set[int] = set()
        self.fix_surrogates = fix_surrogates

    def key(self, key: Any) -> str:
        if isinstance(key, str) and not isinstance(key, enum.Enum):
            text = self.text(key)
            if isinstance(text, str):
                return text
            raw = str.__str__(key).encode("utf-8", "surrogatepass")
            return "$str:" + base64.b64encode(raw).decode("ascii")
        return _dumps(self.value(key, 0), option=_SORT).decode()

    def text(self, value: str) -> Any:
        if type(value) is not str:
            value = str.__str__(value)
        if self.fix_surrogates:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raw = value.encode("utf-8", "surrogatepass")
                return _tag("$str", base64.b64encode(raw).decode("ascii"))
        return value

    def container(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return _tag("$deep", self.deep(value))
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
            if isinstance(value, range):
                parts.append(_dumps(self.value(value, 0), option=_SORT))
                continue
            if not isinstance(value, _CONTAINERS):
                data = _object_data(value)
                if isinstance(data, _Tagged):  # its own bytes: only compared with deep()'s
                    stack.append((1, data.fields))
                    stack.append((1, data.head))
                    stack.append((0, b"\x00" + data.name.encode()))
                else:
                    stack.append((1, data))
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
        return _tag("$map", pairs)

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
        if isinstance(value, _CONTAINERS):
            return self.container(value, depth)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return _tag("$bytes", base64.b64encode(bytes(value)).decode("ascii"))
        if isinstance(value, range):
            return _tag("$range", _range(value))
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
            data = _object_data(value)
            if isinstance(data, _Tagged):
                fields = self.value(data.fields, depth + 1)
                extra = b"," + _dumps(fields, option=_SORT)[1:-1] if data.fields else b""
                return _tag(data.name, self.value(data.head, depth + 1), extra)
            return self.value(data, depth + 1)
        finally:
            self.active.discard(ident)


def _first_item(pair: tuple[str, Any]) -> str:
    return pair[0]


_CONTAINERS = (Mapping, list, tuple, set, frozenset, collections.deque)


def _range(value: range) -> list[int]:
    """Equal ranges (the same numbers) alike: ``range(0, 6, 2) == range(0, 5, 2)``."""
    n = len(value)
    if n == 0:
        return []
    if n == 1:
        return [value.start]
    return [value.start, value.step, n]


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
            return _Tagged("$error", _type_name(value), {"message": str(value)})
        if isinstance(value, type) or callable(value):
            name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
            return _Tagged("$type", _type_name(value), {"name": str(name)})
        public: dict[str, Any] = {}
        private: dict[str, Any] = {}
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, Mapping):
            for k, v in attrs.items():
                if isinstance(k, str):
                    (private if k[:1] == "_" else public)[k] = v
        for cls in type(value).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and slot not in _NOT_STATE and hasattr(value, slot):
                    (private if slot[:1] == "_" else public)[slot] = getattr(value, slot)
        found: dict[str, Any] = {"data": public}
        # State kept in private attributes counts too: two different values must
        # never hash alike (a progressing agent would be blocked).
        if private:
            found["private"] = private
        elif not public:
            text = repr(value)  # no data to go by: the repr, unless it shows an address
            if " at 0x" not in text:
                found["repr"] = text
        return _Tagged("$type", _type_name(value), found)
    except Exception:
        return _Tagged("$type", _type_name(value), {})


_NOT_STATE = frozenset({"__weakref__", "__dict__"})


def to_plain(value: Any) -> Any:
    """Plain JSON-compatible data for ``value`` (may contain ``orjson.Fragment``).
    Never raises (a value that cannot be normalised becomes a tag naming its type)."""
    if _is_plain(value):
        return value
    try:
        return _Normaliser().value(value, 0)
    except Exception:
        return encodable(value)


def encodable(value: Any) -> Any:
    """Like :func:`to_plain`, with lone surrogates made encodable (tagged base64):
    what orjson can always write. Never raises."""
    try:
        return _Normaliser(fix_surrogates=True).value(value, 0)
    except Exception:
        return _tag("$unhashable", _type_name(value))


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON encoding of ``value``. Never raises."""
    if _plain_values(value):
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
        return _dumps(_tag("$unhashable", _type_name(value)))


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical form of ``value``. Never raises."""
    if type(value) is str or _plain_values(value):  # text: no scan to call
        try:
            return _sha256(_dumps(value, option=_SORT)).hexdigest()
        except Exception:
            pass
    return _sha256(canonical_bytes(value)).hexdigest()
