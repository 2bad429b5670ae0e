"""The runtime guard (SPEC 6 and 7) driving a scripted agent loop end to end.

The behaviour classes run on every store backend (``@all_stores``), the
"twice" double included: a store that runs each transaction twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden import runrecord
from loopwarden.engine.state import RunState
from loopwarden.stores import Store
from loopwarden.testing import SMALL_THRESHOLDS, FakeClock, ScriptedAgent, capture_events
from tests.stores.conftest import all_stores
from tests.stores.twice import TwiceStore

ON = {"tools": {"loopDetection": {"enabled": True}}}
SMALL = SMALL_THRESHOLDS


def poll_job(job: str) -> str:
    """A tool stuck on one answer."""
    return "pending"


class Counter:
    """A tool whose result changes on every call: progress."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, job: str) -> str:
        self.n += 1
        return f"progress {self.n}%"


def stuck_agent(config: Any = ON, **guard_kwargs: Any) -> tuple[ScriptedAgent, list[lw.LoopEvent]]:
    events: list[lw.LoopEvent] = []
    guard = lw.LoopGuard(config, on_event=events.append, **guard_kwargs)
    return ScriptedAgent(guard.run("run-1", session_id="s-1"), {"poll_job": poll_job}), events


@all_stores
class TestEscalation:
    def test_defaults_warn_at_11_block_at_21_stop_at_31(
        self, store: Store, clock: FakeClock
    ) -> None:
        """The SPEC 6.2 escalation with the defaults."""
        agent, events = stuck_agent(store=store, clock=clock)
        stopped_at = None
        for i in range(1, 40):
            try:
                agent.turn([("poll_job", {"job": "42"}, f"c{i}")])
            except lw.CircuitBreakerTripped as exc:
                stopped_at = i
                assert (exc.code, exc.count, exc.tool_name) == (
                    "global_circuit_breaker",
                    30,
                    "poll_job",
                )
                break
        assert stopped_at == 31
        seen = agent.seen
        assert not any(s.warned or s.blocked for s in seen[:10])
        assert (
            seen[10].warned and "WARNING" in seen[10].text and seen[10].text.startswith("pending")
        )
        assert not any(s.warned for s in seen[11:20])  # delivered once per bucket, not every call
        assert all(s.blocked for s in seen[20:30])
        assert "CRITICAL" in seen[20].text and "poll_job" in seen[20].text
        assert agent.executed == 20  # blocked calls are never executed
        assert [(e.action, e.count) for e in events] == [
            ("warn", 10),
            *[("block", n) for n in range(20, 30)],
            ("stop", 30),
        ]

    def test_progressing_loop_never_blocks(self, store: Store, clock: FakeClock) -> None:
        """Identical calls with changing results only ever warn, bucketed."""
        guard = lw.LoopGuard(ON, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {"poll_job": Counter()})
        for i in range(100):
            agent.turn([("poll_job", {"job": "42"}, f"c{i}")])
        assert agent.executed == 100
        assert not any(s.blocked for s in agent.seen)
        assert [i for i, s in enumerate(agent.seen) if s.warned] == [10, 20, 30]

    def test_warning_buckets_follow_the_warning_threshold(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Thresholds below 10 work: notes at 3, 6, 9... (SPEC 9)."""
        config = {
            "tools": {
                "loopDetection": {
                    "enabled": True,
                    "warningThreshold": 3,
                    "criticalThreshold": 50,
                    "globalCircuitBreakerThreshold": 60,
                }
            }
        }
        guard = lw.LoopGuard(config, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {"poll_job": Counter()})
        for i in range(12):
            agent.turn([("poll_job", {"job": "1"}, f"c{i}")])
        assert [i + 1 for i, s in enumerate(agent.seen) if s.warned] == [4, 7, 10]

    def test_stop_is_sticky(self, store: Store, clock: FakeClock) -> None:
        """After the breaker stops a run, every later call is refused the same way."""
        agent, _ = stuck_agent(SMALL, store=store, clock=clock)
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(20):
                agent.turn([("poll_job", {"job": "42"}, f"c{i}")])
        with pytest.raises(lw.CircuitBreakerTripped):
            agent.run.before_call("something_else", {}, call_id="later")

    def test_blocked_answers_are_not_outcomes(self, store: Store, clock: FakeClock) -> None:
        """A framework that reports the block answer as a result does not double count."""
        events: list[lw.LoopEvent] = []
        run = lw.LoopGuard(SMALL, on_event=events.append, store=store, clock=clock).run()
        for i in range(5):
            run.before_call("t", {}, call_id=f"c{i}")
            run.after_call("t", {}, call_id=f"c{i}", result="same")
        decision = run.before_call("t", {}, call_id="c5")
        assert decision.blocked
        run.after_call("t", {}, call_id="c5", result=decision.message)
        records = run.snapshot()["records"]
        assert len(records) == 6 and records[-1]["veto"] is True
        assert records[-1]["result_hash"] == records[-2]["result_hash"]

    def test_blocked_call_ids_can_be_reused(self, store: Store, clock: FakeClock) -> None:
        """A blocked call need not be reported back; its id may come again with a real call."""
        run = lw.LoopGuard(SMALL, store=store, clock=clock).run()
        for i in range(5):
            run.before_call("t", {}, call_id=f"c{i}")
            run.after_call("t", {}, call_id=f"c{i}", result="same")
        assert run.before_call("t", {}, call_id="reused").blocked
        assert not run.before_call("other", {"x": 1}, call_id="reused").blocked
        run.after_call("other", {"x": 1}, call_id="reused", result="fresh")
        records = run.snapshot()["records"]
        assert records[-1]["tool_name"] == "other" and records[-1]["result_hash"] is not None

    def test_parallel_calls_pair_by_call_id(self, store: Store, clock: FakeClock) -> None:
        """Outcomes reported in another order attach to their own calls."""
        # Two tools called side by side every turn alternate in the history, which the
        # ping-pong detector reports (as a warning only); this test is about pairing.
        config = {
            "tools": {
                "loopDetection": {
                    **SMALL["tools"]["loopDetection"],
                    "detectors": {"pingPong": False},
                }
            }
        }
        guard = lw.LoopGuard(config, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {"poll_job": poll_job, "counter": Counter()})
        for turn in range(4):
            agent.turn(
                [("poll_job", {"job": "a"}, f"a{turn}"), ("counter", {"job": "b"}, f"b{turn}")],
                reverse_outcomes=True,
            )
        records = agent.run.snapshot()["records"]
        by_id = {r["call_id"]: r for r in records}
        assert len({by_id[f"a{t}"]["result_hash"] for t in range(4)}) == 1
        assert len({by_id[f"b{t}"]["result_hash"] for t in range(4)}) == 4
        assert all(r["result_hash"] is not None for r in records)
        # both calls repeat their arguments a third time in turn 4; each note reaches its own call
        warned = {s.call_id: s.text for s in agent.seen if s.warned}
        assert set(warned) == {"a3", "b3"}
        assert "poll_job" in warned["a3"] and "counter" not in warned["a3"]
        assert "counter" in warned["b3"] and warned["b3"].startswith("progress 4%")

    def test_runs_do_not_share_counts(self, store: Store, clock: FakeClock) -> None:
        """Each run has its own window; a run resumed by id continues its own counts."""
        guard = lw.LoopGuard(SMALL, store=store, clock=clock)
        first = ScriptedAgent(guard.run("run-a"), {"poll_job": poll_job})
        second = ScriptedAgent(guard.run("run-b"), {"poll_job": poll_job})
        for i in range(5):
            first.turn([("poll_job", {"job": "1"}, f"c{i}")])
        assert second.turn([("poll_job", {"job": "1"}, "x")])[0].blocked is False
        assert first.turn([("poll_job", {"job": "1"}, "c5")])[0].blocked is True
        resumed = ScriptedAgent(guard.run("run-a"), {"poll_job": poll_job})
        assert resumed.turn([("poll_job", {"job": "1"}, "c6")])[0].blocked is True

    def test_per_agent_config(self, store: Store, clock: FakeClock) -> None:
        """Each agent's own block applies to its runs."""
        config = {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {
                "list": [{"id": "strict", "tools": {"loopDetection": {"warningThreshold": 2}}}]
            },
        }
        guard = lw.LoopGuard(config, store=store, clock=clock)
        strict = ScriptedAgent(guard.run(agent_id="Strict"), {"poll_job": Counter()})
        relaxed = ScriptedAgent(guard.run(agent_id="other"), {"poll_job": Counter()})
        for i in range(3):
            strict.turn([("poll_job", {"job": "1"}, f"s{i}")])
            relaxed.turn([("poll_job", {"job": "1"}, f"r{i}")])
        assert strict.seen[2].warned and not any(s.warned for s in relaxed.seen)


class TestEnabledStates:
    def test_enabled_false_does_nothing(self) -> None:
        """``enabled: false`` turns every guard off: nothing is counted, blocked or stored."""
        guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": False}}})
        run = guard.run(tools=["poll_job"])
        run.on_compaction()
        for i in range(50):
            assert run.before_call("ghost", {}, call_id=f"g{i}").action == "allow"
            assert run.before_call("poll_job", {"job": "1"}, call_id=f"c{i}").action == "allow"
            assert run.after_call("poll_job", {"job": "1"}, call_id=f"c{i}", result="same") is None
        assert isinstance(guard.store, lw.MemoryStore) and len(guard.store) == 0

    def test_unset_keeps_the_compaction_and_unknown_tool_guards(self) -> None:
        """Unset ``enabled`` keeps the unknown-tool and post-compaction guards only."""
        guard = lw.LoopGuard({})
        run = guard.run(tools=["poll_job"])
        for i in range(40):
            run.before_call("poll_job", {"job": "1"}, call_id=f"c{i}")
            assert run.after_call("poll_job", {"job": "1"}, call_id=f"c{i}", result="same") is None
        decisions = [run.before_call("ghost", {}, call_id=f"g{i}") for i in range(11)]
        assert [d.blocked for d in decisions] == [False] * 10 + [True]
        run.on_compaction()
        with pytest.raises(lw.CompactionLoopPersisted) as exc:
            for i in range(3):
                run.before_call("poll_job", {"job": "1"}, call_id=f"p{i}")
                run.after_call("poll_job", {"job": "1"}, call_id=f"p{i}", result="same")
        assert (exc.value.code, exc.value.count, exc.value.tool_name) == (
            "compaction_loop_persisted",
            3,
            "poll_job",
        )


@all_stores
class TestUnknownTools:
    def test_registered_names(self, store: Store, clock: FakeClock) -> None:
        """SPEC 6.4: misses count, a registered call resets, then blocks, then the run stops."""
        events: list[lw.LoopEvent] = []
        guard = lw.LoopGuard(SMALL, on_event=events.append, store=store, clock=clock)
        run = guard.run(tools=["read"])
        assert [run.before_call("ghost", {"i": i}, call_id=f"a{i}").blocked for i in range(3)] == [
            False
        ] * 3
        run.before_call("read", {}, call_id="r")
        assert [run.before_call("ghost", {"i": i}, call_id=f"b{i}").blocked for i in range(4)] == [
            False,
            False,
            False,
            True,
        ]
        blocked = run.before_call("ghost", {"i": 9}, call_id="b9")
        assert (
            blocked.blocked
            and "ghost" in (blocked.message or "")
            and "not" in (blocked.message or "")
        )
        assert not run.before_call("phantom", {}, call_id="p").blocked  # another name starts at 1
        for i in range(3):
            run.before_call("ghost", {"i": i}, call_id=f"c{i}")
        with pytest.raises(lw.CircuitBreakerTripped) as exc:
            for i in range(3, 12):
                run.before_call("ghost", {"i": i}, call_id=f"c{i}")
        assert exc.value.detector == "unknown_tool_repeat"
        assert next(e.detector for e in events if e.action == "block") == "unknown_tool_repeat"

    def test_not_found_errors_without_registered_names(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Rule 1: repeated "unknown tool" errors block when detection is on."""
        guard = lw.LoopGuard(SMALL, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {})
        for i in range(3):
            assert not agent.turn([("ghost", {"i": i}, f"c{i}")])[0].blocked
        assert agent.turn([("ghost", {"i": 99}, "c3")])[0].blocked


@all_stores
class TestCompaction:
    def test_post_compaction_abort(self, store: Store, clock: FakeClock) -> None:
        """The same call with the same result right after a compaction ends the run."""
        guard = lw.LoopGuard(ON, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {"poll_job": poll_job})
        agent.turn([("poll_job", {"job": "42"}, "before")])
        agent.run.on_compaction()
        agent.turn([("poll_job", {"job": "42"}, "p1")])
        agent.turn([("poll_job", {"job": "42"}, "p2")])
        with pytest.raises(lw.CompactionLoopPersisted) as exc:
            agent.turn([("poll_job", {"job": "42"}, "p3")])
        assert exc.value.count == 3 and exc.value.tool_name == "poll_job"
        with pytest.raises(lw.CompactionLoopPersisted):
            agent.run.before_call("poll_job", {"job": "42"}, call_id="p4")

    def test_progress_after_compaction_is_fine(self, store: Store, clock: FakeClock) -> None:
        """Changing results after a compaction never abort."""
        guard = lw.LoopGuard(ON, store=store, clock=clock)
        agent = ScriptedAgent(guard.run(), {"poll_job": Counter()})
        agent.run.on_compaction()
        for i in range(6):
            agent.turn([("poll_job", {"job": "42"}, f"p{i}")])
        assert agent.executed == 6


class TestFailures:
    class BrokenStore:
        """A user-supplied store whose backend is down."""

        def transact(self, key: str, config: Any, fn: Callable[[RunState], Any]) -> Any:
            raise OSError("backend unreachable")

        async def atransact(self, key: str, config: Any, fn: Callable[[RunState], Any]) -> Any:
            raise OSError("backend unreachable")

        def delete(self, key: str) -> None:
            raise OSError("backend unreachable")

        def close(self) -> None:
            pass

    def test_fail_open(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """A failing store is logged and every call is allowed."""
        run = lw.LoopGuard(ON, store=self.BrokenStore()).run()
        assert run.before_call("t", {}, call_id="1").action == "allow"
        assert run.after_call("t", {}, call_id="1", result="x") is None
        run.on_compaction()
        run.end()
        assert any(
            "backend unreachable" in (r.exc_text or "") or r.exc_info for r in lw_logs.records
        )

    async def test_fail_open_async(self) -> None:
        """The async methods fail open too."""
        run = lw.LoopGuard(ON, store=self.BrokenStore()).run()
        assert (await run.abefore_call("t", {}, call_id="1")).action == "allow"
        assert await run.aafter_call("t", {}, call_id="1", result="x") is None

    def test_fail_closed(self) -> None:
        """Fail-closed blocks the call with a message that says why."""
        config = {**ON, "loopwarden": {"failMode": "closed"}}
        run = lw.LoopGuard(config, store=self.BrokenStore()).run()
        decision = run.before_call("t", {}, call_id="1")
        assert decision.blocked and "fail closed" in (decision.message or "")
        assert (
            lw.LoopGuard(ON, store=self.BrokenStore(), fail_closed=True)
            .run()
            .before_call("t", {})
            .blocked
        )

    def test_hostile_inputs_never_raise(self) -> None:
        """Names, params and results that fail on every access never reach the agent as errors."""

        class Hostile:
            def __getattr__(self, name: str) -> Any:
                raise RuntimeError("no attribute access")

            def __repr__(self) -> str:
                raise RuntimeError("no repr")

        run = lw.LoopGuard(ON).run()
        cyclic: dict[str, Any] = {}
        cyclic["me"] = cyclic
        for params in (Hostile(), cyclic, {"big": "x" * 5_000_000}, {1: object()}, [float("nan")]):
            assert run.before_call(Hostile(), params, call_id=None).action == "allow"  # type: ignore[arg-type]
            run.after_call("t", params, result=Hostile())
            run.after_call("t", params, error=Hostile())

    def test_failing_event_callback_is_logged(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """An event callback that raises is logged, and the guard goes on."""

        def explode(event: lw.LoopEvent) -> None:
            raise RuntimeError("callback bug")

        run = lw.LoopGuard(SMALL, on_event=explode).run()
        for i in range(4):
            run.before_call("t", {}, call_id=str(i))
            run.after_call("t", {}, call_id=str(i), result="same")
        assert any(
            "callback" in r.getMessage() for r in lw_logs.records if r.levelno == logging.ERROR
        )


class TestEvents:
    def test_event_fields_and_log_levels(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """Events carry the run's identity and counts; warnings log at WARNING, others at ERROR."""
        agent, events = stuck_agent(SMALL, agent_id="bot")
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(10):
                agent.turn([("poll_job", {"job": "42"}, f"c{i}")])
        warn, block, stop = events[0], events[1], events[-1]
        assert (warn.action, warn.level, warn.detector, warn.count) == (
            "warn",
            "warning",
            "generic_repeat",
            3,
        )
        assert (block.action, block.level, block.count) == ("block", "critical", 5)
        assert (stop.action, stop.detector) == ("stop", "global_circuit_breaker")
        assert (warn.session_id, warn.run_id, warn.agent_id, warn.tool) == (
            "s-1",
            "run-1",
            "bot",
            "poll_job",
        )
        assert warn.call_id == "c3" and warn.warning_key and warn.message
        levels = {
            r.levelno for r in lw_logs.records if r.getMessage().startswith("loopwarden warn")
        }
        assert levels == {logging.WARNING}
        errors = [
            r
            for r in lw_logs.records
            if r.getMessage().startswith(("loopwarden block", "loopwarden stop"))
        ]
        assert errors and all(r.levelno == logging.ERROR for r in errors)
        assert all(getattr(r, "loopwarden_event", None) is not None for r in errors)
        assert '"42"' not in lw_logs.text  # raw params never reach the log

    def test_run_record(self, tmp_path: Path) -> None:
        """The run record holds every call, outcome, event and compaction, without raw params."""
        path = tmp_path / "records" / "run.jsonl"
        agent, _ = stuck_agent(SMALL, run_record=path)
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(10):
                agent.turn([("poll_job", {"job": "secret-42"}, f"c{i}")])
        agent.run.on_compaction()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        types = [line["type"] for line in lines]
        assert types[0] == "run_start" and lines[0]["config"]["warningThreshold"] == 3
        assert {"call", "outcome", "event", "compaction"} <= set(types)
        calls = [line for line in lines if line["type"] == "call"]
        assert all(c["run_id"] == "run-1" and c["args_hash"].startswith("poll_job:") for c in calls)
        assert [c["decision"] for c in calls][-3:] == ["block", "block", "stop"]
        blocks = [line for line in lines if line["type"] == "event" and line["action"] == "block"]
        assert blocks and all(b["message"] and b["detector"] for b in blocks)
        assert "secret-42" not in path.read_text()

    def test_run_record_with_params(self, tmp_path: Path) -> None:
        """With ``log_params`` the run record keeps raw params and results."""
        path = tmp_path / "run.jsonl"
        run = lw.LoopGuard(ON, run_record=path, log_params=True).run()
        run.before_call("read", {"path": "/etc/hosts"}, call_id="1")
        run.after_call("read", {"path": "/etc/hosts"}, call_id="1", result={"content": "127.0.0.1"})
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines[1]["params"] == {"path": "/etc/hosts"}
        assert lines[2]["result"] == {"content": "127.0.0.1"}


class TestConcurrency:
    def test_threads_on_one_run(self) -> None:
        """Many threads calling into one run: nothing raises, nothing is lost."""
        guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}})
        run = guard.run()
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(50):
                    call_id = f"{n}-{i}"
                    run.before_call("read", {"n": n, "i": i}, call_id=call_id)
                    run.after_call("read", {"n": n, "i": i}, call_id=call_id, result=i)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        records = run.snapshot()["records"]
        assert len(records) == 400 and all(r["result_hash"] is not None for r in records)

    async def test_async_escalation(self) -> None:
        """The async methods escalate like the sync ones."""
        agent, events = stuck_agent(SMALL)
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(20):
                await agent.aturn([("poll_job", {"job": "42"}, f"c{i}")])
        assert [e.action for e in events] == ["warn", "block", "block", "stop"]
        assert agent.executed == 5

    async def test_concurrent_async_runs(self) -> None:
        """Concurrent async runs keep separate counts."""
        guard = lw.LoopGuard(SMALL)

        async def one(run_id: str) -> int:
            agent = ScriptedAgent(guard.run(run_id), {"poll_job": poll_job})
            for i in range(4):
                await agent.aturn([("poll_job", {"job": "42"}, f"c{i}")])
            return sum(s.blocked for s in agent.seen)

        assert await asyncio.gather(one("a"), one("b"), one("c")) == [0, 0, 0]


