"""One SQLite file: per-thread connections, schema migrations, lock waits, clear errors.

:class:`SQLiteFile` is the part of :class:`~loopwarden.stores.sqlite.SQLiteStore`
that knows files and connections, not runs:

* each thread gets its own connection (sqlite3 connections must not be shared
  between threads), opened on first use; a forked child opens its own;
* WAL mode, so readers never wait for the writer and a killed process leaves
  the database consistent (its open transaction simply never happened);
* before each transaction, a check that the path still names the files the
  connection has open (the database and its ``-wal`` file): one that was deleted
  or replaced is reopened, and the connection's *epoch* changes, so that a
  cache of what was read through the old one is never trusted again;
* a versioned schema (``PRAGMA user_version``) with ordered migrations;
* every SQLite failure becomes a :class:`~loopwarden.errors.StoreError` that
  names the file and says what to do about it.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path

from .._logging import logger
from .._paths import data_dir
from ..errors import StoreError

__all__ = ["DEFAULT_BUSY_TIMEOUT", "SCHEMA_VERSION", "SQLiteFile", "default_state_path"]

SCHEMA_VERSION = 2

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
    # A run as rows: its head (versions, the ring's bounds, the state beside the window)
    # and one row per call in the window, so that an update writes what it changed.
    # Version-1 states stay in runs_v1 and are converted run by run when first used (no
    # long migration under the write lock, whatever the file holds).
    2: (
        "ALTER TABLE runs RENAME TO runs_v1",
        "DROP INDEX IF EXISTS runs_updated",
        "CREATE INDEX IF NOT EXISTS runs_v1_updated ON runs_v1(updated)",
        # gen: new whenever the rows are written afresh; ver: +1 per change; the rows
        # hold the calls seq in [lo, seq), the one of seq s in slot s % cap.
        # A rowid table: a head (a few KB) then fits in its page, where an index b-tree
        # (WITHOUT ROWID) would spill it to overflow pages, more pages per commit.
        "CREATE TABLE runs ("
        " key TEXT PRIMARY KEY, gen INTEGER NOT NULL, ver INTEGER NOT NULL,"
        " seq INTEGER NOT NULL, lo INTEGER NOT NULL, cap INTEGER NOT NULL,"
        " rest BLOB NOT NULL, updated REAL NOT NULL)",
        "CREATE INDEX runs_updated ON runs(updated)",
        # ver: the run's version that last wrote the row (what a cache lacks is newer).
        "CREATE TABLE run_rows ("
        " key TEXT NOT NULL, slot INTEGER NOT NULL, ver INTEGER NOT NULL,"
        " seq INTEGER NOT NULL, row BLOB NOT NULL, PRIMARY KEY (key, slot)) WITHOUT ROWID",
    ),
}

DEFAULT_BUSY_TIMEOUT = 5.0

# A directory's mtime may not move for a change made within the file system's timestamp
# granularity of the one before: its stamp is trusted only once it is this old (whole
# seconds: a file system that keeps seconds only, as ext4 with small inodes does).
_SETTLED_NS = 50_000_000
_SETTLED_COARSE_NS = 3_000_000_000
# Check the files themselves every Nth transaction even when the directory looks still.
_FULL_CHECK_EVERY = 64

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


# os.getpid() is a system call: the pid is kept, and renewed in a forked child.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

# A forked child's copies of its parent's connections. SQLite forbids using them across
# fork, and closing one (which is what collecting it does) could checkpoint the parent's
# file under it: they are kept here, never closed, for the child's life.
_INHERITED: list[sqlite3.Connection] = []


def _close_all(conns: dict[int, sqlite3.Connection], owner: list[int]) -> None:
    """Close the connections this process opened; keep a forked child's copies open."""
    held = list(conns.values())
    conns.clear()
    if owner[0] != _pid:
        _INHERITED.extend(held)
        return
    for conn in held:
        with contextlib.suppress(sqlite3.Error):
            conn.close()


