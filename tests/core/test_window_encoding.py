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


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 12), ops=OPS)
def test_changed_rows_name_exactly_what_changed(
    capacity: int, ops: list[tuple[str, str, object]]
) -> None:
    """changed_rows gives the rows of the records added or completed since the last call
    (still in the window), encoded as a fresh dump encodes them, whatever dump_parts did
    meanwhile; replaying them onto the rows it started from gives the window's dump."""
    window = RunWindow(capacity)
    stored = dict(window.track())
    for step, (op, sig, arg) in enumerate(ops):
        before = {id(r): (r.seq, r.result_hash) for r in window.records}
        if op == "add":
            window.add("tool", sig, f"c{step}", "r0" if arg else None, None, float(step))
        elif op == "complete":
            window.complete_pending(sig, None, str(arg), None)
        else:
            b"".join(window.dump_parts())  # the other user of the encoded rows
        rows = window.changed_rows()
        assert rows is not None
        changed = {r.seq for r in window.records if before.get(id(r)) != (r.seq, r.result_hash)}
        assert {seq for seq, _ in rows} == changed
        stored.update(rows)
        first = window.records[0].seq if window.records else window.next_seq
        kept = [stored[seq] for seq in sorted(stored) if seq >= first]
        assert [orjson.loads(row) for row in kept] == window.dump()


def test_an_untracked_window_has_no_changed_rows() -> None:
    """Before track() (or after one step changed more than the window holds), every row
    is to be written: changed_rows says so with None."""
    window = RunWindow(4)
    window.add("t", "a", None, None, None, 0.0)
    assert window.changed_rows() is None
    assert [seq for seq, _ in window.track()] == [0]
    for i in range(100):
        window.add("t", "a", None, "r", None, float(i))
    assert window.changed_rows() is None