@all_stores
class TestStateSerialisation:
    def test_round_trip_keeps_behaviour(self, store: Store, clock: FakeClock) -> None:
        """A state written out and read back holds what the original holds and detects alike."""
        config = lw.LoopDetectionConfig.from_dict(SMALL["tools"]["loopDetection"])
        guard = lw.LoopGuard(config, store=store, clock=clock)
        run = guard.run("r")
        for i in range(4):
            run.before_call("t", {}, call_id=str(i))
            run.after_call("t", {}, call_id=str(i), result="same")
        run.on_compaction()

        def dump(st: RunState) -> Any:
            return [r.to_dict() for r in st.window], st.buckets, st.guard.dump()

        data = store.transact(run.key, config, lambda st: st.to_bytes())
        copy = RunState.from_bytes(data, config)
        assert dump(copy) == store.transact(run.key, config, dump)
        assert copy.guard.armed
        with pytest.raises(ValueError):
            RunState.from_bytes(b'{"v": 99}', config)
        # The run goes on from the stored state: the sixth identical call is blocked.
        assert not run.before_call("t", {}, call_id="4").blocked
        run.after_call("t", {}, call_id="4", result="same")
        assert run.before_call("t", {}, call_id="5").blocked


class TestRunRecordLines:
    def test_poll_flag_run_end_and_disabling(self, tmp_path: Path) -> None:
        """Call lines carry the poll flag, runs end with run_end, ``run_record=False`` wins."""
        path = tmp_path / "run.jsonl"
        config = {**ON, "loopwarden": {"runRecord": str(path)}}
        guard = lw.LoopGuard(config)
        with guard.run("r1") as run:
            run.before_call("process", {"action": "poll", "sessionId": "s"}, call_id="1")
            run.before_call("read", {"path": "/a"}, call_id="2")
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        calls = [line for line in lines if line["type"] == "call"]
        assert [c["poll"] for c in calls] == [True, False]
        assert lines[-1] == {"type": "run_end", "ts": lines[-1]["ts"], "run_id": "r1"}
        quiet = lw.LoopGuard(config, run_record=False)
        quiet.run("r2").before_call("read", {}, call_id="x")
        assert "r2" not in path.read_text()


