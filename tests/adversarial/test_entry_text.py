"""Text entering the guard: lone surrogates and huge names count the same on every store.

Issue 24, items 13 and 14. Tool names, call ids and run/session/agent ids come
from models and agents: a lone surrogate (``\\ud800``, which JSON can escape but
UTF-8 cannot encode) made every call of a SQLite- or Redis-backed run fail open
while the memory store counted them; a 1 MB tool name was kept in every window
row. The guard now makes such text safe once, at its entry points (and the hook
at its event parsing): every store sees the same valid, bounded text, so every
store gives the same decisions. Stores come from ``tests/stores/conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.stores import Store
from tests.adversarial.conftest import SMALL, claude_event, hook, state_dir, write_config
from tests.stores.conftest import (  # noqa: F401 - the store matrix's fixtures, used by name
    all_stores,
    fixture_clock,
    fixture_cluster_url,
    fixture_local_store,
    fixture_memory_store,
    fixture_prefix,
    fixture_redis_cluster,
    fixture_redis_cluster_reopen,
    fixture_redis_cluster_store,
    fixture_redis_reopen,
    fixture_redis_server,
    fixture_redis_store,
    fixture_redis_url,
    fixture_sqlite_path,
    fixture_sqlite_store,
    fixture_store,
    fixture_twice_store,
)

pytestmark = pytest.mark.timeout(180)

LOOP = ["allow", "allow", "warn", "block", "global_circuit_breaker"]


def drive(
    guard: lw.LoopGuard,
    tool: str,
    *,
    call_id: str = "c",
    run_id: str = "run",
    session_id: str | None = None,
    agent_id: str | None = None,
    calls: int = 12,
) -> list[str]:
    """Identical no-progress calls until the run is stopped: the actions seen."""
    run = guard.run(run_id, session_id=session_id, agent_id=agent_id)
    actions: list[str] = []
    try:
        for n in range(calls):
            decision = run.before_call(tool, {"job": 1}, call_id=f"{call_id}{n}")
            actions.append(decision.action)
            if not decision.blocked:
                run.after_call(tool, {"job": 1}, call_id=f"{call_id}{n}", result="pending")
    except lw.LoopAbort as abort:
        actions.append(abort.code)
    return actions


SURROGATES = {
    "tool": {"tool": "poll\ud800"},
    "call-id": {"tool": "poll", "call_id": "toolu_\udc00x"},
    "run-id": {"tool": "poll", "run_id": "run\ud83d"},
    "session-id": {"tool": "poll", "session_id": "sess\udfff"},
    "agent-id": {"tool": "poll", "agent_id": "agent\ud800"},
    "all": {
        "tool": "\ud800",
        "call_id": "\udfff",
        "run_id": "\ud800\ud800",
        "session_id": "\udc00",
    },
}


@all_stores
@pytest.mark.parametrize("where", list(SURROGATES))
def test_lone_surrogates_count_the_same_on_every_store(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A lone surrogate in a tool name, call id, run, session or agent id: the loop is
    warned, blocked and stopped at the same calls on every store, with no internal error,
    and the run record is written."""
    events: list[lw.LoopEvent] = []
    record = tmp_path / "run.jsonl"
    guard = lw.LoopGuard(SMALL, store=store, on_event=events.append, run_record=record)
    kwargs = dict(SURROGATES[where])
    tool = kwargs.pop("tool")
    assert drive(guard, tool, **kwargs) == LOOP
    assert "internal error" not in caplog.text, caplog.text
    assert len({event.tool for event in events}) == 1  # the same input, the same text
    for event in events:
        for text in (event.tool, event.call_id, event.run_id, event.session_id):
            (text or "").encode("utf-8")  # valid for every encoder downstream
    assert len(record.read_bytes().splitlines()) >= 9
    guard.run_record.close()  # type: ignore[union-attr]


@all_stores
def test_different_surrogates_stay_different_tools(store: Store) -> None:
    """Two tool names that differ only in their lone surrogate are two tools: a call of
    the second does not continue the first one's streak."""
    guard = lw.LoopGuard(SMALL, store=store)
    run = guard.run("r")
    actions = []
    for n, tool in enumerate(["t\ud800", "t\ud800", "t\ud800", "t\ud801"]):
        actions.append(run.before_call(tool, {"a": 1}, call_id=f"c{n}").action)
        run.after_call(tool, {"a": 1}, call_id=f"c{n}", result="same")
    assert actions == ["allow", "allow", "warn", "allow"]


