"""Hostile values into hashing: never raises, bounded, deterministic, exact.

SPEC section 2: digests are equal exactly when the values are logically equal,
never raise, and are the same in every process. Issue 11, defects 6 and 7.
Everything goes through the public ``args_hash``/``hash_outcome`` and the guard.
"""

from __future__ import annotations

import collections
import copy
import fractions
import ipaddress
import pickle
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwarden as lw
from tests.adversarial._procs import run_bounded
from tests.adversarial._values import (
    TYPED,
    TYPED_DEFECT_7,
    Box,
    Hostile,
    LyingArray,
    examples,
    hostile,
)

ROOT = Path(__file__).resolve().parents[2]


def sig(value: Any) -> str:
    return lw.args_hash("tool", value)


# -- never raises ------------------------------------------------------------------------
@examples(150)
@given(hostile())
def test_hashing_never_raises(value: Any) -> None:
    """Any value gets an args hash and an outcome hash, as params and as a result."""
    assert sig(value).startswith("tool:")
    outcome = lw.hash_outcome("tool", value, result=value)
    assert isinstance(outcome.hash, str)
    if value is not None:  # error=None means "no error" (SPEC 2.3)
        assert lw.hash_outcome("tool", value, error=value).is_error


def _deep(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def _cycle() -> Any:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = [loop, {"again": loop}]
    return loop


FIGHTERS = {
    "raising-introspection": lambda: {"x": Hostile()},
    "lying-array": lambda: [LyingArray()],
    "cycle": _cycle,
    "nested-5000": lambda: _deep(5000),
    "set-of-hostile": lambda: {Hostile(), 1},
    "mixed-keys": lambda: {1: "a", "1": "b", (1,): "c", None: "d", 2.5: "e", frozenset({1}): "f"},
}


@pytest.mark.parametrize("name", sorted(FIGHTERS))
def test_objects_that_fight_back_are_hashed(name: str) -> None:
    """Objects whose hooks raise, cycles and absurd nesting hash without raising, stably."""
    value = FIGHTERS[name]()
    assert sig(value) == sig(value)
    assert isinstance(lw.hash_outcome("tool", {}, result=value).hash, str)


def test_guard_survives_objects_that_fight_back() -> None:
    """The runtime guard allows calls whose params and results fight back, and never raises."""
    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    run = guard.run("fighters")
    for n, make in enumerate(FIGHTERS.values()):
        value = make()
        assert run.before_call("tool", value, call_id=f"c{n}").allowed
        assert run.after_call("tool", value, call_id=f"c{n}", result=value) is None


# -- deterministic across processes --------------------------------------------------------
_DIGEST_IN_CHILD = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
import loopwarden as lw
values = pickle.load(sys.stdin.buffer)
sys.stdout.write("\\n".join(lw.args_hash("tool", v) for v in values))
"""


def test_digests_are_the_same_in_another_process() -> None:
    """Digests of hostile values do not depend on the process (hash seed, ids, set order)."""
    seen: list[tuple[bytes, str]] = []

    @examples(120)
    @given(hostile())
    def collect(value: Any) -> None:
        try:
            blob = pickle.dumps(value)
        except Exception:  # e.g. a value that cannot be pickled: not this test's subject
            return
        seen.append((blob, sig(value)))

    collect()
    values = [pickle.loads(blob) for blob, _ in seen]
    ran = run_bounded(
        [sys.executable, "-c", _DIGEST_IN_CHILD, str(ROOT)],
        stdin=pickle.dumps(values),
        env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "12345"},
        timeout=120,
    )
    assert ran.code == 0, ran.err
    theirs = ran.out.split("\n")
    assert theirs == [digest for _, digest in seen]


# -- equal values, equal digests ---------------------------------------------------------------
@examples(150)
@given(hostile())
def test_equal_values_get_equal_digests(value: Any) -> None:
    """A copy, a pickle round trip and a re-ordered mapping of a value share its digest."""
    expected = sig(value)
    assert sig(copy.deepcopy(value)) == expected
    assert sig(pickle.loads(pickle.dumps(value))) == expected
    if isinstance(value, dict):
        assert sig(dict(reversed(list(value.items())))) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (0.0, -0.0),
        ((1, "a"), [1, "a"]),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}),
        (frozenset({3, 1, 2}), {2, 3, 1}),
        (collections.deque([1, 2]), collections.deque([1, 2])),
        (fractions.Fraction(2, 4), fractions.Fraction(1, 2)),
        (ipaddress.ip_address("::1"), ipaddress.ip_address("0::1")),
        (Box([1, 2]), Box([1, 2])),
        (range(0, 6, 2), range(0, 5, 2)),
    ],
    ids=repr,
)
def test_logically_equal_values_share_a_digest(a: Any, b: Any) -> None:
    """Values that are logically equal (SPEC 2.1) hash alike."""
    assert sig(a) == sig(b)


# -- distinct values, distinct digests -----------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(TYPED))
def test_distinct_values_get_distinct_digests(kind: str) -> None:
    """Two different values of one type never share a digest."""

    @examples(80)
    @given(TYPED[kind], TYPED[kind])
    def check(a: Any, b: Any) -> None:
        if a != b:
            assert sig(a) != sig(b), (a, b)
        else:
            assert sig(a) == sig(b), (a, b)

    check()


@pytest.mark.parametrize("kind", sorted(TYPED_DEFECT_7))
def test_distinct_values_of_odd_types_get_distinct_digests(kind: str) -> None:
    """Deques, fractions, IP addresses, ranges, huge ints and objects with private state:
    two different values never share a digest."""

    @examples(40)
    @given(TYPED_DEFECT_7[kind], TYPED_DEFECT_7[kind])
    def check(a: Any, b: Any) -> None:
        if a != b:
            assert sig(a) != sig(b), (a, b)

    check()


ODD_PROGRESS = {
    "deque": lambda n: collections.deque([n]),
    "fraction": lambda n: fractions.Fraction(n, 7),
    "ip_address": lambda n: ipaddress.ip_address(n + 1),
    "range": lambda n: range(n),
    "private_attrs": Box,
    "huge_int": lambda n: {"v": 10**4400 + n, "page": 1},
}


@pytest.mark.parametrize("kind", sorted(ODD_PROGRESS))
def test_progressing_agent_with_odd_values_is_never_blocked(kind: str) -> None:
    """An agent whose params and results change on every call (as such values) is never
    blocked nor stopped, with the default thresholds."""
    make = ODD_PROGRESS[kind]
    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    run = guard.run(kind)
    actions = []
    for n in range(35):
        params = {"cursor": make(n)}
        decision = run.before_call("fetch", params, call_id=f"c{n}")
        actions.append(decision.action)
        if not decision.blocked:
            run.after_call("fetch", params, call_id=f"c{n}", result={"page": make(n + 1000)})
    assert "block" not in actions


@pytest.mark.parametrize(
    ("value", "mimic"),
    [
        (b"a", {"$bytes": "YQ=="}),
        ("\ud800", {"$str": "7aCA"}),
    ],
    ids=["bytes", "surrogate"],
)
def test_tagged_forms_do_not_collide_with_plain_mappings(value: Any, mimic: Any) -> None:
    """A plain mapping that happens to look like the canonical tag of another value (a tool
    result can be anything) does not share that value's digest."""
    assert sig(value) != sig(mimic)


# -- defect 6: bounded time ----------------------------------------------------------------------
_HUGE_DECIMAL = """
import decimal, sys
sys.path.insert(0, sys.argv[1])
import loopwarden as lw
big = decimal.Decimal("1e400000")
run = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}).run("r")
print(run.before_call("t", {"x": big}).action)
run.after_call("t", {"x": big}, result=big)
print(lw.args_hash("t", big) != lw.args_hash("t", decimal.Decimal("1e400001")))
"""


def test_huge_decimal_is_hashed_in_bounded_time() -> None:
    """A Decimal with a huge exponent is hashed in well under 2 s of CPU (the child is
    killed by RLIMIT_CPU after 2 s; today each digest takes seconds)."""
    ran = run_bounded([sys.executable, "-c", _HUGE_DECIMAL, str(ROOT)], max_cpu=2, timeout=120)
    assert ran.code == 0, f"exit {ran.code} (-24: out of CPU time) {ran.err[-500:]}"
    assert ran.out.split() == ["allow", "True"]


def test_decimal_digests_follow_their_value() -> None:
    """Decimals hash by value: equal values alike (1.0 and 1), different values apart."""
    import decimal

    assert sig(decimal.Decimal("1.0")) == sig(decimal.Decimal("1")) == sig(1)
    assert sig(decimal.Decimal("1e5")) == sig(100000)
    assert sig(decimal.Decimal("1.5")) != sig(decimal.Decimal("1.50001"))
    # More digits than the decimal context's 28: still told apart, still equal to itself.
    long_a = decimal.Decimal("1." + "0" * 40 + "1")
    long_b = decimal.Decimal("1." + "0" * 40 + "2")
    assert sig(long_a) != sig(long_b)
    assert sig(long_a) == sig(decimal.Decimal(str(long_a) + "000"))
    # Integral decimals up to 4,200 digits equal the int they are.
    assert sig(decimal.Decimal("1e4000")) == sig(10**4000)


def test_hostile_values_pass_through_json_record(tmp_path: Path) -> None:
    """Hostile params and results never break the run record (without logParams)."""
    record = tmp_path / "record.jsonl"
    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}, run_record=record)
    run = guard.run("r")

    @examples(60)
    @given(st.integers(0, 10**6), hostile())
    def step(n: int, value: Any) -> None:
        try:
            decision = run.before_call("tool", value, call_id=f"c{n}")
            if not decision.blocked:
                run.after_call("tool", value, call_id=f"c{n}", result=value)
        except lw.LoopAbort:
            pass  # hypothesis repeats small values: a loop it is, and the run stops

    step()
    guard.close()
    lines = record.read_bytes().splitlines()
    assert lines and all(isinstance(orjson.loads(line), dict) for line in lines)