class TestRetriedTransactions:
    """A store may run a transaction twice (optimistic concurrency); effects happen once."""

    def test_events_records_and_logs_happen_once(
        self, tmp_path: Path, lw_logs: pytest.LogCaptureFixture
    ) -> None:
        """Every event, run-record line and log line of a run appears once on a twice store."""
        store = TwiceStore()
        path = tmp_path / "run.jsonl"
        guard = lw.LoopGuard(SMALL, store=store, run_record=path)
        agent = ScriptedAgent(guard.run("r"), {"poll_job": poll_job, "read": lambda p: "same"})
        with capture_events() as events:
            agent.turn([("read", {"p": 1}, "before")])
            agent.run.on_compaction()
            with pytest.raises(lw.CompactionLoopPersisted):
                for i in range(3):
                    agent.turn([("read", {"p": 1}, f"r{i}")])
            stuck = ScriptedAgent(guard.run("s"), {"poll_job": poll_job})
            with pytest.raises(lw.CircuitBreakerTripped):
                for i in range(10):
                    stuck.turn([("poll_job", {"job": "1"}, f"c{i}")])
        assert store.runs > 0 and store.runs % 2 == 0  # every function did run twice
        assert [(e.run_id, e.action, e.count) for e in events] == [
            ("r", "warn", 3),
            ("r", "abort", 3),
            ("s", "warn", 3),
            ("s", "block", 5),
            ("s", "block", 6),
            ("s", "stop", 7),
        ]
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        calls = [(line["run_id"], line["call_id"]) for line in lines if line["type"] == "call"]
        assert len(calls) == len(set(calls)) == 4 + 8
        assert [line["type"] for line in lines].count("run_start") == 2
        assert [line["type"] for line in lines].count("compaction") == 1
        messages = [r.getMessage() for r in lw_logs.records]
        assert messages.count("post-compaction guard armed for 3 attempts") == 1
        assert sum("post-compaction loop persisted" in m for m in messages) == 1


