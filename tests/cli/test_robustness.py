"""Arbitrary records never crash a reader: they are replayed, or reported and skipped."""

from __future__ import annotations

import importlib
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loopwarden.config import load_config
from loopwarden.traces import FORMATS
from loopwarden.traces._common import ReadContext
from loopwarden.traces.replay import Replayer, RunReport

# Keys and values the readers look at, so generated records reach deep branches.
KEYS = [
    "type",
    "run_id",
    "call_id",
    "tool",
    "args_hash",
    "outcome_hash",
    "is_error",
    "unknown_tool",
    "params",
    "payload",
    "message",
    "content",
    "role",
    "name",
    "id",
    "arguments",
    "input",
    "output",
    "tool_calls",
    "function",
    "tool_call_id",
    "toolCallId",
    "toolUseResult",
    "is_error",
    "isError",
    "details",
    "sessionId",
    "isSidechain",
    "subtype",
    "messages",
    "items",
    "tools",
    "resourceSpans",
    "scopeSpans",
    "spans",
    "traceId",
    "spanId",
    "attributes",
    "status",
    "context",
    "trace_id",
    "span_id",
    "turn_id",
    "call_id",
    "tool_use_id",
    "parentId",
    "startTimeUnixNano",
    "key",
    "value",
    "stringValue",
    "code",
    "success",
]
WORDS = [
    "call",
    "outcome",
    "run_start",
    "compaction",
    "event",
    "user",
    "assistant",
    "system",
    "compact_boundary",
    "tool_use",
    "tool_result",
    "toolCall",
    "toolResult",
    "message",
    "session",
    "response_item",
    "event_msg",
    "task_started",
    "task_complete",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "mcp_call",
    "execute_tool",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
    "compacted",
    "tool",
    "r1",
    "c1",
    "x",
    "",
]
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=6),
    ),
    max_leaves=25,
)
records = st.lists(
    st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=8), values), max_size=12
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), batch=records)
def test_readers_survive_arbitrary_records(fmt: str, batch: list[Any]) -> None:
    """Every reader turns arbitrary JSON records into runs or problems, never an exception."""
    reports: list[RunReport] = []
    problems: list[tuple[str, str]] = []
    replayer = Replayer(
        load_config({"tools": {"loopDetection": {"enabled": True}}}),
        on_run=reports.append,
        on_problem=lambda where, reason: problems.append((where, reason)),
        timeline=True,
    )
    replayer.set_source("fuzz.jsonl", fmt)
    module = importlib.import_module(FORMATS[fmt][0])
    module.read(list(enumerate(batch, 1)), replayer, ReadContext("fuzz.jsonl", None, 0))
    replayer.finish()
    for report in reports:
        report.to_dict()  # the report of whatever was replayed renders
        assert report.calls >= 0
    for where, reason in problems:
        assert where.startswith("fuzz.jsonl") and reason


def _example_records() -> dict[str, list[Any]]:
    """Real records of every format, from the example traces."""
    import json
    from pathlib import Path

    from loopwarden.traces import classify

    root = Path(__file__).resolve().parents[2] / "examples" / "traces"
    found: dict[str, list[Any]] = {}
    for path in sorted(root.rglob("*.json*")):
        text = path.read_text()
        if path.suffix == ".json":
            doc = json.loads(text)
            items = doc if isinstance(doc, list) else [doc]
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        fmt = next(f for f in map(classify, items) if f is not None)
        found.setdefault(fmt, []).extend(items)
    return found


EXAMPLE_RECORDS = _example_records()


def _mutate(record: Any, path: list[int], value: Any) -> Any:
    """``record`` with the node picked by ``path`` (indexes into keys/items) replaced."""
    if not path or not isinstance(record, (dict, list)) or not record:
        return value
    if isinstance(record, dict):
        keys = list(record)
        key = keys[path[0] % len(keys)]
        return {**record, key: _mutate(record[key], path[1:], value)}
    index = path[0] % len(record)
    copy = list(record)
    copy[index] = _mutate(copy[index], path[1:], value)
    return copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(sorted(EXAMPLE_RECORDS)),
    picks=st.lists(
        st.tuples(st.integers(0, 10_000), st.lists(st.integers(0, 50), max_size=5), values),
        min_size=1,
        max_size=30,
    ),
)
# Found by CI: a call's decision that is a list (unhashable) once raised out of the reader.
@example(fmt="loopwarden", picks=[(1, [7], [])])
def test_readers_survive_mutated_real_records(fmt: str, picks: list[Any]) -> None:
    """Real records with one field broken at random: deep branches, odd values."""
    pool = EXAMPLE_RECORDS[fmt]
    batch = [_mutate(pool[index % len(pool)], path, value) for index, path, value in picks]
    test_readers_survive_arbitrary_records.hypothesis.inner_test(fmt=fmt, batch=batch)  # type: ignore[attr-defined]
