"""SQLite store: run state shared by the processes of one machine.

Coding-agent hooks start a new process for every tool call, so the guard's
state has to live outside the process. This store keeps it in one SQLite file:

* each run's state is read, updated and written inside one ``BEGIN IMMEDIATE``
  transaction, so concurrent processes of the same session never lose or
  double-count a call;
* runs idle for longer than the TTL are deleted opportunistically, a bounded
  batch at a time, whenever a new run is created (no separate cleanup job);
* the file itself (connections per thread, WAL, migrations, waiting for locks,
  errors with a hint) is :class:`~loopwarden.stores._sqlite_file.SQLiteFile`.

Every SQLite failure is raised as :class:`~loopwarden.errors.StoreError` with
the file path and a hint; the runtime guard turns it into fail-open (log and
allow) or fail-closed (block), as configured.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote

from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..engine.state import RunState
from ..errors import ConfigError, StoreError
from ._sqlite_file import (
    DEFAULT_BUSY_TIMEOUT,
    SCHEMA_VERSION,
    SQLiteFile,
    default_state_path,
    rollback,
)
from .base import BaseStore, Inspectable, SideRecords, decode_state

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "default_state_path"]

T = TypeVar("T")
# Expired rows removed per cleanup pass: bounds the cost any one call pays.
_EXPIRE_BATCH = 200
# Also clean up every Nth transaction of a long-lived process.
_EXPIRE_EVERY = 512


class SQLiteStore(BaseStore, SideRecords, Inspectable):
    """Run states in one SQLite file, safe for many processes and threads.

    Args:
        path: the database file; ``None`` uses :func:`default_state_path`.
            Missing parent directories are created.
        ttl_seconds: runs idle for longer than this are deleted (default one day).
        busy_timeout: seconds to wait for another process's write transaction.
        clock: seconds since the epoch, for expiry (default :func:`time.time`).

    Each thread gets its own connection, opened on first use; a forked child
    opens its own.
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
        self.clock = clock
        self._file = SQLiteFile(self.path, busy_timeout)
        self._ops = 0

    @property
    def busy_timeout(self) -> float:
        """Seconds to wait for another process's write transaction."""
        return self._file.busy_timeout

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

    def schema_version(self) -> int:
        """The schema version of the file (after opening, i.e. after any migration)."""
        return self._file.schema_version()

    # -- the Store protocol ----------------------------------------------------
    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        """Load (or create) the state of ``key``, apply ``fn``, save it: one transaction."""
        with self._file.immediate("update run state") as conn:
            row = conn.execute("SELECT state FROM runs WHERE key = ?", (key,)).fetchone()
            created = row is None
            if created:
                state = RunState.new(config)
            else:
                state = decode_state(row[0], config, key, self.path)
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
            self._file.wait(self._file.connection(), "DELETE FROM runs WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            raise self._file.error("delete run state", exc) from None

    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The stored state of ``key`` (read only), or None."""
        try:
            row = (
                self._file.connection()
                .execute("SELECT state FROM runs WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._file.error("read run state", exc) from None
        return None if row is None else decode_state(row[0], config, key, self.path)

    def keys(self) -> list[str]:
        """Keys of the stored runs (for inspection and tests)."""
        try:
            rows = self._file.connection().execute("SELECT key FROM runs ORDER BY key").fetchall()
        except sqlite3.Error as exc:
            raise self._file.error("list runs", exc) from None
        return [row[0] for row in rows]

    def expire(self, now: float | None = None) -> None:
        """Delete runs idle for longer than the TTL now (normally done on the side)."""
        conn = self._file.connection()
        try:
            self._file.wait(conn, "BEGIN IMMEDIATE")
            try:
                stamp = self.clock() if now is None else now
                while True:
                    before = conn.total_changes
                    self._expire(conn, stamp)
                    if conn.total_changes == before:
                        break
                conn.execute("COMMIT")
            except BaseException:
                rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise self._file.error("expire old runs", exc) from None

    # -- side records ------------------------------------------------------------
    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        """Atomically update a small side record: ``fn(old)`` returns ``(new, result)``.

        ``new=None`` deletes the record. Side records expire like runs.
        """
        with self._file.immediate("update a side record") as conn:
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

    def read_value(self, key: str) -> bytes | None:
        """A side record as last committed (read only: takes no write lock)."""
        try:
            row = (
                self._file.connection()
                .execute("SELECT value FROM kv WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._file.error("read a side record", exc) from None
        return None if row is None else bytes(row[0])

    def delete_value(self, key: str) -> None:
        """Forget one side record."""
        try:
            self._file.wait(self._file.connection(), "DELETE FROM kv WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            raise self._file.error("delete a side record", exc) from None

    def check(self) -> None:
        """Run SQLite's integrity check; raises :class:`StoreError` when it fails."""
        try:
            rows = self._file.connection().execute("PRAGMA integrity_check").fetchall()
        except sqlite3.Error as exc:
            raise self._file.error("check the file", exc) from None
        if [r[0] for r in rows] != ["ok"]:
            raise StoreError(
                f"loopwarden state database {self.path} failed its integrity check: "
                f"{'; '.join(str(r[0]) for r in rows[:5])}; move it away or delete it"
            )

    def close(self) -> None:
        """Close every connection this store opened (in this process)."""
        self._file.close()
