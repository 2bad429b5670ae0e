"""What only the SQLite store does: files, migrations, processes, crashes, clear failures.

The store contract every backend keeps is in ``test_contract.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.errors import StoreError
from loopwarden.stores import store_from_url
from loopwarden.stores.sqlite import CACHED_RUNS, SCHEMA_VERSION, SQLiteStore, default_state_path
from loopwarden.testing import FakeClock
from tests._snippets import snippet
from tests._wait import wait_until
from tests.stores import _workers
from tests.stores._workers import CONFIG, KEY

SPAWN = multiprocessing.get_context("spawn")
DATA = Path(__file__).parent / "data"


@pytest.fixture(name="db")
def fixture_db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "lw.db"


def create(path: Path) -> None:
    store = SQLiteStore(path)
    store.schema_version()
    store.close()


def count(path: Path) -> int:
    store = SQLiteStore(path)
    try:
        state = store.load(KEY, CONFIG)
        return -1 if state is None else state.miss_count
    finally:
        store.close()


@contextlib.contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """A directory nobody can create files in, root included (immutable flag for root)."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a directory unwritable")
        done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
    else:
        directory.chmod(0o500)
        try:
            yield
        finally:
            directory.chmod(0o700)


class TestUrlsAndPaths:
    def test_urls(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """sqlite:// URLs select absolute, relative, home and default paths, with options."""
        monkeypatch.chdir(tmp_path)
        assert SQLiteStore.from_url("sqlite:///var/lib/lw.db").path == Path("/var/lib/lw.db")
        assert SQLiteStore.from_url("sqlite:////var/lib/lw.db").path == Path("/var/lib/lw.db")
        assert SQLiteStore.from_url("sqlite://rel/lw.db").path == Path("rel/lw.db")
        assert SQLiteStore.from_url("sqlite://~/lw.db").path == Path.home() / "lw.db"
        store = SQLiteStore.from_url("sqlite:///x.db?busy_timeout=0.5", ttl_seconds=60)
        assert (store.busy_timeout, store.ttl_seconds) == (0.5, 60)
        assert SQLiteStore.from_url("sqlite://").path == default_state_path()
        built = store_from_url(f"sqlite://{tmp_path}/a.db", ttl_seconds=5)
        assert isinstance(built, SQLiteStore) and built.ttl_seconds == 5
        assert built.url == f"sqlite://{tmp_path}/a.db"

    def test_bad_urls(self) -> None:
        """A malformed URL is a config mistake, reported as ConfigError."""
        with pytest.raises(lw.ConfigError, match="unknown option 'timeout'"):
            SQLiteStore.from_url("sqlite:///x.db?timeout=3")
        with pytest.raises(lw.ConfigError, match="number of seconds"):
            SQLiteStore.from_url("sqlite:///x.db?busy_timeout=soon")
        with pytest.raises(lw.ConfigError, match="not a sqlite:// URL"):
            SQLiteStore.from_url("sqlite:/x.db")

    def test_default_path(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The default file follows XDG on Linux and Application Support on macOS."""
        monkeypatch.setattr("sys.platform", "linux")
        env = {"HOME": "/home/u", "XDG_DATA_HOME": "/data"}
        assert default_state_path(env) == Path("/data/loopwarden/state.db")
        env = {"HOME": "/home/u", "XDG_DATA_HOME": "relative/ignored"}
        assert default_state_path(env) == Path("/home/u/.local/share/loopwarden/state.db")
        monkeypatch.setattr("sys.platform", "darwin")
        assert default_state_path({"HOME": "/Users/u"}) == Path(
            "/Users/u/Library/Application Support/loopwarden/state.db"
        )

    def test_lazy_open_and_schema(self, db: Path) -> None:
        """The file is created on first use, in WAL mode, with the current schema."""
        store = SQLiteStore(db)
        assert not db.exists()  # nothing happens until the first use
        assert store.schema_version() == SCHEMA_VERSION
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "kv"} <= tables
        conn.close()
        store.close()


class TestTransactions:
    @pytest.mark.parametrize(
        "damage",
        [
            "UPDATE runs SET rest = x'7b2276223a203939397d', ver = ver + 1",  # {"v": 999}
            "UPDATE run_rows SET row = x'5b315d', ver = ver + 1000",  # [1]
        ],
        ids=["head", "row"],
    )
    def test_unreadable_run_starts_afresh(
        self, db: Path, damage: str, lw_logs: pytest.LogCaptureFixture
    ) -> None:
        """A run whose head or rows are in an unknown format restarts, with a warning."""
        store = SQLiteStore(db)
        store.transact(KEY, CONFIG, _workers._bump)
        store.transact(KEY, CONFIG, _workers.add_call)
        conn = sqlite3.connect(db)
        conn.execute(damage)
        conn.execute("UPDATE runs SET ver = ver + 1")  # as another writer would
        conn.commit()
        conn.close()
        assert store.transact(KEY, CONFIG, _workers._bump) == 1
        assert "unreadable" in lw_logs.text
        assert store.transact(KEY, CONFIG, lambda st: len(st.window)) == 0
        store.close()

    async def test_many_first_opens_of_a_fresh_file(self, tmp_path: Path) -> None:
        """Threads that open a new file at once wait for whichever creates the schema."""
        for attempt in range(15):
            store = SQLiteStore(tmp_path / f"fresh-{attempt}.db")
            results = await asyncio.gather(
                *(store.atransact(KEY, CONFIG, _workers._bump) for _ in range(12))
            )
            assert sorted(results) == list(range(1, 13))
            store.close()

    def test_expiry_is_opportunistic_and_bounded(self, db: Path) -> None:
        """A new run removes at most one batch of expired rows; expire() removes the rest."""
        store = SQLiteStore(db, ttl_seconds=60)
        for i in range(450):
            store.transact(f"old-{i}", CONFIG, _workers._bump)
        store.transact_value("side-old", lambda old: (b"x", None))
        conn = sqlite3.connect(db)
        conn.execute("UPDATE runs SET updated = updated - 3600")
        conn.execute("UPDATE kv SET updated = updated - 3600")
        conn.commit()
        store.transact("fresh", CONFIG, _workers._bump)  # a new run triggers one batch
        remaining = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        assert remaining == 450 - 200 + 1
        assert conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0] == 0
        store.expire()
        assert [r[0] for r in conn.execute("SELECT key FROM runs")] == ["fresh"]
        conn.close()
        store.close()

    def test_forked_child_opens_its_own_connection(self, db: Path) -> None:
        """A forked child uses its own connection, never the parent's."""
        store = SQLiteStore(db)
        store.transact(KEY, CONFIG, _workers._bump)  # the parent's connection exists now
        pid = os.fork()
        if pid == 0:  # child: use the inherited store object
            code = 0
            try:
                store.transact(KEY, CONFIG, _workers._bump)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.transact(KEY, CONFIG, _workers._bump) == 3
        store.close()


def head(db: Path) -> tuple[int, int]:
    """(ver, rows written by that version) of the only run in ``db``."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        ver = conn.execute("SELECT ver FROM runs").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM run_rows WHERE ver = ?", (ver,)).fetchone()[0]
    return ver, rows


Step = tuple[str, Any]


def script(seed: int, steps: int) -> list[Step]:
    """Guarded calls over a few tools, params and results, often repeated, so that rules
    warn, block and stop; outcomes sometimes reported late and out of order, some never."""
    rng = random.Random(seed)
    done: list[Step] = []
    pending: list[tuple[str, dict[str, int], str]] = []
    tool, params = "read", {"x": 0}
    for n in range(steps):
        if pending and rng.random() < 0.45:
            call = pending.pop(rng.randrange(len(pending)) if rng.random() < 0.3 else -1)
            result = "same" if rng.random() < 0.9 else f"out-{rng.randrange(3)}"
            done.append(("after", (*call, result)))
            continue
        if rng.random() < 0.2:  # something else than the call before
            tool, params = rng.choice(["read", "grep", "poll"]), {"x": rng.randrange(3)}
        call = (tool, params, f"c{n}")
        done.append(("before", call))
        if rng.random() < 0.9:
            pending.append(call)
    return done


def play(runs: list[lw.RunGuard], steps: list[Step], pick: random.Random) -> list[Any]:
    """Each step through a run picked at random; what every step answered."""
    seen: list[Any] = []
    for kind, call in steps:
        run = runs[pick.randrange(len(runs))]
        try:
            if kind == "before":
                decision = run.before_call(*call)
                seen.append((decision.action, decision.message))
            else:
                tool, params, call_id, result = call
                seen.append(run.after_call(tool, params, call_id=call_id, result=result))
        except lw.LoopAbort as stop:
            seen.append(("stop", str(stop)))
    seen.append(runs[0].snapshot())
    return seen


LOOPS = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "historySize": 12,
            "warningThreshold": 4,
            "criticalThreshold": 6,
            "globalCircuitBreakerThreshold": 9,
        }
    }
}


class TestRowsAndCache:
    """A run is stored as rows; a process keeps it decoded between updates."""

    def test_an_update_writes_only_what_it_changed(self, db: Path) -> None:
        """Each step writes the one row it changed; a step that changes nothing writes
        nothing."""
        guard = lw.LoopGuard(LOOPS, store=f"sqlite://{db}")
        run = guard.run("r")
        for i in range(30):  # past the window: rows are reused in a ring
            run.before_call("read", {"i": i}, call_id=f"c{i}")
            ver, rows = head(db)
            assert rows == 1
            run.after_call("read", {"i": i}, call_id=f"c{i}", result="text")
            assert head(db) == (ver + 1, 1)
        run.snapshot()
        assert head(db) == (ver + 1, 1)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT count(*) FROM run_rows").fetchone()[0] == 12
        guard.close()

    @pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 6])  # each blocks some call
    def test_store_objects_taking_turns_decide_as_one_memory_store(
        self, db: Path, seed: int
    ) -> None:
        """Three store objects (three caches) taking turns on one run, the outcomes coming
        late and out of order, answer every step as one memory store does."""
        steps = script(seed, 160)
        clock = FakeClock()
        memory = lw.LoopGuard(LOOPS, clock=clock)
        expected = play([memory.run("r")], steps, random.Random(0))
        guards = [
            lw.LoopGuard(LOOPS, store=SQLiteStore(db, clock=clock), clock=clock) for _ in range(3)
        ]
        assert play([g.run("r") for g in guards], steps, random.Random(seed)) == expected
        assert any(isinstance(s, tuple) and s[0] == "block" for s in expected)
        for guard in guards:
            guard.close()

    def test_a_cache_behind_by_more_than_a_window(self, db: Path) -> None:
        """A process whose copy is older than the whole window reads the run afresh."""
        first = lw.LoopGuard(LOOPS, store=f"sqlite://{db}")
        second = lw.LoopGuard(LOOPS, store=f"sqlite://{db}")
        one, other = first.run("r"), second.run("r")
        one.before_call("read", {"i": -1}, call_id="old")
        for i in range(30):
            other.before_call("read", {"i": i}, call_id=f"c{i}")
            other.after_call("read", {"i": i}, call_id=f"c{i}", result="text")
        one.after_call("read", {"i": -1}, call_id="old", result="text")
        assert one.snapshot() == other.snapshot()
        # The old call's outcome came after the call left the window: recorded anew.
        ids = [r["call_id"] for r in one.snapshot()["records"]]
        assert ids == [*(f"c{i}" for i in range(19, 30)), "old"]
        first.close()
        second.close()

    def test_processes_with_different_window_sizes(self, db: Path) -> None:
        """Two configs of different historySize on one run: each sees its own window of
        the same calls."""
        small = lw.LoopGuard(
            {"tools": {"loopDetection": {"historySize": 5}}}, store=f"sqlite://{db}"
        )
        large = lw.LoopGuard(
            {"tools": {"loopDetection": {"historySize": 8}}}, store=f"sqlite://{db}"
        )
        runs = [small.run("r"), large.run("r")]
        for i in range(20):
            run = runs[i % 2]
            run.before_call("read", {"i": i}, call_id=f"c{i}")
            run.after_call("read", {"i": i}, call_id=f"c{i}", result="text")
            ids = [[r["call_id"] for r in run.snapshot()["records"]] for run in runs]
            assert ids[0] == [f"c{j}" for j in range(max(0, i - 4), i + 1)]
            assert ids[1][-len(ids[0]) :] == ids[0]
        small.close()
        large.close()

    def test_the_cache_is_bounded(self, db: Path) -> None:
        """A process keeps at most CACHED_RUNS runs decoded."""
        store = SQLiteStore(db)
        for i in range(CACHED_RUNS + 20):
            store.transact(f"run-{i}", CONFIG, _workers.add_call)
        assert len(store._cache) == CACHED_RUNS
        assert store.transact("run-0", CONFIG, _workers.add_call) == 2  # read back whole
        store.close()

    def test_keys_that_utf8_cannot_encode(self, db: Path) -> None:
        """Run and side-record keys with lone surrogates are stored, listed and deleted."""
        store = SQLiteStore(db)
        key = "agent\x1fsession-\udcff\x1frun-\ud800"
        assert store.transact(key, CONFIG, _workers._bump) == 1
        assert store.transact("plain", CONFIG, _workers._bump) == 1
        assert SQLiteStore(db).transact(key, CONFIG, _workers._bump) == 2
        assert store.keys() == sorted([key, "plain"])
        store.transact_value("side-\udc80", lambda old: (b"x", None))
        assert store.read_value("side-\udc80") == b"x"
        store.delete_value("side-\udc80")
        assert store.read_value("side-\udc80") is None
        store.delete(key)
        assert store.keys() == ["plain"]
        store.close()


class TestMigration:
    """A file written by loopwarden before schema 2 (``data/state-v1.db``, made by the
    release at commit c0ce13b: three reads, two failing ``make test`` runs and a pending
    read on run ``legacy``, one call on run ``second``, one side record; clock starting at
    1_700_000_000, one second per reading; its snapshot and keys in ``state-v1.json``)."""

    SMALL = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 2,
                "criticalThreshold": 3,
                "globalCircuitBreakerThreshold": 4,
                "historySize": 20,
            }
        }
    }

    def replay(self, guard: lw.LoopGuard) -> lw.RunGuard:
        """The calls the old release made on ``legacy``, made again."""
        run = guard.run("legacy", session_id="s", agent_id="a")
        for i in range(3):
            run.before_call("read", {"path": f"/src/f{i}.py"}, call_id=f"d{i}")
            run.after_call("read", {"path": f"/src/f{i}.py"}, call_id=f"d{i}", result=f"text {i}")
        for i in range(2):
            run.before_call("bash", {"cmd": "make test"}, call_id=f"m{i}")
            run.after_call("bash", {"cmd": "make test"}, call_id=f"m{i}", result="FAILED 1 test")
        run.before_call("read", {"path": "/src/pending.py"}, call_id="pending")
        return run

    def carry_on(self, run: lw.RunGuard) -> list[Any]:
        run.after_call("read", {"path": "/src/pending.py"}, call_id="pending", result="text")
        seen: list[Any] = []
        for i in range(2, 6):
            try:
                decision = run.before_call("bash", {"cmd": "make test"}, call_id=f"m{i}")
                seen.append(decision.action)
                run.after_call(
                    "bash", {"cmd": "make test"}, call_id=f"m{i}", result="FAILED 1 test"
                )
            except lw.LoopAbort as stop:
                seen.append(stop.code)
        return seen

    def test_a_schema_1_file_keeps_working(self, tmp_path: Path) -> None:
        """Runs and side records of a schema-1 file are read as they were written, and a
        run goes on exactly as if it had never been stored."""
        db = tmp_path / "state.db"
        shutil.copy(DATA / "state-v1.db", db)
        old = json.loads((DATA / "state-v1.json").read_text())
        clock = FakeClock(1_700_000_100.0)
        store = SQLiteStore(db, clock=clock)
        assert store.keys() == old["keys"]  # listed before any was converted
        guard = lw.LoopGuard(self.SMALL, store=store, clock=clock)
        run = guard.run("legacy", session_id="s", agent_id="a")
        assert json.loads(json.dumps(run.snapshot(), default=str)) == old["snapshot"]
        assert store.schema_version() == SCHEMA_VERSION == 2
        assert store.read_value("hook-side-record") == b"offset=42"
        expected = self.carry_on(self.replay(lw.LoopGuard(self.SMALL, clock=clock)))
        assert self.carry_on(run) == expected
        assert expected[-1] == "global_circuit_breaker" or "block" in expected
        with contextlib.closing(sqlite3.connect(db)) as conn:
            left = [r[0] for r in conn.execute("SELECT key FROM runs_v1")]
        assert len(left) == 1 and left[0].endswith("second")  # converted when first used
        guard.close()

    def test_expired_schema_1_runs_are_deleted(self, tmp_path: Path) -> None:
        """Schema-1 runs idle past the TTL go as other runs do."""
        db = tmp_path / "state.db"
        shutil.copy(DATA / "state-v1.db", db)
        store = SQLiteStore(db, ttl_seconds=60, clock=FakeClock(1_700_100_000.0))
        store.expire()
        assert store.keys() == []
        store.close()


class TestManyProcesses:
    def test_concurrent_increments_are_exact(self, db: Path) -> None:
        """Processes updating one run concurrently never lose an update."""
        create(db)  # the file exists before the race
        start = SPAWN.Event()
        procs = [
            SPAWN.Process(target=_workers.increment, args=(str(db), 60, start)) for _ in range(4)
        ]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert count(db) == 240

    def test_concurrent_guarded_calls_are_all_recorded_once(self, db: Path) -> None:
        """Guarded calls from several processes are each recorded once, outcome paired."""
        start = SPAWN.Event()
        procs = [
            SPAWN.Process(target=_workers.record_calls, args=(str(db), w, 30, start))
            for w in range(3)
        ]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        guard = lw.LoopGuard(
            {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
            store=f"sqlite://{db}",
        )
        records = guard.run("run", session_id="session").snapshot()["records"]
        guard.close()
        ids = [r["call_id"] for r in records]
        assert len(ids) == 90 and len(set(ids)) == 90
        assert all(r["result_hash"] is not None for r in records)  # every outcome paired

    def test_four_processes_hammering_one_run_count_every_call_once(self, db: Path) -> None:
        """Four processes, each with its own cache of the run, all calling at once: every
        call is recorded exactly once, in each process's order, its outcome paired."""
        start = SPAWN.Event()
        procs = [
            SPAWN.Process(target=_workers.record_calls, args=(str(db), w, 150, start))
            for w in range(4)
        ]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        guard = lw.LoopGuard(
            {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
            store=f"sqlite://{db}",
        )
        records = guard.run("run", session_id="session").snapshot()["records"]
        guard.close()
        ids = [r["call_id"] for r in records]
        assert len(ids) == 600 and len(set(ids)) == 600
        assert all(r["result_hash"] is not None for r in records)
        for w in range(4):
            mine = [int(i.split("-")[1]) for i in ids if i.startswith(f"w{w}-")]
            assert mine == list(range(150))


class TestCrashes:
    def test_sigkill_inside_a_transaction(self, db: Path) -> None:
        """A process killed inside a transaction leaves no change and no lock behind."""
        first = SQLiteStore(db)
        first.transact(KEY, CONFIG, _workers._bump)
        first.close()
        ready = SPAWN.Event()
        child = SPAWN.Process(target=_workers.hold_transaction, args=(str(db), ready))
        child.start()
        assert ready.wait(60), "the child never reached the middle of its transaction"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
        store = SQLiteStore(db, busy_timeout=2)
        store.check()
        # The killed update never happened, and the lock it held is gone.
        assert store.transact(KEY, CONFIG, _workers._bump) == 2
        store.close()

    def test_sigkill_while_committing(self, db: Path) -> None:
        """A process killed while committing leaves the file intact, at its last commit."""
        committed = SPAWN.Value("q", 0)
        child = SPAWN.Process(target=_workers.commit_forever, args=(str(db), committed))
        child.start()
        wait_until(lambda: committed.value >= 50, timeout=60, what="50 commits")
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        seen = committed.value
        assert seen >= 50
        store = SQLiteStore(db, busy_timeout=2)
        store.check()
        stored = store.transact(KEY, CONFIG, lambda st: st.miss_count)
        assert stored in (seen, seen + 1)  # killed before or after publishing its last commit
        assert store.transact(KEY, CONFIG, _workers._bump) == stored + 1
        store.close()

    def test_sigkill_while_recording_calls(self, db: Path) -> None:
        """A process killed while recording guarded calls leaves a run another process
        reads whole: every recorded call, the last one perhaps without its outcome."""
        clean = SQLiteStore(db)
        committed = SPAWN.Value("q", 0)
        child = SPAWN.Process(target=_workers.record_forever, args=(str(db), committed))
        child.start()
        wait_until(lambda: committed.value >= 20, timeout=60, what="20 calls")
        guard = lw.LoopGuard(
            {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
            store=f"sqlite://{db}",
        )
        run = guard.run("run", session_id="session")
        early = len(run.snapshot()["records"])  # this process now has the run cached
        wait_until(lambda: committed.value >= early + 50, timeout=60, what="50 more calls")
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        seen = committed.value
        clean.check()
        records = run.snapshot()["records"]  # caught up from the cached copy
        assert len(records) in (seen, seen + 1)
        assert [r["call_id"] for r in records] == [f"c{i}" for i in range(len(records))]
        assert all(r["result_hash"] is not None for r in records[:seen])
        fresh = lw.LoopGuard(
            {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}},
            store=f"sqlite://{db}",
        )
        assert fresh.run("run", session_id="session").snapshot()["records"] == records
        run.before_call("fetch", {"i": "next"}, call_id="next")
        assert len(run.snapshot()["records"]) == len(records) + 1
        guard.close()
        fresh.close()
        clean.close()


class TestFailures:
    def test_not_a_database(self, db: Path) -> None:
        """A file that is not SQLite fails with the path and what to do."""
        db.parent.mkdir(parents=True)
        db.write_bytes(b"definitely not sqlite " * 200)
        store = SQLiteStore(db)
        with pytest.raises(StoreError) as info:
            store.transact(KEY, CONFIG, _workers._bump)
        assert str(db) in str(info.value)
        assert "corrupt or is not a SQLite database" in str(info.value)
        assert "delete it" in str(info.value)

    def test_damaged_pages(self, db: Path) -> None:
        """Damaged pages fail the integrity check with a clear error."""
        store = SQLiteStore(db)
        for i in range(300):
            store.transact(f"run-{i}", CONFIG, _workers._bump)
        store.close()
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        data = bytearray(db.read_bytes())
        data[4096 : 4096 * 3] = b"\xa5" * (4096 * 2)  # overwrite the pages after the header
        db.write_bytes(bytes(data))
        broken = SQLiteStore(db)
        with pytest.raises(StoreError, match=r"corrupt|malformed|integrity check"):
            broken.check()
            broken.transact("run-7", CONFIG, _workers._bump)
        broken.close()

    def test_unwritable_directory(self, tmp_path: Path) -> None:
        """An unwritable directory fails with the path and a hint."""
        locked = tmp_path / "locked"
        with unwritable(locked):
            store = SQLiteStore(locked / "state.db")
            with pytest.raises(StoreError) as info:
                store.transact(KEY, CONFIG, _workers._bump)
        assert str(locked / "state.db") in str(info.value)
        assert "writable" in str(info.value)

    def test_directory_cannot_be_created(self, tmp_path: Path) -> None:
        """A directory that cannot be created fails with a clear error."""
        (tmp_path / "file").write_text("a file, not a directory")
        store = SQLiteStore(tmp_path / "file" / "sub" / "state.db")
        with pytest.raises(StoreError, match="could not create its directory"):
            store.transact(KEY, CONFIG, _workers._bump)

    def test_newer_schema_is_refused(self, db: Path) -> None:
        """A file from a newer loopwarden is refused, not damaged."""
        db.parent.mkdir(parents=True)
        conn = sqlite3.connect(db)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
        store = SQLiteStore(db)
        with pytest.raises(StoreError, match="newer than this loopwarden supports"):
            store.transact(KEY, CONFIG, _workers._bump)
        store.close()

    def test_old_file_is_migrated(self, db: Path) -> None:
        """An old file is migrated to the current schema on first use."""
        db.parent.mkdir(parents=True)
        conn = sqlite3.connect(db)  # a version-0 file: exists, no tables
        conn.execute("CREATE TABLE unrelated (x)")
        conn.close()
        store = SQLiteStore(db)
        assert store.transact(KEY, CONFIG, _workers._bump) == 1
        assert store.schema_version() == SCHEMA_VERSION
        store.close()

    def test_lock_held_too_long(self, db: Path) -> None:
        """A write lock held past busy_timeout fails with a hint."""
        create(db)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            store = SQLiteStore(db, busy_timeout=0.2)
            with pytest.raises(StoreError, match="held a write lock"):
                store.transact(KEY, CONFIG, _workers._bump)
            store.close()
        finally:
            holder.execute("ROLLBACK")
            holder.close()


class TestGuardOnSQLite:
    """The runtime guard turns store failures into fail-open or fail-closed decisions."""

    LOOP = {"tools": {"loopDetection": {"enabled": True}}}

    def test_corrupt_file_fails_open(self, db: Path, lw_logs: pytest.LogCaptureFixture) -> None:
        """With a corrupt file the guard logs and allows every call."""
        db.parent.mkdir(parents=True)
        db.write_bytes(b"garbage" * 1000)
        guard = lw.LoopGuard(self.LOOP, store=f"sqlite://{db}")
        run = guard.run("r")
        for i in range(25):
            assert run.before_call("poll", {"job": 1}, call_id=str(i)).action == "allow"
            assert run.after_call("poll", {"job": 1}, call_id=str(i), result="x") is None
        errors = [r for r in lw_logs.records if r.levelno >= logging.ERROR]
        assert errors and "allowing the call" in errors[0].getMessage()
        assert str(db) in str(errors[0].exc_info[1])  # type: ignore[index]

    def test_corrupt_file_fails_closed(self, db: Path) -> None:
        """With a corrupt file and failMode closed the guard blocks, saying why."""
        db.parent.mkdir(parents=True)
        db.write_bytes(b"garbage" * 1000)
        config = {**self.LOOP, "loopwarden": {"failMode": "closed"}}
        guard = lw.LoopGuard(config, store=f"sqlite://{db}")
        decision = guard.run("r").before_call("poll", {"job": 1})
        assert decision.blocked
        assert "fail closed" in (decision.message or "")

    def test_unwritable_directory_fails_open(self, tmp_path: Path) -> None:
        """An unwritable state directory never breaks the agent."""
        locked = tmp_path / "locked"
        with unwritable(locked):
            guard = lw.LoopGuard(self.LOOP, store=f"sqlite://{locked}/state.db")
            assert guard.run("r").before_call("poll", {"job": 1}).action == "allow"


def test_documented_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite example of docs/stores.md runs as written."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(snippet("sqlite-store"), "docs/stores.md", "exec"), namespace)
    assert (tmp_path / "agent-state.db").exists()
    assert namespace["decision"].action == "allow"  # type: ignore[attr-defined]
