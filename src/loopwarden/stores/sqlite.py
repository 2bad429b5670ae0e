"""SQLite store: run state shared by the processes of one machine.

Coding-agent hooks start a new process for every tool call, so the guard's
state has to live outside the process. This store keeps it in one SQLite file:

* each run's state is read, updated and written inside one ``BEGIN IMMEDIATE``
  transaction, so concurrent processes of the same session never lose or
  double-count a call;
* WAL mode, so readers never wait for the writer and a killed process leaves
  the database consistent (its open transaction simply never happened);
* a versioned schema (``PRAGMA user_version``) with ordered migrations;
* runs idle for longer than the TTL are deleted opportunistically, a bounded
  batch at a time, whenever a new run is created (no separate cleanup job).

Every SQLite failure is raised as :class:`~loopwarden.errors.StoreError` with
the file path and a hint; the runtime guard turns it into fail-open (log and
allow) or fail-closed (block), as configured.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote

from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..engine.state import RunState
from ..errors import ConfigError, StoreError
from .base import BaseStore, Inspectable, SideRecords

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "default_state_path"]

from .._logging import logger

T = TypeVar("T")

SCHEMA_VERSION = 1

# Ordered migrations: target version -> statements taking the schema there from
# the version before. A new version appends an entry; old files are upgraded in
# one transaction when they are opened.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE IF NOT EXISTS runs ("
        " key TEXT PRIMARY KEY, state BLOB NOT NULL, updated REAL NOT NULL)",
        "CREATE INDEX IF NOT EXISTS runs_updated ON runs(updated)",
        # Small side records (e.g. a hook session's transcript offset), same expiry.
        "CREATE TABLE IF NOT EXISTS kv ("
        " key TEXT PRIMARY KEY, value BLOB NOT NULL, updated REAL NOT NULL)",
        "CREATE INDEX IF NOT EXISTS kv_updated ON kv(updated)",
    ),
}

DEFAULT_BUSY_TIMEOUT = 5.0
# Expired rows removed per cleanup pass: bounds the cost any one call pays.
_EXPIRE_BATCH = 200
# Also clean up every Nth transaction of a long-lived process.
_EXPIRE_EVERY = 512


def default_state_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the state database lives when no path is given.

    ``$XDG_DATA_HOME/loopwarden/state.db``, else ``~/.local/share/loopwarden/state.db``;
    ``~/Library/Application Support/loopwarden/state.db`` on macOS and
    ``%LOCALAPPDATA%\\loopwarden\\state.db`` on Windows.
    """
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    xdg = env.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        base = Path(xdg)
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    else:
        base = home / ".local" / "share"
    return base / "loopwarden" / "state.db"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class SQLiteStore(BaseStore, SideRecords, Inspectable):
    """Run states in one SQLite file, safe for many processes and threads.

    Args:
        path: the database file; ``None`` uses :func:`default_state_path`.
            Missing parent directories are created.
        ttl_seconds: runs idle for longer than this are deleted (default one day).
        busy_timeout: seconds to wait for another process's write transaction.
        clock: seconds since the epoch, for expiry (default :func:`time.time`).

    Each thread gets its own connection (sqlite3 connections must not be
    shared between threads), opened on first use; a forked child opens its own.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        ttl_seconds: float | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path).expanduser() if path is not None else default_state_path()
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else DEFAULT_STATE_TTL_SECONDS
        self.busy_timeout = busy_timeout
        self.clock = clock
        self._local = threading.local()
        self._lock = threading.Lock()
        # thread ident -> connection, so close() reaches every thread's connection.
        self._conns: dict[int, sqlite3.Connection] = {}
        self._pid = os.getpid()
        self._ops = 0
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, ttl_seconds: float | None = None) -> SQLiteStore:
        """``sqlite:///abs/path.db``, ``sqlite://relative.db``, ``sqlite://~/x.db``, or
        ``sqlite://`` for the default location; ``?busy_timeout=SECONDS`` is accepted.

        A malformed URL raises :class:`~loopwarden.errors.ConfigError`."""
        scheme, sep, rest = url.partition("://")
        if scheme != "sqlite" or not sep:
            raise ConfigError(f"not a sqlite:// URL: {url!r}")
        rest, _, query = rest.partition("?")
        options = parse_qs(query, keep_blank_values=True)
        busy = DEFAULT_BUSY_TIMEOUT
        unknown = sorted(set(options) - {"busy_timeout"})
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r} in store URL {url!r} (known: busy_timeout)"
            )
        if "busy_timeout" in options:
            try:
                busy = float(options["busy_timeout"][-1])
            except ValueError:
                raise ConfigError(
                    f"busy_timeout in store URL {url!r} must be a number of seconds"
                ) from None
        path_text = unquote(rest)
        if path_text.startswith("//"):  # sqlite:////abs/path: four slashes also mean absolute
            path_text = path_text[1:]
        if path_text in ("", "/"):
            return cls(None, ttl_seconds=ttl_seconds, busy_timeout=busy)
        return cls(path_text, ttl_seconds=ttl_seconds, busy_timeout=busy)

    @property
    def url(self) -> str:
        """The URL that selects this file (``sqlite:///abs/path`` for absolute paths)."""
        return f"sqlite://{self.path}"

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- connections ---------------------------------------------------------
    def _error(self, action: str, exc: BaseException) -> StoreError:
        """A StoreError that names the file and says what to do about it."""
        text = _describe(exc)
        low = text.lower()
        if "not a database" in low or "malformed" in low or "corrupt" in low:
            hint = (
                "the file is corrupt or is not a SQLite database; move it away or delete it "
                "and loopwarden will create a new one"
            )
        elif "unable to open" in low or "readonly" in low or "read-only" in low:
            hint = (
                "check that the directory exists and is writable, or point loopwarden at "
                "another file (LOOPWARDEN_STATE or loopwarden.store)"
            )
        elif "locked" in low or "busy" in low:
            hint = (
                f"another process held a write lock for more than {self.busy_timeout:g} s; "
                "raise busy_timeout in the store URL if this machine is very slow"
            )
        elif isinstance(exc, OSError):
            hint = (
                "check that the directory can be created and written, or point loopwarden at "
                "another file (LOOPWARDEN_STATE or loopwarden.store)"
            )
        else:
            hint = "see the loopwarden log for details"
        return StoreError(
            f"loopwarden state database {self.path}: could not {action} ({text}); {hint}", exc
        )

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        pid = os.getpid()
        if conn is not None and local.pid == pid:
            return conn
        if self._closed:
            raise StoreError(f"loopwarden state database {self.path}: the store is closed")
        if pid != self._pid:
            # A forked child must not touch the parent's connections (SQLite forbids
            # carrying them across fork); forget them without closing.
            with self._lock:
                self._conns = {}
                self._pid = pid
        conn = self._open()
        local.conn, local.pid = conn, pid
        with self._lock:
            self._conns[threading.get_ident()] = conn
            if len(self._conns) > 8:
                self._drop_dead_threads()
        return conn

    def _drop_dead_threads(self) -> None:
        alive = {t.ident for t in threading.enumerate()}
        for ident in [i for i in self._conns if i not in alive]:
            with contextlib.suppress(sqlite3.Error):
                self._conns.pop(ident).close()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise self._error("create its directory", exc) from None
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=0,  # see _wait: polling beats SQLite's own busy handler here
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # one thread uses it; close() may run elsewhere
            )
        except sqlite3.Error as exc:
            raise self._error("open the file", exc) from None
        try:
            self._setup(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise self._error("open the file", exc) from None
        return conn

    def _wait(
        self, conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()
    ) -> sqlite3.Cursor:
        """Run ``sql``, retrying while another connection holds the lock it needs.

        SQLite's own busy handler sleeps 1, 2, 5, 10, ... 100 ms between tries, but a
        run update holds the write lock for well under a millisecond: short jittered
        polls let contending hook processes through several times faster.
        """
        try:
            return conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.0002
        while True:
            time.sleep(delay * (0.5 + random.random()))
            try:
                return conn.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
            delay = min(delay * 1.5, 0.02)

    def _setup(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs a moment of exclusive access.
        self._wait(conn, "PRAGMA journal_mode = WAL")
        # NORMAL is durable across application crashes in WAL mode; only a power
        # loss can drop the last few commits, which costs a few counted calls.
        conn.execute("PRAGMA synchronous = NORMAL")
        # Another connection may be creating the schema right now (a fresh file
        # opened by several threads or processes at once): wait for it too.
        version = self._wait(conn, "PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        self._wait(conn, "BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have migrated.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"loopwarden state database {self.path} has schema version {version}, "
                    f"newer than this loopwarden supports ({SCHEMA_VERSION}); upgrade "
                    "loopwarden or use another file"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def schema_version(self) -> int:
        """The schema version of the file (after opening, i.e. after any migration)."""
        try:
            row = self._connection().execute("PRAGMA user_version").fetchone()
        except sqlite3.Error as exc:
            raise self._error("read the schema version", exc) from None
        return int(row[0])

    # -- the Store protocol ----------------------------------------------------
    @contextlib.contextmanager
    def _immediate(self, what: str) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed if the block ends normally, else rolled back.

        SQLite errors become :class:`StoreError` saying what could not be done.
        """
        conn = self._connection()
        try:
            self._wait(conn, "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error("start a transaction", exc) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(what, exc) from None
        except BaseException:
            _rollback(conn)
            raise

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        """Load (or create) the state of ``key``, apply ``fn``, save it: one transaction."""
        with self._immediate("update run state") as conn:
            row = conn.execute("SELECT state FROM runs WHERE key = ?", (key,)).fetchone()
            state = self._load(row[0], config, key) if row is not None else None
            created = state is None
            if state is None:
                state = RunState.new(config)
            now = self.clock()
            state.updated = now
            result = fn(state)
            conn.execute(
                "INSERT OR REPLACE INTO runs (key, state, updated) VALUES (?, ?, ?)",
                (key, state.to_bytes(), now),
            )
            self._ops += 1
            if created or self._ops % _EXPIRE_EVERY == 0:
                self._expire(conn, now)
        return result

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        """:meth:`transact` in a worker thread, so the event loop never waits on the file."""
        import asyncio

        return await asyncio.to_thread(self.transact, key, config, fn)

    def _load(self, blob: bytes, config: LoopDetectionConfig, key: str) -> RunState | None:
        try:
            return RunState.from_bytes(blob, config)
        except Exception as exc:
            # One unreadable row (e.g. written by another state format) must not
            # wedge the run forever: start it afresh and say so.
            logger.warning(
                "loopwarden state of run %r in %s is unreadable (%s); starting it afresh",
                key.rsplit("\x1f", 1)[-1],
                self.path,
                _describe(exc),
            )
            return None

    def _expire(self, conn: sqlite3.Connection, now: float) -> None:
        limit = now - self.ttl_seconds
        for table in ("runs", "kv"):
            conn.execute(
                f"DELETE FROM {table} WHERE key IN "
                f"(SELECT key FROM {table} WHERE updated < ? LIMIT {_EXPIRE_BATCH})",
                (limit,),
            )

    def delete(self, key: str) -> None:
        """Forget one run."""
        try:
            self._wait(self._connection(), "DELETE FROM runs WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            raise self._error("delete run state", exc) from None

    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The stored state of ``key`` (read only), or None."""
        try:
            row = (
                self._connection()
                .execute("SELECT state FROM runs WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._error("read run state", exc) from None
        return None if row is None else self._load(row[0], config, key)

    def keys(self) -> list[str]:
        """Keys of the stored runs (for inspection and tests)."""
        try:
            rows = self._connection().execute("SELECT key FROM runs ORDER BY key").fetchall()
        except sqlite3.Error as exc:
            raise self._error("list runs", exc) from None
        return [row[0] for row in rows]

    def expire(self, now: float | None = None) -> None:
        """Delete runs idle for longer than the TTL now (normally done on the side)."""
        conn = self._connection()
        try:
            self._wait(conn, "BEGIN IMMEDIATE")
            try:
                stamp = self.clock() if now is None else now
                while True:
                    before = conn.total_changes
                    self._expire(conn, stamp)
                    if conn.total_changes == before:
                        break
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise self._error("expire old runs", exc) from None

    # -- side records ------------------------------------------------------------
    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        """Atomically update a small side record: ``fn(old)`` returns ``(new, result)``.

        ``new=None`` deletes the record. Side records expire like runs.
        """
        with self._immediate("update a side record") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            new, result = fn(None if row is None else bytes(row[0]))
            if new is None:
                if row is not None:
                    conn.execute("DELETE FROM kv WHERE key = ?", (key,))
            else:
                now = self.clock()
                conn.execute(
                    "INSERT OR REPLACE INTO kv (key, value, updated) VALUES (?, ?, ?)",
                    (key, new, now),
                )
                if row is None:
                    self._expire(conn, now)
        return result

    def delete_value(self, key: str) -> None:
        """Forget one side record."""
        try:
            self._wait(self._connection(), "DELETE FROM kv WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            raise self._error("delete a side record", exc) from None

    def check(self) -> None:
        """Run SQLite's integrity check; raises :class:`StoreError` when it fails."""
        try:
            rows = self._connection().execute("PRAGMA integrity_check").fetchall()
        except sqlite3.Error as exc:
            raise self._error("check the file", exc) from None
        if [r[0] for r in rows] != ["ok"]:
            raise StoreError(
                f"loopwarden state database {self.path} failed its integrity check: "
                f"{'; '.join(str(r[0]) for r in rows[:5])}; move it away or delete it"
            )

    def close(self) -> None:
        """Close every connection this store opened (in this process)."""
        with self._lock:
            conns, self._conns = self._conns, {}
            self._closed = True
        if self._pid != os.getpid():
            return
        for conn in conns.values():
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        logger.debug("loopwarden could not roll back a state transaction", exc_info=True)