# -- item 14: huge tool names ----------------------------------------------------------------
MiB = 1024 * 1024


@all_stores
def test_huge_tool_names_are_bounded_and_still_counted(store: Store) -> None:
    """A 1 MB tool name repeated is stopped as any loop, and what the guard keeps of it
    (window rows, events) is a bounded form with a readable prefix."""
    name = "x" * MiB
    events: list[lw.LoopEvent] = []
    guard = lw.LoopGuard(SMALL, store=store, on_event=events.append)
    assert drive(guard, name) == LOOP
    kept = {event.tool for event in events}
    assert len(kept) == 1
    shown = kept.pop()
    assert len(shown) <= 256 and shown.startswith("x" * 100), len(shown)
    snapshot = guard.run("run").snapshot()
    assert all(len(json.dumps(row)) < 1024 for row in snapshot["records"]), snapshot


@all_stores
def test_huge_names_that_differ_at_the_end_stay_different(store: Store) -> None:
    """Two 1 MB names that differ only in their last character are two tools."""
    first, second = "y" * MiB + "1", "y" * MiB + "2"
    guard = lw.LoopGuard(SMALL, store=store)
    run = guard.run("r")
    actions = []
    for n, tool in enumerate([first, first, first, second]):
        actions.append(run.before_call(tool, {"a": 1}, call_id=f"c{n}").action)
        run.after_call(tool, {"a": 1}, call_id=f"c{n}", result="same")
    assert actions == ["allow", "allow", "warn", "allow"]


def test_registered_names_are_bounded_the_same_way() -> None:
    """A registered tool with a huge or surrogate name is recognised as registered (the
    unknown-tool guard compares bounded forms on both sides)."""
    names = ["z" * MiB, "w\ud800"]
    guard = lw.LoopGuard({"tools": {"loopDetection": {"unknownToolThreshold": 1}}})
    run = guard.run("r", tools=names)
    for n in range(4):
        for name in names:
            assert run.before_call(name, {"n": n}, call_id=f"{name[:1]}{n}").action == "allow"
            run.after_call(name, {"n": n}, call_id=f"{name[:1]}{n}", result=f"ok {n}")


# -- the hook: events whose JSON escapes a lone surrogate ------------------------------------
def _event_bytes(event: dict[str, Any]) -> bytes:
    """The event as an agent may send it: JSON with ``\\udXXX`` escapes (orjson refuses)."""
    return json.dumps(event).encode()


@pytest.mark.parametrize("field", ["tool_use_id", "tool_name", "session_id"])
def test_hook_counts_calls_with_lone_surrogates(hook_env: dict[str, str], field: str) -> None:
    """Claude Code events with a lone surrogate in the call id, tool name or session id
    are counted on the hook's SQLite store until the loop is denied, with no internal
    error."""
    write_config(hook_env, SMALL)
    denied = []
    for n in range(6):
        pre = claude_event("PreToolUse", n, tool_input={"command": "ls"})
        pre["tool_use_id"] = f"toolu_{n}"
        pre[field] = {"tool_use_id": f"toolu_\ud800{n}", "tool_name": "Bash\udc00"}.get(
            field, "sess\udfff"
        )
        answer = hook(hook_env, "claude-code", _event_bytes(pre))
        assert answer.code == 0 and "internal error" not in answer.stderr, answer.stderr
        denied.append(answer.denied)
        if answer.denied:
            break
        post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "same"}}
        assert "internal error" not in hook(hook_env, "claude-code", _event_bytes(post)).stderr
    assert denied[-1] is True, denied
    log = state_dir(hook_env) / "hook.log"
    assert not log.exists() or b"internal error" not in log.read_bytes()


def test_hook_bounds_a_huge_tool_name(hook_env: dict[str, str]) -> None:
    """A 1 MB tool name through the hook is counted and denied like any loop, and the
    state file stays small (the name is not kept in every row)."""
    write_config(hook_env, SMALL)
    denied = []
    for n in range(6):
        pre = claude_event("PreToolUse", n, tool="T" * MiB, tool_input={"command": "ls"})
        answer = hook(hook_env, "claude-code", pre)
        assert answer.code == 0 and "internal error" not in answer.stderr, answer.stderr
        denied.append(answer.denied)
        if answer.denied:
            break
        post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "same"}}
        hook(hook_env, "claude-code", post)
    assert denied[-1] is True, denied
    size = sum(p.stat().st_size for p in state_dir(hook_env).glob("state.db*"))
    assert size < MiB, f"the state files hold {size} bytes"
