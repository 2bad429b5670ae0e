"""SQLite store: run state shared by the processes of one machine.

Coding-agent hooks start a new process for every tool call, so the guard's
state has to live outside the process. This store keeps it in one SQLite file:

* each update of a run is one ``BEGIN IMMEDIATE`` transaction, so concurrent
  processes of the same session never lose or double-count a call;
* a run is stored as rows, not as one blob: a *head* (a version, the bounds of
  the window, and the state beside the window as :meth:`RunState.rest_bytes`)
  and one row per call in the window, in a ring of ``historySize`` slots. An
  update writes the rows it changed (the call it added, the call it completed)
  and the head; one that changed nothing writes nothing;
* a process keeps the decoded state of the runs it used last, with their
  version. An update first reads the head (one indexed row); when its version
  is the cached one, the cached state is used as it is; when another process
  wrote the run since, only the rows written after the cached version are read
  and applied (the whole run is read only when that is not possible);
* runs idle for longer than the TTL are deleted opportunistically, a bounded
  batch at a time, whenever a new run is created (no separate cleanup job);
* the file itself (connections per thread, WAL, migrations, waiting for locks,
  a file replaced while open, errors with a hint) is
  :class:`~loopwarden.stores._sqlite_file.SQLiteFile`.

Every SQLite failure is raised as :class:`~loopwarden.errors.StoreError` with
the file path and a hint; the runtime guard turns it into fail-open (log and
allow) or fail-closed (block), as configured.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qs, unquote

from .._util import json_value
from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..engine.state import RunState
from ..engine.window import RunWindow
from ..errors import ConfigError, StoreError
from ._sqlite_file import (
    DEFAULT_BUSY_TIMEOUT,
    SCHEMA_VERSION,
    SQLiteFile,
    default_state_path,
    rollback,
)
from .base import BaseStore, Inspectable, SideRecords, decode_state, unreadable

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "default_state_path"]

T = TypeVar("T")
# Expired runs removed per cleanup pass: bounds the cost any one call pays.
_EXPIRE_BATCH = 200
# Also clean up every Nth transaction of a long-lived process.
_EXPIRE_EVERY = 512
CACHED_RUNS = 64
"""Runs whose decoded state a store keeps between updates (least recently used go)."""

_HEAD = "SELECT gen, ver, seq, lo, cap, updated FROM runs WHERE key = ?"
_VERSION = "SELECT gen, ver FROM runs WHERE key = ?"
_REST = "SELECT rest FROM runs WHERE key = ?"
_PUT_ROW = "INSERT OR REPLACE INTO run_rows (key, slot, ver, seq, row) VALUES (?, ?, ?, ?, ?)"
# The head moves on only from the version the update started from (else nothing changes).
_BUMP = "UPDATE runs SET ver = ?, seq = ?, lo = ?, rest = ? WHERE key = ? AND gen = ? AND ver = ?"
_BUMP_TOUCH = (
    "UPDATE runs SET ver = ?, seq = ?, lo = ?, rest = ?, updated = ?"
    " WHERE key = ? AND gen = ? AND ver = ?"
)
_TOUCH = "UPDATE runs SET updated = ? WHERE key = ?"
_ROWS_SINCE = "SELECT seq, row FROM run_rows WHERE key = ? AND ver > ?"
_ALL_ROWS = "SELECT seq, row FROM run_rows WHERE key = ?"
_DROP_ROWS = "DELETE FROM run_rows WHERE key = ?"
_NEW_HEAD = (
    "INSERT OR REPLACE INTO runs (key, gen, ver, seq, lo, cap, rest, updated)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_OLD_STATE = "SELECT state, updated FROM runs_v1 WHERE key = ?"


def _sql_key(key: str) -> str | bytes:
    """``key`` as bound to SQL: text, or (for text with lone surrogates, which UTF-8 cannot
    encode) its ``surrogatepass`` bytes. Those bytes are never valid UTF-8, so they never
    equal a text key."""
    if key.isascii():
        return key
    try:
        key.encode()
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogatepass")
    return key


def _key_text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")


class _Cached:
    """A run's decoded state as of one stored version, kept between updates."""

    __slots__ = (
        "config",
        "created",
        "epoch",
        "gen",
        "hot",
        "off",
        "rest",
        "state",
        "updated",
        "ver",
        "window",
    )

    def __init__(
        self,
        config: LoopDetectionConfig,
        state: RunState,
        gen: int | None,
        ver: int,
        off: int,
        rest: bytes,
        epoch: int,
        updated: float,
    ) -> None:
        self.config = config
        self.state = state
        self.window = state.window
        self.gen = gen
        """The stored generation this copy follows; ``None``: not stored (write afresh)."""
        self.ver = ver
        self.off = off
        """Stored seq of a call minus its ``seq`` in this window."""
        self.rest = rest
        """The stored :meth:`RunState.rest_bytes`."""
        self.epoch = epoch
        """The file epoch it was read through (see :meth:`SQLiteFile.begin`)."""
        self.updated = updated
        """The run's idle time as last written or read."""
        self.hot = False
        """No other process wrote the run between this process's last two updates."""
        self.created = False


