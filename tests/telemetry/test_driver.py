"""The driver's telemetry: where events are delivered, what is counted, and when not."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwarden as lw
from loopwarden.stores.sqlite import SQLiteStore
from loopwarden.telemetry import Telemetry
from tests.telemetry._otel import SMALL, meter_provider, metric_points, total, tracer


def stuck_calls(run: lw.RunGuard, tool: str, n: int) -> list[str]:
    """``n`` identical calls with identical results, each in its own tool span."""
    seen = []
    for i in range(n):
        with tracer().start_as_current_span(f"execute_tool {tool}", attributes={"i": i}):
            decision = run.before_call(tool, {"same": True}, f"{tool}-{i}")
            seen.append(decision.action)
            if not decision.blocked:
                run.after_call(tool, {"same": True}, f"{tool}-{i}", result="same")
    return seen


def events_by_span(spans: InMemorySpanExporter) -> dict[str, list[str]]:
    """Span name -> the loopwarden events on spans of that name."""
    found: dict[str, list[str]] = {}
    for span in spans.get_finished_spans():
        found.setdefault(span.name, []).extend(e.name for e in span.events)
    return found


def test_events_are_delivered_in_each_calling_thread(spans: InMemorySpanExporter) -> None:
    """Threads sharing one guard each see their own events on their own tool span."""
    provider, reader = meter_provider()
    guard = lw.LoopGuard(SMALL, telemetry=Telemetry(meter_provider=provider))
    delivered: dict[str, set[int]] = {}
    guard_sinks = guard.sinks

    def note_thread(event: lw.LoopEvent) -> None:
        delivered.setdefault(event.tool, set()).add(threading.get_ident())

    guard.sinks = (*guard_sinks, note_thread)
    idents: dict[str, int] = {}
    barrier = threading.Barrier(3)

    def work(tool: str) -> None:
        idents[tool] = threading.get_ident()
        barrier.wait()
        stuck_calls(guard.run(f"run-{tool}"), tool, 7)

    threads = [threading.Thread(target=work, args=(f"tool_{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    by_span = events_by_span(spans)
    for tool, ident in idents.items():
        assert by_span[f"execute_tool {tool}"] == [
            "loopwarden.warn",
            "loopwarden.block",
            "loopwarden.block",
        ]
        assert delivered[tool] == {ident}
    assert total(metric_points(reader)["loopwarden.tool_calls"]) == 21


def test_async_events_land_on_the_task_span_across_a_store_thread(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """With SQLite's async transactions in worker threads, events still land on each task's span."""
    provider, reader = meter_provider()
    store = SQLiteStore(tmp_path / "lw.db")
    guard = lw.LoopGuard(SMALL, store=store, telemetry=Telemetry(meter_provider=provider))

    async def agent(tool: str) -> None:
        run = guard.run(f"run-{tool}")
        for i in range(7):
            with tracer().start_as_current_span(f"execute_tool {tool}"):
                decision = await run.abefore_call(tool, {"same": True}, f"c{i}")
                await asyncio.sleep(0)  # let the other tasks interleave
                if not decision.blocked:
                    await run.aafter_call(tool, {"same": True}, f"c{i}", result="same")

    async def main() -> None:
        await asyncio.gather(*(agent(f"tool_{n}") for n in range(3)))

    try:
        asyncio.run(main())
    finally:
        guard.close()
    by_span = events_by_span(spans)
    for n in range(3):
        assert by_span[f"execute_tool tool_{n}"] == [
            "loopwarden.warn",
            "loopwarden.block",
            "loopwarden.block",
        ]
    points = metric_points(reader)
    assert total(points["loopwarden.tool_calls"], loopwarden__action="block") == 6
    assert sum(p.count for _a, p in points["loopwarden.guard.duration"]) == 21


def test_guards_sharing_a_meter_provider_are_all_counted(spans: InMemorySpanExporter) -> None:
    """A second guard on the same provider adds to the same counters (not lost to the first)."""
    provider, reader = meter_provider()
    for agent in ("first", "second"):
        guard = lw.LoopGuard(SMALL, agent_id=agent, telemetry=Telemetry(meter_provider=provider))
        stuck_calls(guard.run("r"), "poll", 4)
    calls = metric_points(reader)["loopwarden.tool_calls"]
    assert total(calls, gen_ai__agent__name="first") == 4
    assert total(calls, gen_ai__agent__name="second") == 4


def test_hashed_calls_and_blocked_reports_give_one_sample_per_call(
    spans: InMemorySpanExporter,
) -> None:
    """The replay API is counted too; reporting a blocked call back adds no second sample."""
    provider, reader = meter_provider()
    run = lw.LoopGuard(SMALL, telemetry=Telemetry(meter_provider=provider)).run("h")
    actions = []
    for i in range(6):
        decision = run.before_call_hashed("poll", "poll:abc", call_id=f"c{i}")
        actions.append(decision.action)
        # As LangChain and Pydantic AI do, the blocked call's answer is reported back.
        run.after_call_hashed("poll", "poll:abc", "same", call_id=f"c{i}")
    assert actions == ["allow", "allow", "allow", "warn", "allow", "block"]
    points = metric_points(reader)
    assert total(points["loopwarden.tool_calls"]) == 6
    assert sum(p.count for _a, p in points["loopwarden.guard.duration"]) == 6


def test_a_disabled_agent_counts_nothing(spans: InMemorySpanExporter) -> None:
    """`enabled: false` turns the guard off, telemetry included: no calls are counted."""
    provider, reader = meter_provider()
    config: dict[str, Any] = {"tools": {"loopDetection": {"enabled": False}}}
    run = lw.LoopGuard(config, telemetry=Telemetry(meter_provider=provider)).run("off")
    assert stuck_calls(run, "poll", 8) == ["allow"] * 8
    assert "loopwarden.tool_calls" not in metric_points(reader)


def test_a_fail_closed_block_is_counted_as_a_block(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A store failure in fail-closed mode blocks the call, and the metrics say so."""
    provider, reader = meter_provider()
    store = SQLiteStore(tmp_path / "lw.db")
    store.close()  # every transaction now fails with a StoreError
    telemetry = Telemetry(meter_provider=provider)
    run = lw.LoopGuard(SMALL, store=store, fail_closed=True, telemetry=telemetry).run("fc")
    assert run.before_call("poll", {}, "c0").blocked
    assert total(metric_points(reader)["loopwarden.tool_calls"], loopwarden__action="block") == 1