class TestClock:
    def test_records_and_events_read_the_given_clock(self, tmp_path: Path) -> None:
        """``LoopGuard(clock=...)`` stamps the window, the events and the run record."""
        clock = FakeClock(1000.0)
        path = tmp_path / "run.jsonl"
        guard = lw.LoopGuard(SMALL, clock=clock, run_record=path)
        run = guard.run("r")
        with capture_events() as events:
            for i in range(4):
                clock.advance(10)
                run.before_call("t", {}, call_id=str(i))
                run.after_call("t", {}, call_id=str(i), result="same")
        stamps = [r["timestamp"] for r in run.snapshot()["records"]]
        assert stamps == [1010.0, 1020.0, 1030.0, 1040.0]
        assert [e.time for e in events] == [1040.0]
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert {line["ts"] for line in lines if "ts" in line} == {1010.0, 1020.0, 1030.0, 1040.0}

    def test_idle_runs_expire_by_the_guard_clock(self) -> None:
        """A run idle for longer than the TTL starts afresh (the default store shares the clock)."""
        clock = FakeClock()
        config = {**SMALL, "loopwarden": {"stateTtlSeconds": 60}}
        guard = lw.LoopGuard(config, clock=clock)
        run = guard.run("r")
        for i in range(5):
            run.before_call("t", {}, call_id=str(i))
            run.after_call("t", {}, call_id=str(i), result="same")
        clock.advance(61)
        store = guard.store
        assert isinstance(store, lw.MemoryStore)
        store.expire()
        assert not run.before_call("t", {}, call_id="5").blocked
        assert len(run.snapshot()["records"]) == 1