def default_state_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the state database lives when no path is given.

    ``$XDG_DATA_HOME/loopwarden/state.db``, else ``~/.local/share/loopwarden/state.db``;
    ``~/Library/Application Support/loopwarden/state.db`` on macOS and
    ``%LOCALAPPDATA%\\loopwarden\\state.db`` on Windows.
    """
    return data_dir(os.environ if env is None else env) / "state.db"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class SQLiteFile:
    """Connections to one database file, safe across threads and forks."""

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._db = str(path)
        self._dir = str(path.parent)
        self._wal = f"{path}-wal"
        self._shm = f"{path}-shm"
        self._local = threading.local()
        self._lock = threading.Lock()
        # thread ident -> connection, so close() reaches every thread's connection.
        self._conns: dict[int, sqlite3.Connection] = {}
        self._owner = [_pid]  # the process that opened what is in _conns
        # A store dropped without close() still closes its connections (and Python 3.13
        # warns about every connection collected open); not at exit, where it would only
        # add a checkpoint to every short-lived hook process.
        self._finalizer = weakref.finalize(self, _close_all, self._conns, self._owner)
        self._finalizer.atexit = False
        self._closed = False
        self._epoch = 0

    def error(self, action: str, exc: BaseException) -> StoreError:
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

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened (or reopened) when needed."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        pid = _pid
        if conn is not None and local.pid == pid:
            if self._unchanged(local):
                return conn
            # The database or its -wal file was deleted or replaced (the documented fix
            # for a bad file is deleting it) while this connection was open: writing on
            # would split the state between this process and every new one, and lose
            # this process's writes when it closes. Open the files now at the path.
            logger.warning(
                "loopwarden state database %s (or its -wal or -shm file) was replaced or "
                "deleted while open; reopening it (what this process wrote since the last "
                "checkpoint went with the deleted files)",
                self.path,
            )
            with self._lock:
                self._conns.pop(threading.get_ident(), None)
                self._epoch += 1
            _let_go(conn)
            local.conn = None
        if self._closed:
            raise StoreError(f"loopwarden state database {self.path}: the store is closed")
        if pid != self._owner[0]:
            # A forked child must not touch the parent's connections (SQLite forbids
            # carrying them across fork); set them aside without closing.
            with self._lock:
                _INHERITED.extend(self._conns.values())
                self._conns.clear()
                self._owner[0] = pid
        conn = self._open()
        local.conn, local.pid, local.ident = conn, pid, self._identity()
        local.epoch, local.stamp, local.checks = self._epoch, None, 0
        with self._lock:
            self._conns[threading.get_ident()] = conn
            if len(self._conns) > 8:
                self._drop_dead_threads()
        return conn

    def begin(self) -> tuple[sqlite3.Connection, int]:
        """This thread's connection inside a new write transaction (``BEGIN IMMEDIATE``),
        and its epoch: it changes whenever a connection had to be reopened on a replaced
        file, so what was read before is not trusted across it."""
        conn = self.connection()
        try:
            self.wait(conn, "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.error("start a transaction", exc) from None
        epoch: int = self._local.epoch
        return conn, epoch

    def _identity(self) -> tuple[tuple[int, int] | None, ...] | None:
        """Device and inode of the database file and of its -wal and -shm files."""
        found = tuple(map(_inode, (self._db, self._wal, self._shm)))
        return None if found[0] is None else found

    def _unchanged(self, local: threading.local) -> bool:
        """The path still names the files this thread's connection has open.

        One ``stat`` of the directory in the common case: deleting, creating or renaming
        a file in it moves its mtime. When it moved (or lately, or every so often), the
        database and its -wal file are compared with what the connection opened.
        """
        try:
            st = os.stat(self._dir)
        except OSError:
            return False
        stamp = (st.st_ino, st.st_dev, st.st_mtime_ns)
        local.checks += 1
        if stamp == local.stamp and local.checks % _FULL_CHECK_EVERY:
            return True
        ident = local.ident
        if ident is None or self._identity() != ident:
            return False
        mtime = st.st_mtime_ns
        settled = _SETTLED_COARSE_NS if mtime % 1_000_000_000 == 0 else _SETTLED_NS
        local.stamp = stamp if time.time_ns() - mtime > settled else None
        return True

    def _drop_dead_threads(self) -> None:
        alive = {t.ident for t in threading.enumerate()}
        for ident in [i for i in self._conns if i not in alive]:
            with contextlib.suppress(sqlite3.Error):
                self._conns.pop(ident).close()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise self.error("create its directory", exc) from None
        try:
            # SQLite creates the file 0644 (and its -wal and -shm files with the same
            # mode): create it first, private, so runs of other users cannot be read.
            # O_EXCL: never open (and close) a file this process has open already, as
            # closing any descriptor drops the process's POSIX locks on the file.
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_NONBLOCK
            os.close(os.open(self.path, flags, 0o600))
        except OSError:
            pass  # it exists (or SQLite reports what is wrong with the path)
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=0,  # see _wait: polling beats SQLite's own busy handler here
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # one thread uses it; close() may run elsewhere
            )
        except sqlite3.Error as exc:
            raise self.error("open the file", exc) from None
        try:
            self._setup(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise self.error("open the file", exc) from None
        return conn

    def wait(
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
        self.wait(conn, "PRAGMA journal_mode = WAL")
        # NORMAL is durable across application crashes in WAL mode; only a power
        # loss can drop the last few commits, which costs a few counted calls.
        conn.execute("PRAGMA synchronous = NORMAL")
        # Another connection may be creating the schema right now (a fresh file
        # opened by several threads or processes at once): wait for it too.
        version = self.wait(conn, "PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        self.wait(conn, "BEGIN IMMEDIATE")
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
            rollback(conn)
            raise

    def schema_version(self) -> int:
        """The schema version of the file (after opening, i.e. after any migration)."""
        try:
            row = self.connection().execute("PRAGMA user_version").fetchone()
        except sqlite3.Error as exc:
            raise self.error("read the schema version", exc) from None
        return int(row[0])

    @contextlib.contextmanager
    def immediate(self, what: str) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed if the block ends normally, else rolled back.

        SQLite errors become :class:`StoreError` saying what could not be done.
        """
        conn = self.connection()
        try:
            self.wait(conn, "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.error("start a transaction", exc) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            raise self.error(what, exc) from None
        except BaseException:
            rollback(conn)
            raise

    def close(self) -> None:
        """Close every connection opened (in this process)."""
        with self._lock:
            self._closed = True
        self._finalizer()
        self._local = threading.local()


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _let_go(conn: sqlite3.Connection) -> None:
    """Close a connection whose files were deleted or replaced, without the checkpoint
    SQLite runs when a file's last connection closes: that would copy this connection's
    writes (in its deleted -wal) into the database file, under the -wal of the processes
    that opened it since, and then delete their -wal and -shm files by name."""
    try:
        if sys.version_info >= (3, 12):
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)
        else:
            _no_checkpoint_on_close(conn)
    except Exception as exc:  # never worse than closing as before
        logger.warning(
            "loopwarden could not keep SQLite from checkpointing a replaced file on close (%s)",
            _describe(exc),
        )
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def _no_checkpoint_on_close(conn: sqlite3.Connection) -> None:
    """``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` on Python 3.11, which has no
    ``Connection.setconfig``: ``sqlite3_db_config`` called on the connection's handle."""
    import _sqlite3
    import ctypes

    if sys.implementation.name != "cpython":
        raise RuntimeError(f"not CPython ({sys.implementation.name})")
    lib = ctypes.CDLL(_sqlite3.__file__)  # resolves SQLite's symbols through the module
    # CPython's connection object holds the sqlite3 * right after the object header.
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    filename = lib.sqlite3_db_filename
    filename.restype = ctypes.c_char_p
    filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    expected = os.fsencode(conn.execute("PRAGMA database_list").fetchone()[2])
    if not handle or filename(handle, b"main") != expected:
        raise RuntimeError("the connection's handle was not found")
    config = lib.sqlite3_db_config
    config.restype = ctypes.c_int
    config.argtypes = [ctypes.c_void_p, ctypes.c_int]  # the rest are variadic
    no_checkpoint_on_close = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
    if config(handle, no_checkpoint_on_close, ctypes.c_int(1), ctypes.c_void_p(None)) != 0:
        raise RuntimeError("sqlite3_db_config failed")


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        logger.debug("loopwarden could not roll back a state transaction", exc_info=True)
