"""How users call loopwarden's public API, type-checked with ``mypy --strict``.

This file is never run: ``./scripts/check`` type-checks it, so a public
signature or return type that changes in a way user code would notice fails
the check. The first part is the README quickstart with types added;
``tests/core/test_readme.py`` checks that, without its annotations, it is still
the README's code statement for statement. Integration snippets live in
``tests/typing/integrations.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict, assert_type

import loopwarden as lw

# -- README quickstart (snippet "quickstart"), typed ----------------------------


class ToolCall(TypedDict):
    name: str
    args: dict[str, Any]
    id: str


Model = Callable[[list[dict[str, Any]]], list[ToolCall]]
Tools = Mapping[str, Callable[..., object]]

guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})


def run_agent(model: Model, tools: Tools, messages: list[dict[str, Any]]) -> None:
    run = guard.run(tools=list(tools))  # one guarded run per user turn
    while calls := model(messages):  # the model asks for tool calls
        for call in calls:
            name, args, call_id = call["name"], call["args"], call["id"]
            decision = run.before_call(name, args, call_id=call_id)
            if decision.blocked:  # not executed: the model reads why
                output = decision.message
            else:
                output = str(tools[name](**args)) if name in tools else f"Unknown tool: {name}"
                if note := run.after_call(name, args, call_id=call_id, result=output):
                    output += f"\n\n{note}"  # the warning the model reads
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


# -- LoopGuard: every documented way to build one --------------------------------


def build_guards(
    path: Path, config: lw.Config, block: lw.LoopDetectionConfig, store: lw.Store
) -> list[lw.LoopGuard]:
    events: list[lw.LoopEvent] = []

    def alert(event: lw.LoopEvent) -> None:
        assert_type(event.action, Literal["warn", "block", "stop", "abort", "resume"])
        assert_type(event.level, Literal["warning", "critical"])
        assert_type(event.tool, str)
        assert_type(event.count, int)
        assert_type(event.detector, str)
        assert_type(event.paired_tool, str | None)
        assert_type(event.run_id, str | None)
        assert_type(event.time, float)

    return [
        lw.LoopGuard(),
        lw.LoopGuard("openclaw.json"),
        lw.LoopGuard(path, agent_id="safe-runner"),
        lw.LoopGuard(config),
        lw.LoopGuard(block),
        lw.LoopGuard(
            {"tools": {"loopDetection": {"enabled": True}}},
            store="sqlite:///var/lib/loopwarden/state.db",
            on_event=events.append,
            fail_closed=True,
            run_record="runs.jsonl",
            log_params=False,
        ),
        lw.LoopGuard(store=store, on_event=[events.append, alert], run_record=False),
        lw.LoopGuard(store=lw.MemoryStore(ttl_seconds=60), run_record=path),
    ]


# -- one run, sync and async ------------------------------------------------------


def guarded_run(guard: lw.LoopGuard) -> list[str]:
    notes: list[str] = []
    with guard.run("run-42", session_id="chat-7", agent_id="safe-runner", tools=["read"]) as run:
        assert_type(run, lw.RunGuard)
        decision = run.before_call("read", {"path": "a.txt"}, call_id="c1")
        assert_type(decision, lw.Decision)
        assert_type(decision.action, Literal["allow", "warn", "block"])
        assert_type(decision.blocked, bool)
        assert_type(decision.message, str | None)
        note = run.after_call("read", {"path": "a.txt"}, call_id="c1", result="text")
        assert_type(note, str | None)
        if note is not None:
            notes.append(note)
        run.after_call("read", {"path": "b.txt"}, error=OSError("gone"))
        run.on_compaction()
    run.end()
    return notes


async def guarded_async_run(guard: lw.LoopGuard) -> str | None:
    run = guard.run(tools=("read", "write"))
    decision = await run.abefore_call("read", {"path": "a.txt"}, call_id="c1")
    assert_type(decision, lw.Decision)
    await run.aon_compaction()
    return await run.aafter_call("read", {"path": "a.txt"}, call_id="c1", result={"ok": True})


# -- the three deliberate outcomes and the error tree -----------------------------


def stopped(run: lw.RunGuard) -> dict[str, object] | None:
    try:
        run.before_call("poll", {})
    except lw.CircuitBreakerTripped as stop:
        assert_type(stop.code, str)
        assert_type(stop.tool_name, str)
        assert_type(stop.count, int)
        assert_type(stop.detector, str)
        return stop.to_dict()
    except lw.LoopAbort as abort:  # CompactionLoopPersisted too
        assert_type(abort.message, str)
        report = abort.report
        assert_type(report, lw.StopReport | None)
        if report is not None and abort.askable:
            assert_type(report.summary(), str)
            assert_type(report.saved_turns, int | None)
            decision = run.resume(abort, "continue", note="try the other file")
            assert_type(decision, lw.Decision)
    return None


def wrapped(exc: BaseException) -> str | None:
    found = lw.LoopAbort.find(exc)  # frameworks that wrap our exceptions
    assert_type(found, lw.LoopAbort | None)
    return found.code if found is not None else None


def errors_are_loopwarden_errors() -> list[type[lw.LoopwardenError]]:
    return [
        lw.ConfigError,
        lw.StoreError,
        lw.LoopAbort,
        lw.CircuitBreakerTripped,
        lw.CompactionLoopPersisted,
    ]


# -- configuration ------------------------------------------------------------------


def configuration(path: str) -> int:
    try:
        config = lw.load_config(path)
    except lw.ConfigError as err:
        return len(err.issues)
    assert_type(config, lw.Config)
    cfg = config.for_agent("safe-runner")
    assert_type(cfg, lw.LoopDetectionConfig)
    assert_type(cfg.enabled, bool | None)
    assert_type(cfg.detectors, lw.DetectorsConfig)
    assert_type(cfg.detectors.ping_pong, bool)
    assert_type(cfg.post_compaction_guard, lw.PostCompactionGuardConfig)
    assert_type(cfg.post_compaction_guard.window_size, int)
    settings = config.settings
    assert_type(settings, lw.Settings)
    assert_type(settings.store, str | None)
    assert_type(settings.fail_mode, Literal["open", "closed"])
    assert_type(settings.send_tools, frozenset[str])
    assert_type(lw.normalize_agent_id(" Safe Runner "), str)
    return cfg.warning_threshold + cfg.critical_threshold + cfg.global_circuit_breaker_threshold


# -- the engine layer (SPEC section 8) ------------------------------------------------


def engine(block: Mapping[str, Any], full_config: Mapping[str, Any] | None) -> int:
    cfg = lw.LoopDetectionConfig.from_dict(block)
    cfg = lw.resolve_config(full_config, "main")
    assert_type(cfg.to_dict(), dict[str, Any])
    assert_type(cfg.history_size + cfg.unknown_tool_threshold, int)

    hist = lw.ToolCallHistory(cfg)
    hist.record_call("read", {"path": "a.txt"}, call_id="c1", run_id="r1")
    hist.record_outcome("read", {"path": "a.txt"}, call_id="c1", run_id="r1", result="text")
    hist.record_outcome("read", {"path": "a.txt"}, error=RuntimeError("boom"))
    det = hist.detect("read", {"path": "a.txt"}, run_id="r1")
    assert_type(det, lw.Detection | None)
    if det is not None:
        assert_type(det.level, Literal["warning", "critical"])
        assert_type(det.detector, str)
        assert_type(det.message, str)
        assert_type(det.warning_key, str)
        assert_type(det.paired_tool, str | None)

    guard = lw.PostCompactionGuard(window_size=3, enabled=True)
    guard.arm()
    assert_type(guard.armed, bool)
    verdict = guard.observe("read", lw.args_hash("read", {"path": "a.txt"}), "result-hash")
    assert_type(verdict, lw.CompactionVerdict)
    assert_type(verdict.should_abort, bool)
    assert_type(verdict.tool_name, str | None)
    return len(hist) + guard.remaining_attempts + verdict.count


# -- stores ---------------------------------------------------------------------------


def stores() -> lw.LoopGuard:
    store = lw.store_from_url("memory://", ttl_seconds=3600)
    assert_type(store, lw.Store)
    return lw.LoopGuard(store=store)


# -- loopwarden.testing: helpers for testing your own agent ---------------------------


def testing_helpers() -> list[str]:
    from loopwarden.testing import SMALL_THRESHOLDS, FakeClock, ScriptedAgent, capture_events

    clock = FakeClock()
    guard = lw.LoopGuard(SMALL_THRESHOLDS, clock=clock)
    agent = ScriptedAgent(guard.run(), {"poll": lambda job: "pending"})
    with capture_events() as events:
        seen = agent.turn([("poll", {"job": "42"}, "c1")])
        assert_type(seen[0].blocked, bool)
        assert_type(seen[0].note, str | None)
        assert_type(clock.advance(5), float)
    return [event.action for event in events]
