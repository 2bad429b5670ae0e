"""What only the SQLite store does: files, migrations, processes, crashes, clear failures.

The store contract every backend keeps is in ``test_contract.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import loopwarden as lw
from loopwarden.errors import StoreError
from loopwarden.stores import store_from_url
from loopwarden.stores.sqlite import SCHEMA_VERSION, SQLiteStore, default_state_path
from tests._snippets import snippet
from tests._wait import wait_until
from tests.stores import _workers
from tests.stores._workers import CONFIG, KEY

SPAWN = multiprocessing.get_context("spawn")


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
