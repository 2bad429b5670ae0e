"""Hostile Python values for hashing: strategies, and objects that fight back.

Importable by a subprocess (for cross-process checks), so every class here is
defined at module level and pickles.
"""

from __future__ import annotations

import collections
import datetime as dt
import ipaddress
import os
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

# CI (or anyone) can ask for a deeper search: LOOPWARDEN_ADVERSARIAL_EXAMPLES=500.
EXAMPLES = int(os.environ.get("LOOPWARDEN_ADVERSARIAL_EXAMPLES", "0") or 0)


def examples(default: int) -> settings:
    """Hypothesis settings for this suite: few examples locally, more when asked."""
    return settings(max_examples=EXAMPLES or default, deadline=None, database=None)


class Box:
    """An object whose whole state is private (like many SDK result classes)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and self._value == other._value

    def __hash__(self) -> int:
        return hash(("Box", self._value))

    def __repr__(self) -> str:
        return f"Box({self._value!r})"


class Slotted:
    """State in private slots only."""

    __slots__ = ("_a",)

    def __init__(self, a: Any) -> None:
        self._a = a

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Slotted) and self._a == other._a

    def __hash__(self) -> int:
        return hash(("Slotted", self._a))

    def __reduce__(self) -> tuple[Any, ...]:
        return Slotted, (self._a,)

    def __repr__(self) -> str:
        return f"Slotted({self._a!r})"


class Hostile:
    """Every introspection hook raises."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("__class__", "__reduce_ex__", "__reduce__"):
            return object.__getattribute__(self, name)
        raise RuntimeError(f"no {name} for you")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no equality either")

    def __hash__(self) -> int:
        return 7


class LyingArray:
    """Looks like a numpy array, but ``tolist`` raises."""

    dtype = "float64"

    def tolist(self) -> Any:
        raise MemoryError("pretend the array is too big")


def surrogate_text(max_size: int = 6) -> st.SearchStrategy[str]:
    """Text that often holds lone surrogates (which UTF-8 cannot encode)."""
    chars = st.one_of(st.characters(), st.characters(categories=["Cs"]))
    return st.text(chars, max_size=max_size)


SMALL_INTS = st.integers(min_value=-(10**30), max_value=10**30)
HUGE_INTS = st.integers(min_value=0, max_value=10**8).map(lambda n: 10**4400 + n)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False, min_value=-(10**12), max_value=10**12)

# Per type: values of that type whose Python equality is logical equality, so two
# values that are != must get different digests.
TYPED: dict[str, st.SearchStrategy[Any]] = {
    "int": SMALL_INTS,
    "float": st.floats(allow_nan=False),
    "str": surrogate_text(),
    "bytes": st.binary(max_size=8),
    "tuple": st.tuples(SMALL_INTS, surrogate_text(3)),
    "list": st.lists(st.text(max_size=3), max_size=4),
    "dict": st.dictionaries(st.text(max_size=3), SMALL_INTS, max_size=4),
    "frozenset": st.frozensets(SMALL_INTS, max_size=4),
    "datetime": st.datetimes(timezones=st.just(dt.UTC)),
    "uuid": st.uuids(),
    "decimal": DECIMALS,
    "complex": st.complex_numbers(allow_nan=False, allow_infinity=False),
}
# The types issue 11 #7 found hashing alike.
TYPED_DEFECT_7: dict[str, st.SearchStrategy[Any]] = {
    "deque": st.lists(SMALL_INTS, max_size=4).map(collections.deque),
    "fraction": st.fractions(max_denominator=10**6),
    "ip_address": st.ip_addresses(),
    "ip_network": st.ip_addresses(v=4).map(lambda a: ipaddress.ip_network(f"{a}/32")),
    "range": st.builds(range, st.integers(-50, 50), st.integers(-50, 50)),
    "private_attrs": SMALL_INTS.map(Box),
    "private_slots": surrogate_text(3).map(Slotted),
    "huge_int": HUGE_INTS.map(lambda n: [n]),
}

_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    SMALL_INTS,
    st.floats(),
    surrogate_text(),
    st.binary(max_size=8),
    DECIMALS,
    st.decimals(allow_nan=True, allow_infinity=True, places=2),
    st.fractions(max_denominator=1000),
    st.datetimes(),
    st.uuids(),
    st.complex_numbers(),
    st.ip_addresses(),
    st.builds(range, st.integers(-5, 5)),
    SMALL_INTS.map(Box),
)
_KEYS = st.one_of(surrogate_text(4), SMALL_INTS, st.booleans(), st.none(), st.tuples(SMALL_INTS))


def hostile(*, sets_of_text: bool = True) -> st.SearchStrategy[Any]:
    """Nested values of every kind: containers of mixed leaves, odd keys, sets, deques."""
    hashable = st.one_of(SMALL_INTS, surrogate_text(4) if sets_of_text else st.text(max_size=4))
    return st.recursive(
        _LEAVES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=3).map(tuple),
            st.lists(inner, max_size=3).map(collections.deque),
            st.dictionaries(_KEYS, inner, max_size=4),
            st.frozensets(hashable, max_size=4),
            st.sets(hashable, max_size=4),
        ),
        max_leaves=12,
    )