class TestRunRecordSchema:
    def test_lines_follow_the_schema(self, tmp_path: Path) -> None:
        """Every line has exactly the fields ``runrecord.FIELDS`` lists for its type, in order."""
        path = tmp_path / "run.jsonl"
        agent, _ = stuck_agent(SMALL, run_record=path)
        with pytest.raises(lw.CircuitBreakerTripped):
            for i in range(10):
                agent.turn([("poll_job", {"job": "42"}, f"c{i}")])
        agent.run.on_compaction()
        agent.run.end()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert {line["type"] for line in lines} == runrecord.LINE_TYPES
        for line in lines:
            if line["type"] != runrecord.EVENT:
                assert tuple(line) == ("type", *runrecord.FIELDS[line["type"]])

    def test_a_malformed_line_is_logged_not_raised(
        self, tmp_path: Path, lw_logs: pytest.LogCaptureFixture
    ) -> None:
        """A line with the wrong number of fields never reaches the agent as an error."""
        record = lw.JsonlRunRecord(tmp_path / "run.jsonl")
        record.line(runrecord.RUN_END, 1.0)
        record.line("no-such-type", 1.0, "r")
        record.close()
        assert not (tmp_path / "run.jsonl").exists()
        assert len([r for r in lw_logs.records if r.levelno == logging.ERROR]) == 2
