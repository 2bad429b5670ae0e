"""Property tests: hashing invariants and detector bounds over generated inputs."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import math
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import loopwarden as lw
from loopwarden._canonical import digest
from loopwarden.hashing import hash_outcome

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)

python_leaves = st.one_of(
    json_leaves,
    st.floats(),  # NaN and infinities too
    st.binary(max_size=16),
    st.datetimes(),
    st.dates(),
    st.decimals(allow_nan=True),
    st.complex_numbers(),
    st.builds(object),
    st.uuids(),
)
python_values = st.recursive(
    python_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(
            st.one_of(st.text(max_size=6), st.integers(), st.booleans(), st.none()),
            children,
            max_size=4,
        ),
        st.frozensets(st.one_of(st.integers(), st.text(max_size=4)), max_size=4),
    ),
    max_leaves=25,
)


def variant(value: Any, flip: bool) -> Any:
    """A logically equal copy: other key order, ints as floats where exact, tuples for lists."""
    if isinstance(value, dict):
        items = list(value.items())
        items.reverse()
        return {k: variant(v, not flip) for k, v in items}
    if isinstance(value, list):
        items = [variant(v, not flip) for v in value]
        return tuple(items) if flip else items
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and abs(value) < 2**53 and flip:
        return float(value)
    if isinstance(value, float) and value.is_integer() and not flip:
        return int(value)
    return value


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_logically_equal_values_have_equal_digests(value: Any, flip: bool) -> None:
    assert digest(value) == digest(variant(value, flip))


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_shared_and_copied_references_hash_alike(value: Any) -> None:
    shared = {"a": value, "b": value, "c": [value, value]}
    copied = {
        "a": copy.deepcopy(value),
        "b": copy.deepcopy(value),
        "c": [copy.deepcopy(value), value],
    }
    assert digest(shared) == digest(copied)


def logical(value: Any) -> Any:
    """A type-aware equality key: numbers by exact value, booleans apart from numbers."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, (int, float)):
        return ("num", Fraction(value))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, dict):
        return ("map", frozenset((k, logical(v)) for k, v in value.items()))
    return ("list", tuple(logical(v) for v in value))


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_digests_are_equal_exactly_when_values_are_equal(a: Any, b: Any) -> None:
    assert (digest(a) == digest(b)) == (logical(a) == logical(b))
    assert digest(a) == digest(variant(a, True))


@settings(max_examples=200, deadline=None)
@given(python_values, python_values)
def test_hashing_and_recording_never_raise(params: Any, result: Any) -> None:
    assert len(digest(params)) == 64
    assert hash_outcome("t", params, result=result).hash is not None
    error = result if result is not None else "failed"  # error=None means "no error"
    assert hash_outcome("t", params, error=error).hash is not None
    hist = lw.ToolCallHistory(lw.LoopDetectionConfig(enabled=True))
    hist.record_call("t", params, call_id="1")
    hist.record_outcome("t", params, call_id="1", result=result)
    hist.detect("t", params)
    run = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}).run()
    assert run.before_call("t", params, call_id="1").action == "allow"
    run.after_call("t", params, call_id="1", result=result)


def test_nan_containers_are_stable() -> None:
    """NaN is not equal to itself in Python, but hashes stably."""
    assert digest([math.nan, decimal.Decimal("NaN")]) == digest([math.nan, decimal.Decimal("NaN")])
    assert digest(dt.timedelta(seconds=1)) == digest(1)


distinct_calls = st.lists(
    st.tuples(
        st.sampled_from(["read", "list", "exec", "fetch"]),
        st.integers(0, 10_000),
        st.text(max_size=5),
    ),
    max_size=80,
    unique_by=lambda call: (call[0], call[1]),
)


@settings(max_examples=150, deadline=None)
@given(distinct_calls, st.integers(2, 12), st.integers(1, 40))
def test_detectors_never_fire_on_all_distinct_calls(
    calls: list[tuple[str, int, str]], warning: int, history_size: int
) -> None:
    cfg = lw.LoopDetectionConfig.from_dict(
        {"enabled": True, "warningThreshold": warning, "historySize": history_size}
    )
    hist = lw.ToolCallHistory(cfg)
    run = lw.LoopGuard(cfg).run()
    for index, (tool, n, result) in enumerate(calls):
        params = {"n": n}
        assert hist.detect(tool, params) is None
        assert run.before_call(tool, params, call_id=str(index)).action == "allow"
        hist.record_call(tool, params, call_id=str(index))
        hist.record_outcome(tool, params, call_id=str(index), result=result)
        assert run.after_call(tool, params, call_id=str(index), result=result) is None


looping_calls = st.lists(
    st.tuples(
        st.sampled_from(["read", "list", "ghost"]),
        st.integers(0, 2),
        st.sampled_from(["same", "other", "Unknown tool: ghost", None]),
        st.booleans(),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(looping_calls, st.integers(1, 25), st.integers(1, 8))
def test_counts_never_exceed_the_history_size(
    calls: list[tuple[str, int, str | None, bool]], history_size: int, threshold: int
) -> None:
    cfg = lw.LoopDetectionConfig.from_dict(
        {
            "enabled": True,
            "historySize": history_size,
            "warningThreshold": threshold,
            "unknownToolThreshold": threshold,
        }
    )
    hist = lw.ToolCallHistory(cfg)
    for index, (tool, n, outcome, as_error) in enumerate(calls):
        params = {"n": n}
        det = hist.detect(tool, params)
        if det is not None:
            # A ping-pong count includes the checked call, so it may reach historySize + 1
            # (SPEC 9); every other count is of records in the window.
            limit = history_size + 1 if det.detector == "ping_pong" else history_size
            assert 1 <= det.count <= limit
            assert len(hist) <= history_size
        hist.record_call(tool, params, call_id=str(index))
        if outcome is not None:
            if as_error:
                hist.record_outcome(tool, params, call_id=str(index), error=outcome)
            else:
                hist.record_outcome(tool, params, call_id=str(index), result=outcome)
        assert len(hist) <= history_size


config_blocks = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.one_of(st.booleans(), st.none(), st.integers()),
        "historySize": st.one_of(st.integers(-3, 100), st.floats(0, 50), st.text(max_size=3)),
        "warningThreshold": st.integers(-2, 40),
        "criticalThreshold": st.integers(-2, 40),
        "globalCircuitBreakerThreshold": st.integers(-2, 40),
        "unknownToolThreshold": st.integers(-2, 40),
        "detectors": st.dictionaries(
            st.sampled_from(["genericRepeat", "pingPong", "knownPollNoProgress", "typo"]),
            st.one_of(st.booleans(), st.integers(0, 1)),
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(config_blocks)
def test_configs_validate_or_come_out_ordered(block: dict[str, Any]) -> None:
    try:
        cfg = lw.LoopDetectionConfig.from_dict(block)
    except lw.ConfigError as exc:
        assert exc.issues and all(
            issue.path.startswith("tools.loopDetection") for issue in exc.issues
        )
        return
    assert cfg.warning_threshold < cfg.critical_threshold < cfg.global_circuit_breaker_threshold
    assert cfg.history_size >= 1 and cfg.unknown_tool_threshold >= 1
