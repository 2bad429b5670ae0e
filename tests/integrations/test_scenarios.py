"""The behaviours every framework integration shares, run over every framework.

Each framework runs a real agent with a scripted offline model (``_drivers.py``);
what is specific to one framework stays in its own ``test_<framework>.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from tests.integrations._drivers import DRIVERS, Call, Driver, Script
from tests.integrations._drivers_more import AG2, AG2OpenAI, CrewAI
from tests.integrations._drivers_smolagents_llamaindex import LLAMAINDEX_DRIVERS, SMOLAGENTS_DRIVERS
from tests.integrations._shared import (
    BLOCKED,
    REPEATED,
    SMALL,
    WARNING,
    Events,
    import_error_without,
)

DRIVERS = (*DRIVERS, AG2(), AG2OpenAI(), CrewAI())

all_frameworks = pytest.mark.parametrize(
    "driver",
    [
        pytest.param(
            d,
            id=d.name,
            marks=[
                pytest.mark.skipif(d.missing() is not None, reason=f"needs {d.missing()}"),
                *(pytest.mark.filterwarnings(w) for w in d.warnings_ignored),
            ],
        )
        for d in (*DRIVERS, *SMOLAGENTS_DRIVERS, *LLAMAINDEX_DRIVERS)
    ],
)
# ADK's event compaction warns that it is experimental; pytest turns warnings into errors.
pytestmark = pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")

DEFAULTS = {"tools": {"loopDetection": {"enabled": True}}}


def poll_tool(ran: list[str], result: Callable[[str, int], str] | None = None) -> Any:
    async def poll_status(job: str) -> str:
        """Check whether a job has finished."""
        await asyncio.sleep(0)  # concurrent runs interleave here
        ran.append(job)
        return result(job, len(ran)) if result is not None else "pending"

    return poll_status


def repeat(tool: str, args: dict[str, Any], turns: int | None = None) -> Script:
    """The same call every turn (call ids c0, c1, ...), for ``turns`` turns or until stopped."""

    def script(turn: int) -> list[Call] | None:
        if turns is not None and turn >= turns:
            return None
        return [(tool, args, f"c{turn}")]

    return script


@all_frameworks
def test_stuck_agent_is_warned_then_blocked_then_stopped(driver: Driver, events: Events) -> None:
    """Warned at the 4th identical call, blocked (not run) from the 6th, stopped at the 8th."""
    ran: list[str] = []
    adapter = driver.adapter(SMALL, on_event=events)

    result = driver.run(adapter, repeat("poll_status", {"job": "42"}), [poll_tool(ran)])

    stop = result.stop
    assert isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.code, stop.tool_name, stop.count) == ("global_circuit_breaker", "poll_status", 7)
    assert len(ran) == 5  # the blocked calls never ran
    got = result.answers
    assert [got[f"c{i}"] for i in (0, 1, 2, 4)] == ["pending"] * 4
    assert got["c3"].startswith("pending\n\n" + WARNING + " 3 times")
    assert got["c5"].startswith(BLOCKED) and got["c6"].startswith(BLOCKED)
    assert "c7" not in got  # the stop answered nobody: the run ended there
    assert result.model_calls == 8  # and the model was not asked again
    assert events.actions() == ["warn", "block", "block", "stop"]
    assert {e.agent_id for e in events.items} == {"poller"}  # the agent's name


@all_frameworks
def test_stuck_agent_with_the_default_thresholds(driver: Driver) -> None:
    """README and the integration pages: warned at the 11th identical call (only then: the
    21st is blocked already), blocked from the 21st to the 30th, stopped at the 31st."""
    ran: list[str] = []
    adapter = driver.adapter(DEFAULTS)

    result = driver.run(adapter, repeat("poll_status", {"job": "42"}), [poll_tool(ran)])

    assert isinstance(result.stop, lw.CircuitBreakerTripped) and result.stop.count == 30
    assert len(ran) == 20
    got = [result.answers[f"c{n}"] for n in range(30)]
    assert [n + 1 for n, text in enumerate(got) if WARNING in text] == [11]
    assert [n + 1 for n, text in enumerate(got) if text.startswith(BLOCKED)] == list(range(21, 31))
    # The texts the docs quote.
    assert got[10].startswith(
        "pending\n\nWARNING: the job is still running: poll_status has been polled 10 times, "
        "and its result has not changed."
    )
    assert got[20].startswith(
        "CRITICAL: loopwarden blocked this call: the job is still running, and poll_status "
        "has been polled 20 times with no change in its result."
    )
    assert result.model_calls == 31


@all_frameworks
def test_progress_is_never_blocked(driver: Driver, events: Events) -> None:
    """Same arguments with a changing result: warned at calls 11, 21 and 31 (README), never
    blocked or stopped, and the agent finishes."""
    ran: list[str] = []
    tool = poll_tool(ran, lambda job, n: f"{n * 3}% done")
    adapter = driver.adapter(DEFAULTS, on_event=events)

    result = driver.run(adapter, repeat("poll_status", {"job": "42"}, turns=35), [tool])

    assert result.stop is None and result.final == "done"
    assert len(ran) == 35
    warned = [n + 1 for n in range(35) if REPEATED in result.answers[f"c{n}"]]
    assert warned == [11, 21, 31]
    assert events.actions() == ["warn"] * 3
    assert not any(BLOCKED in text for text in result.answers.values())


@all_frameworks
def test_hallucinated_tool_is_blocked_then_stopped(driver: Driver, events: Events) -> None:
    """The framework answers the first misses itself; loopwarden blocks from the 4th and stops."""
    ran: list[str] = []
    adapter = driver.adapter(SMALL, on_event=events)

    result = driver.run(adapter, repeat("no_such_tool", {"q": "x"}), [poll_tool(ran)])

    stop = result.stop
    assert isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.detector, stop.tool_name, stop.count) == ("unknown_tool_repeat", "no_such_tool", 7)
    got = result.answers
    for n in range(3):  # the framework's own answer, naming the tool where it does
        assert BLOCKED not in got[f"c{n}"] and got[f"c{n}"]
        assert "no_such_tool" in got[f"c{n}"] or not driver.unknown_tool_named
    for n in range(3, 7):
        assert "there is no tool named 'no_such_tool'" in got[f"c{n}"]
    assert events.actions() == ["block"] * 4 + ["stop"]
    assert ran == []


@all_frameworks
def test_loop_after_compaction_is_ended(driver: Driver, lw_logs: Any) -> None:
    """Defaults (detectors off): after the framework compacts the context, three identical
    calls with identical results end the run with compaction_loop_persisted."""
    ran: list[str] = []
    adapter = driver.adapter(None)

    result = driver.run(
        adapter, repeat("poll_status", {"job": "42"}), [poll_tool(ran)], compact=True
    )

    stop = result.stop
    assert isinstance(stop, lw.CompactionLoopPersisted)
    assert (stop.code, stop.tool_name, stop.count) == (
        "compaction_loop_persisted",
        "poll_status",
        3,
    )
    assert lw_logs.text.count("post-compaction guard armed for 3 attempts") == 1
    assert 3 <= len(ran) < 12


@all_frameworks
def test_loop_after_compaction_is_ended_with_every_rule_on(driver: Driver) -> None:
    """Detection on (loopwarden's own rules too): the loop that goes on through the
    framework's compaction still ends with compaction_loop_persisted, not with a stop of
    another rule that saw the repeats first."""
    ran: list[str] = []
    adapter = driver.adapter({"tools": {"loopDetection": {"enabled": True}}})

    result = driver.run(
        adapter, repeat("poll_status", {"job": "42"}), [poll_tool(ran)], compact=True
    )

    stop = result.stop
    assert isinstance(stop, lw.CompactionLoopPersisted), stop
    assert (stop.code, stop.tool_name) == ("compaction_loop_persisted", "poll_status")
    assert 3 <= len(ran) < 12


@all_frameworks
def test_concurrent_runs_do_not_share_counts(driver: Driver, events: Events) -> None:
    """Two runs at once on one integration object: 10 identical calls together, 5 each, so
    each run is warned once and nothing is blocked."""
    adapter = driver.adapter(SMALL, on_event=events)
    ran: list[str] = []

    async def both() -> list[Any]:
        script = repeat("poll_status", {"job": "42"}, turns=5)
        return list(
            await asyncio.gather(
                driver.arun(adapter, script, [poll_tool(ran)]),
                driver.arun(adapter, script, [poll_tool(ran)]),
            )
        )

    results = asyncio.run(both())

    assert [r.final for r in results] == ["done", "done"]
    assert len(ran) == 10
    assert events.actions() == ["warn", "warn"]
    assert len({e.run_id for e in events.items}) == 2
    for result in results:
        assert result.answers["c3"].startswith("pending\n\n" + WARNING)
        assert [WARNING in result.answers[f"c{n}"] for n in range(5)] == [False] * 3 + [True, False]


@all_frameworks
def test_internal_failure_fails_open(driver: Driver, tmp_path: Path, lw_logs: Any) -> None:
    """A state store that cannot be used (a corrupt SQLite file) is logged, and every call
    runs as if loopwarden were not there: the stuck agent is neither warned nor stopped."""
    database = tmp_path / "lw.db"
    database.write_bytes(b"not a SQLite database, " * 100)
    ran: list[str] = []
    adapter = driver.adapter(SMALL, store=f"sqlite:///{database}")

    result = driver.run(adapter, repeat("poll_status", {"job": "42"}, turns=9), [poll_tool(ran)])
    adapter.guard.close()

    assert result.stop is None and result.final == "done"
    assert len(ran) == 9
    assert all(text == "pending" for text in result.answers.values())
    failures = [r for r in lw_logs.records if "loopwarden internal error" in r.getMessage()]
    assert failures and all(r.levelno == logging.ERROR for r in failures)
    assert "file is not a database" in lw_logs.text


@all_frameworks
def test_missing_extra_names_the_extra(driver: Driver) -> None:
    """Without the framework, importing the integration says which extra to install."""
    message = import_error_without(driver.module, *driver.hidden)
    assert f"pip install 'loopwarden[{driver.extra}]'" in message


@all_frameworks
def test_parallel_calls_are_paired_by_call_id(driver: Driver, tmp_path: Path) -> None:
    """Two calls per turn run together, one repeated and one progressing: each decision and
    each recorded outcome belongs to its own call."""
    ran: list[str] = []

    async def read_log(offset: int) -> str:
        """Read the build log from an offset."""
        await asyncio.sleep(0)
        ran.append("read")
        return f"log from {offset}: compiling"

    def script(turn: int) -> list[Call] | None:
        n = turn + 1
        return [
            ("poll_status", {"job": "42"}, f"p{n}"),
            ("read_log", {"offset": turn * 100}, f"r{n}"),
        ]

    # warningThreshold 4: with 3, any two interleaved calls already count as a ping-pong.
    config = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 4,
                "criticalThreshold": 6,
                "globalCircuitBreakerThreshold": 8,
            }
        }
    }
    record = tmp_path / "run.jsonl"
    adapter = driver.adapter(config, run_record=record, log_params=True)

    result = driver.run(adapter, script, [poll_tool(ran), read_log])
    adapter.guard.close()

    stop = result.stop
    assert isinstance(stop, lw.CircuitBreakerTripped)
    assert (stop.tool_name, stop.count) == ("poll_status", 8)
    got = result.answers
    assert [got[f"r{n}"] for n in range(1, 9)] == [
        f"log from {n * 100}: compiling" for n in range(8)
    ]
    assert [n for n in range(1, 9) if WARNING in got[f"p{n}"]] == [5]
    assert [n for n in range(1, 9) if got[f"p{n}"].startswith(BLOCKED)] == [7, 8]
    assert ran.count("42") == 6

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    calls = {line["call_id"]: line for line in lines if line["type"] == "call"}
    outcomes = [line for line in lines if line["type"] == "outcome"]
    expected = sorted([f"p{n}" for n in range(1, 7)] + [f"r{n}" for n in range(1, 9)])
    # r9 runs beside p9, the call that stops the run, in the same turn: whether it started
    # before the stop ended the turn is the framework's scheduling (LangGraph on Python 3.13
    # sometimes starts it first). Either way it is paired with its own call.
    assert sorted(o["call_id"] for o in outcomes) in (expected, sorted([*expected, "r9"]))
    for line in outcomes:
        call = calls[line["call_id"]]
        expected = (
            "pending" if call["tool"] == "poll_status" else f"log from {call['params']['offset']}"
        )
        assert expected in json.dumps(line["result"])
        recorded = lw.hash_outcome(call["tool"], call["params"], result=line["result"])
        assert line["outcome_hash"] == recorded.hash
