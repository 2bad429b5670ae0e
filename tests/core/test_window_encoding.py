"""RunWindow.dump_parts keeps encoded rows between dumps: it must always equal a fresh dump."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwarden as lw
from loopwarden.engine.state import RunState
from loopwarden.engine.window import RunWindow

SIGS = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SIGS, st.booleans()),
        st.tuples(st.just("complete"), SIGS, st.sampled_from(["r1", "r2"])),
        st.tuples(st.just("dump"), SIGS, st.none()),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 12), ops=OPS)
def test_incremental_rows_match_a_fresh_dump(
    capacity: int, ops: list[tuple[str, str, object]]
) -> None:
    window = RunWindow(capacity)
    for step, (op, sig, arg) in enumerate(ops):
        if op == "add":
            window.add("tool", sig, f"c{step}", "r0" if arg else None, None, float(step))
        elif op == "complete":
            window.complete_pending(sig, None, str(arg), None)
        else:
            assert b"".join(window.dump_parts()) == orjson.dumps(window.dump())
    assert orjson.loads(b"".join(window.dump_parts())) == window.dump()


def test_state_bytes_round_trip_through_the_spliced_window() -> None:
    config = lw.LoopDetectionConfig.from_dict({"enabled": True, "historySize": 5})
    state = RunState.new(config)
    for i in range(9):
        state.window.add("read", f"s{i % 3}", str(i), None, None, float(i))
        first = state.to_bytes()
        state.window.complete_pending(f"s{i % 3}", str(i), f"r{i}", None)
        again = RunState.from_bytes(state.to_bytes(), config)
        assert again.window.dump() == state.window.dump()
        assert orjson.loads(first)["h"] != orjson.loads(state.to_bytes())["h"]
    assert RunState.from_bytes(state.to_bytes(), config).to_bytes() == state.to_bytes()


def test_a_window_nobody_dumps_any_more_stops_keeping_rows() -> None:
    window = RunWindow(4)
    window.add("t", "a", None, None, None, 0.0)
    b"".join(window.dump_parts())
    for i in range(200):
        window.add("t", "a", None, "r", None, float(i))
    assert window._enc is None and not window._dirty
    assert b"".join(window.dump_parts()) == orjson.dumps(window.dump())