class _Changes(NamedTuple):
    """What an update changed: its rows (``None``: write the run afresh) and the rest."""

    rows: list[tuple[int, bytes]] | None
    rest: bytes


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
        # A run's idle time is written when it is older than this (not on every update:
        # the index on it would be one more page per commit).
        self._touch_every = min(60.0, self.ttl_seconds / 16)
        # key -> its state as last committed by this process. An update takes its entry
        # out (no other thread uses it meanwhile) and puts it back when committed; a
        # stale one is caught by its version.
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

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
        """Load (or create) the state of ``key``, apply ``fn``, save what it changed: one
        transaction.

        When no other process wrote the run between this process's last two updates of
        it, ``fn`` runs on the cached state before the write lock is taken (the lock is
        then held only to check the version and write); if the run was written
        meanwhile after all, the update is done again on the stored state, so ``fn`` may
        run twice.
        """
        with self._lock:
            entry = self._cache.pop(key, None)
        if entry is not None and entry.config is not config and entry.config != config:
            entry = None
        early = None
        if entry is not None and entry.hot:
            now = self.clock()
            entry.state.updated = now
            result = fn(entry.state)
            early = (result, self._changes(entry), now)
        file = self._file
        conn, epoch = file.begin()
        k = _sql_key(key)
        try:
            if early is None or entry is None or entry.epoch != epoch:
                done = False
            else:
                result, changes, now = early
                done = self._write(conn, k, entry, changes, now, True)
            if not done:
                if early is not None:
                    entry = None  # fn changed that copy: it is not the stored state
                entry = self._current(conn, key, k, config, entry, epoch)
                now = self.clock()
                entry.state.updated = now
                result = fn(entry.state)
                self._write(conn, k, entry, self._changes(entry), now, False)
            assert entry is not None
            self._ops += 1
            if entry.created or self._ops % _EXPIRE_EVERY == 0:
                entry.created = False
                self._expire(conn, now)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            raise file.error("update run state", exc) from None
        except BaseException:
            rollback(conn)
            raise
        cache = self._cache
        with self._lock:
            cache[key] = entry
            if len(cache) > CACHED_RUNS:
                del cache[next(iter(cache))]
        return result

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        """:meth:`transact` in a worker thread, so the event loop never waits on the file."""
        import asyncio

        return await asyncio.to_thread(self.transact, key, config, fn)

    # -- reading a run -----------------------------------------------------------
    def _current(
        self,
        conn: sqlite3.Connection,
        key: str,
        k: str | bytes,
        config: LoopDetectionConfig,
        entry: _Cached | None,
        epoch: int,
    ) -> _Cached:
        """The run's state as stored (under the write lock): the cached copy when it is
        current or can catch up, else read whole."""
        head = conn.execute(_HEAD, (k,)).fetchone()
        if head is None:
            return self._create(conn, key, k, config, epoch)
        if entry is not None and entry.gen == head[0] and entry.epoch == epoch:
            if entry.ver == head[1]:
                entry.hot = True
                entry.updated = head[5]
                return entry
            entry.hot = False
            try:
                if self._catch_up(conn, k, entry, head, config):
                    return entry
            except Exception:  # an unexpected row: read the whole run instead
                pass
        return self._read(conn, key, k, config, head, epoch)

    def _create(
        self,
        conn: sqlite3.Connection,
        key: str,
        k: str | bytes,
        config: LoopDetectionConfig,
        epoch: int,
    ) -> _Cached:
        """A new run, or one a version-1 file holds (converted now, written on commit)."""
        old = conn.execute(_OLD_STATE, (k,)).fetchone() if isinstance(k, str) else None
        if old is None:
            state = RunState.new(config)
        else:
            state = decode_state(old[0], config, key, self.path)
            conn.execute("DELETE FROM runs_v1 WHERE key = ?", (k,))
        entry = _Cached(config, state, None, 0, 0, b"", epoch, 0.0)
        entry.created = True
        return entry

    def _catch_up(
        self,
        conn: sqlite3.Connection,
        k: str | bytes,
        entry: _Cached,
        head: Any,
        config: LoopDetectionConfig,
    ) -> bool:
        """Apply to the cached window the rows written since its version (calls added at
        the end, pending calls completed); False when they do not fit it."""
        _, ver, seq, lo, cap, updated = head
        window = entry.window
        if entry.state.window is not window or window.capacity != cap:
            return False
        rest = conn.execute(_REST, (k,)).fetchone()[0]
        rows = conn.execute(_ROWS_SINCE, (k, entry.ver)).fetchall()
        rows.sort()
        off = entry.off
        records = window.records
        for stored, data in rows:
            at = stored - off
            tool, args, call_id, result, unknown, ts, veto = json_value(data)
            if at == window.next_seq:
                window.add(tool, args, call_id, result, unknown, ts, bool(veto))
                continue
            first = records[0].seq if records else window.next_seq
            if not first <= at < window.next_seq or result is None:
                return False
            rec = records[at - first]
            if rec.result_hash is not None or rec.args_hash != args or rec.call_id != call_id:
                return False
            if window.complete_pending(args, call_id, result, unknown) is not rec:
                return False
        if (
            window.next_seq + off != seq
            or (records[0].seq if records else window.next_seq) + off != lo
        ):
            return False
        window.changed_rows()  # what was just applied is stored already
        if rest != entry.rest:
            entry.state = RunState.from_parts(window, rest, config, updated)
            entry.rest = rest
        entry.ver = ver
        entry.updated = updated
        return True

    def _read(
        self,
        conn: sqlite3.Connection,
        key: str,
        k: str | bytes,
        config: LoopDetectionConfig,
        head: Any,
        epoch: int,
    ) -> _Cached:
        """The whole run as stored (a state that cannot be read starts afresh, logged)."""
        gen, ver, _, _, cap, updated = head
        rest = conn.execute(_REST, (k,)).fetchone()[0]
        rows = conn.execute(_ALL_ROWS, (k,)).fetchall()
        rows.sort()
        try:
            window = RunWindow.load([json_value(row) for _, row in rows], config.history_size)
            state = RunState.from_parts(window, rest, config, updated)
        except Exception as exc:  # damaged, or written by another state version
            unreadable(key, self.path, exc)
            return _Cached(config, RunState.new(config), None, 0, 0, b"", epoch, updated)
        kept = len(window)
        window.track(row for _, row in rows[len(rows) - kept :])
        off = rows[-1][0] + 1 - window.next_seq if rows else 0
        # Rows beyond this config's window, or a ring of another size: written afresh.
        same = cap == config.history_size and kept == len(rows)
        return _Cached(config, state, gen if same else None, ver, off, rest, epoch, updated)

    # -- writing a run -----------------------------------------------------------
    def _changes(self, entry: _Cached) -> _Changes:
        """What the update just made changed (taken once: the window's log is emptied)."""
        state = entry.state
        window = state.window
        rows = None
        if entry.gen is not None and window is entry.window and window.capacity is not None:
            rows = window.changed_rows()
        return _Changes(rows, state.rest_bytes())

    def _write(
        self,
        conn: sqlite3.Connection,
        k: str | bytes,
        entry: _Cached,
        changes: _Changes,
        now: float,
        check: bool,
    ) -> bool:
        """Write what the update changed: the head, then its rows (nothing if nothing).

        ``check``: the update was made on the cached copy before the lock was taken:
        False (nothing written) when the run has another version now.
        """
        rows, rest = changes
        unchanged = rows is not None and not rows and rest == entry.rest
        if check and (rows is None or unchanged):
            # Nothing that checks the version is written, but what fn answered must be
            # about the stored version.
            found = conn.execute(_VERSION, (k,)).fetchone()
            if found is None or found[0] != entry.gen or found[1] != entry.ver:
                return False
        if rows is None:
            self._write_all(conn, k, entry, rest, now)
            return True
        touch = now - entry.updated > self._touch_every
        if unchanged:
            if touch:
                conn.execute(_TOUCH, (now, k))
                entry.updated = now
            return True
        ver, gen, off = entry.ver + 1, entry.gen, entry.off
        window = entry.window
        records = window.records
        nxt = window.next_seq + off
        lo = records[0].seq + off if records else nxt
        if touch:
            cursor = conn.execute(_BUMP_TOUCH, (ver, nxt, lo, rest, now, k, gen, entry.ver))
        else:
            cursor = conn.execute(_BUMP, (ver, nxt, lo, rest, k, gen, entry.ver))
        if cursor.rowcount != 1:
            return False
        cap = window.capacity
        assert cap is not None
        for seq, row in rows:
            stored = seq + off
            conn.execute(_PUT_ROW, (k, stored % cap, ver, stored, row))
        entry.ver = ver
        entry.rest = rest
        if touch:
            entry.updated = now
        return True

    def _write_all(
        self, conn: sqlite3.Connection, k: str | bytes, entry: _Cached, rest: bytes, now: float
    ) -> None:
        """Write the run afresh: every row, under a new generation."""
        window = entry.state.window
        cap = window.capacity or len(window) or 1
        gen = random.getrandbits(62)
        conn.execute(_DROP_ROWS, (k,))
        conn.executemany(_PUT_ROW, [(k, seq % cap, 1, seq, row) for seq, row in window.track()])
        records = window.records
        nxt = window.next_seq
        lo = records[0].seq if records else nxt
        conn.execute(_NEW_HEAD, (k, gen, 1, nxt, lo, cap, rest, now))
        entry.window = window
        entry.gen, entry.ver, entry.off, entry.rest, entry.updated = gen, 1, 0, rest, now

    # -- expiry, inspection --------------------------------------------------------
    def _expire(self, conn: sqlite3.Connection, now: float) -> int:
        """Delete one batch of runs and side records idle past the TTL; how many."""
        limit = now - self.ttl_seconds
        keys = conn.execute(
            f"SELECT key FROM runs WHERE updated < ? LIMIT {_EXPIRE_BATCH}", (limit,)
        ).fetchall()
        if keys:
            conn.executemany(_DROP_ROWS, keys)
            conn.executemany("DELETE FROM runs WHERE key = ?", keys)
        before = conn.total_changes
        for table in ("runs_v1", "kv"):
            conn.execute(
                f"DELETE FROM {table} WHERE key IN "
                f"(SELECT key FROM {table} WHERE updated < ? LIMIT {_EXPIRE_BATCH})",
                (limit,),
            )
        return len(keys) + conn.total_changes - before

    def delete(self, key: str) -> None:
        """Forget one run."""
        k = _sql_key(key)
        with self._file.immediate("delete run state") as conn:
            conn.execute(_DROP_ROWS, (k,))
            conn.execute("DELETE FROM runs WHERE key = ?", (k,))
            conn.execute("DELETE FROM runs_v1 WHERE key = ?", (k,))
            with self._lock:
                self._cache.pop(key, None)

    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The stored state of ``key`` (read only), or None."""
        conn = self._file.connection()
        k = _sql_key(key)
        try:
            conn.execute("BEGIN")  # the head and the rows of one snapshot
            try:
                head = conn.execute(_HEAD, (k,)).fetchone()
                if head is not None:
                    return self._read(conn, key, k, config, head, -1).state
                old = conn.execute(_OLD_STATE, (k,)).fetchone() if isinstance(k, str) else None
            finally:
                rollback(conn)
        except sqlite3.Error as exc:
            raise self._file.error("read run state", exc) from None
        return None if old is None else decode_state(old[0], config, key, self.path)

    def keys(self) -> list[str]:
        """Keys of the stored runs (for inspection and tests)."""
        try:
            rows = (
                self._file.connection()
                .execute("SELECT key FROM runs UNION SELECT key FROM runs_v1")
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise self._file.error("list runs", exc) from None
        return sorted(_key_text(row[0]) for row in rows)

    def expire(self, now: float | None = None) -> None:
        """Delete runs idle for longer than the TTL now (normally done on the side)."""
        with self._file.immediate("expire old runs") as conn:
            stamp = self.clock() if now is None else now
            while self._expire(conn, stamp):
                pass

    # -- side records ------------------------------------------------------------
    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        """Atomically update a small side record: ``fn(old)`` returns ``(new, result)``.

        ``new=None`` deletes the record. Side records expire like runs.
        """
        k = _sql_key(key)
        with self._file.immediate("update a side record") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (k,)).fetchone()
            new, result = fn(None if row is None else bytes(row[0]))
            if new is None:
                if row is not None:
                    conn.execute("DELETE FROM kv WHERE key = ?", (k,))
            else:
                now = self.clock()
                conn.execute(
                    "INSERT OR REPLACE INTO kv (key, value, updated) VALUES (?, ?, ?)",
                    (k, new, now),
                )
                if row is None:
                    self._expire(conn, now)
        return result

    def read_value(self, key: str) -> bytes | None:
        """A side record as last committed (read only: takes no write lock)."""
        try:
            row = (
                self._file.connection()
                .execute("SELECT value FROM kv WHERE key = ?", (_sql_key(key),))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._file.error("read a side record", exc) from None
        return None if row is None else bytes(row[0])

    def delete_value(self, key: str) -> None:
        """Forget one side record."""
        try:
            self._file.wait(
                self._file.connection(), "DELETE FROM kv WHERE key = ?", (_sql_key(key),)
            )
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
        with self._lock:
            self._cache = {}
