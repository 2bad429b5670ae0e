"""One ``LoopGuard`` on a healthy Redis under many threads and asyncio tasks.

Every call made must be recorded exactly once, whatever the concurrency and
whatever ``pool_size``: waiting for a free connection is contention, never an
outage, so it must neither fail calls open nor log "unavailable".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

import pytest

import loopwarden as lw
from tests.stores.conftest import SEMANTICS

pytestmark = pytest.mark.timeout(300)

WORKERS, CALLS = 96, 40
# A window that holds every call of a run, so that each can be counted.
CONFIG: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True, "historySize": 64}}}


def store_url(server: Any, pool_size: int | None) -> str:
    url = f"{server.url}?prefix=load{uuid.uuid4().hex[:8]}:"
    return url if pool_size is None else f"{url}&pool_size={pool_size}"


class Records(logging.Handler):
    """The loopwarden logger's records at WARNING and above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(name="warnings_seen")
def fixture_warnings_seen() -> Any:
    handler = Records()
    log = logging.getLogger("loopwarden")
    log.addHandler(handler)
    yield handler.records
    log.removeHandler(handler)


def drive(run: lw.RunGuard, worker: int) -> None:
    for n in range(CALLS):
        params = {"path": f"/w{worker}/f{n}.py"}
        decision = run.before_call("read_file", params, call_id=f"c{n}")
        assert not decision.blocked
        run.after_call("read_file", params, call_id=f"c{n}", result=f"text {worker} {n}")


async def adrive(run: lw.RunGuard, worker: int) -> None:
    for n in range(CALLS):
        params = {"path": f"/w{worker}/f{n}.py"}
        decision = await run.abefore_call("read_file", params, call_id=f"c{n}")
        assert not decision.blocked
        await run.aafter_call("read_file", params, call_id=f"c{n}", result=f"text {worker} {n}")


def recorded(url: str, run_ids: list[str]) -> list[int]:
    """How many calls of each run a fresh guard on ``url`` finds stored with their outcome."""
    guard = lw.LoopGuard(CONFIG, store=url)
    try:
        counts = []
        for run_id in run_ids:
            records = guard.run(run_id).snapshot()["records"]
            counts.append(sum(1 for r in records if r.get("result_hash") is not None))
        return counts
    finally:
        guard.close()


def unavailable(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("pool_size", [None, 4, 1], ids=["default-pool", "pool-4", "pool-1"])
def test_threads_record_every_call(
    redis_server: Any, pool_size: int | None, warnings_seen: Any
) -> None:
    """96 threads x 40 calls through one guard: every call and outcome is recorded, and
    nothing says Redis is unavailable."""
    url = store_url(redis_server, pool_size)
    guard = lw.LoopGuard(CONFIG, store=url)
    ids = [f"t{w}" for w in range(WORKERS)]
    runs = [guard.run(run_id) for run_id in ids]
    start = threading.Barrier(WORKERS)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            start.wait()
            drive(runs[w], w)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    guard.close()
    assert not errors, errors[:3]
    counts = recorded(url, ids)
    assert sum(counts) == WORKERS * CALLS, f"{WORKERS * CALLS - sum(counts)} calls lost"
    assert counts == [CALLS] * WORKERS
    assert not unavailable(warnings_seen)


@pytest.mark.parametrize("pool_size", [None, 4, 1], ids=["default-pool", "pool-4", "pool-1"])
def test_tasks_record_every_call(
    redis_server: Any, pool_size: int | None, warnings_seen: Any
) -> None:
    """96 asyncio tasks x 40 calls through one guard: every call and outcome is recorded."""
    # 96 tasks share one event loop: on a loaded CI machine an answer can wait longer than
    # the default 0.25 s for the loop to come back to it. The answer timeout is not what is
    # tested; waiting for a turn at the pool is (pool-1 waits far longer than 2 s in all).
    url = f"{store_url(redis_server, pool_size)}&{SEMANTICS}"
    guard = lw.LoopGuard(CONFIG, store=url)
    ids = [f"a{w}" for w in range(WORKERS)]
    runs = [guard.run(run_id) for run_id in ids]

    async def main() -> None:
        try:
            await asyncio.gather(*(adrive(runs[w], w) for w in range(WORKERS)))
        finally:
            aclose = getattr(guard.store, "aclose", None)
            if aclose is not None:
                await aclose()

    asyncio.run(main())
    guard.close()
    counts = recorded(url, ids)
    assert sum(counts) == WORKERS * CALLS, f"{WORKERS * CALLS - sum(counts)} calls lost"
    assert counts == [CALLS] * WORKERS
    assert not unavailable(warnings_seen)


OUTAGE_APP = r"""
import logging, sys, time
import loopwarden as lw
from loopwarden.errors import StoreError

logging.basicConfig(level=logging.WARNING)  # what many applications do
guard = lw.LoopGuard(store=sys.argv[1])
run = guard.run("outage")
for n in range(40):
    run.before_call("read_file", {"n": n}, call_id=f"c{n}")
    run.after_call("read_file", {"n": n}, call_id=f"c{n}", result="x")
run.end()
print("down", flush=True)
sys.stdin.readline()  # the server is up now
deadline = time.monotonic() + 60
while True:  # the store probes again after its back-off
    try:
        run.snapshot()
        break
    except StoreError:
        assert time.monotonic() < deadline, "Redis never came back"
        time.sleep(0.05)
run.before_call("read_file", {"n": 99}, call_id="c99")
print("up", flush=True)
"""


def test_an_outage_logs_one_warning_not_one_record_per_call(tmp_path: Any) -> None:
    """An app with ``logging.basicConfig(level=WARNING)`` and Redis down for 40 calls (and a
    run end): one warning for the outage, one when Redis is back, and no other record."""
    import subprocess
    import sys

    from tests.stores.redis._servers import Server, free_port, require_redis

    require_redis()
    server = Server(tmp_path / "redis", port=free_port())
    script = tmp_path / "app.py"
    script.write_text(OUTAGE_APP)
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:
        app = subprocess.Popen(
            [sys.executable, str(script), f"{server.url}?prefix=outage:"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert app.stdout is not None and app.stdin is not None
        assert app.stdout.readline() == b"down\n", log.read_text()
        server.start()
        app.stdin.write(b"go\n")
        app.stdin.flush()
        assert app.stdout.readline() == b"up\n", log.read_text()
        assert app.wait(60) == 0
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        for pipe in (app.stdin, app.stdout):
            if pipe is not None:
                pipe.close()
        server.stop()
    lines = log.read_text().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("WARNING:loopwarden:") and "unavailable" in lines[0]
    assert lines[1].startswith("WARNING:loopwarden:") and "reachable again" in lines[1]
