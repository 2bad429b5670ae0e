"""Redis store: one run's state shared by agent workers on many hosts.

Every update of a run is one compare-and-set (a staging ``SET`` and a script,
pipelined; see :mod:`._redis_cas`): one round trip when this process wrote the run last (it
keeps the run's latest state and token in a small local cache), two when
another process did. Runs are string keys under ``<prefix>run:{<key>}`` (the braces
are a Cluster hash tag, so a run's keys share a slot) with a Redis TTL that
every write renews; hook side records live under ``<prefix>kv:{<key>}``.

Faults: short timeouts; any Redis failure raises
:class:`~loopwarden.errors.StoreError`, which the guard turns into fail-open
(or fail-closed). The first failure of an outage logs one warning; later calls
fail at once, without touching the network, until a growing back-off has
passed and one caller probes the server again. Recovery is logged, and a
server that came back without its data is detected and logged too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

from .._logging import logger
from ..config import DEFAULT_STATE_TTL_SECONDS, LoopDetectionConfig
from ..engine.state import RunState
from ..errors import ConfigError, StoreError
from . import _redis_cas as cas
from ._redis_url import build_client, key_part, parse_url, redact, validate_prefix
from .base import BaseStore, Inspectable, SideRecords, decode_state

try:
    import redis.exceptions as _rex
except ModuleNotFoundError:  # the extra is not installed: RedisStore() says how to get it
    _rex: Any = None  # type: ignore[no-redef]

__all__ = ["RedisStore"]

T = TypeVar("T")
O = TypeVar("O")  # noqa: E741

_FIRST_BACKOFF = 0.25
_LOCK_STRIPES = 64


class _Unavailable(StoreError):
    """A failure of an outage the store has already reported once (logged at DEBUG by
    whoever logs it again: see ``loopwarden._logging``)."""

    reported = True


class _AsyncClient:
    """The asyncio client of one event loop, initialised once."""

    def __init__(self, client: Any, size: int) -> None:
        self.client = client
        self.lock = asyncio.Lock()
        self.ready = False
        # At most pool_size operations of this loop at once: the pool never runs dry,
        # and the others wait their turn here (see _Slots).
        self.slots = asyncio.Semaphore(size)


@dataclass
class _Outage:
    since: float
    retry_at: float
    delay: float
    reason: str
    probing: bool = False
    skipped: int = 0


def _describe(exc: BaseException, timeout: float) -> str:
    """What went wrong, in words that say what to do; never contains the password."""
    rex = _rex
    text = str(exc) or type(exc).__name__
    low = text.lower()
    if isinstance(exc, rex.AuthenticationError) or any(
        s in low for s in ("wrongpass", "noauth", "invalid password", "invalid username")
    ):
        return f"authentication failed ({text}); check the user name and password in the URL"
    if isinstance(exc, rex.NoPermissionError) or "noperm" in low:
        return (
            f"the Redis user lacks a permission ({text}); loopwarden needs EVALSHA, SCRIPT "
            "LOAD, GET, GETRANGE, SET, RENAME, DEL and SCAN on its key prefix"
        )
    if "unknown command" in low:
        return (
            f"the server lacks a command loopwarden needs ({text}); use Redis 4 or later, or "
            "Valkey, with Lua scripting (EVALSHA, SCRIPT LOAD) enabled"
        )
    if isinstance(exc, rex.TimeoutError):
        return f"no answer within {timeout:g} s ({text})"
    if isinstance(exc, rex.BusyLoadingError):
        return f"the server is still loading its data ({text})"
    if isinstance(exc, rex.ConnectionError):
        return f"cannot connect ({text})"
    if isinstance(exc, rex.ReadOnlyError):
        return f"the server is a read-only replica ({text}); point the URL at the primary"
    if isinstance(exc, rex.OutOfMemoryError):
        return f"the server is out of memory ({text}); raise maxmemory or free space"
    return f"{type(exc).__name__}: {text}"


class RedisStore(BaseStore, SideRecords, Inspectable):
    """Run states in Redis (standalone, TLS, Unix socket, Cluster or Sentinel); many hosts.

    Args:
        url: ``redis://``, ``rediss://``, ``redis+unix://`` (or ``unix://``),
            ``redis+cluster://`` or ``redis+sentinel://`` (see ``docs/stores-redis.md``).
            Options may be in its query string; keyword arguments given here win over them.
        prefix: prepended to every key (default ``lw:``); one per deployment.
        ttl_seconds: a run idle this long is expired by Redis (default one day).
        timeout: seconds to wait for any answer (default 0.25).
        connect_timeout: seconds to wait for a connection (default: ``timeout``).
        pool_size: connections per server (default 32).
        busy_timeout: seconds one update may keep retrying against other writers.
        backoff: longest wait, in seconds, between attempts while Redis is down (5).
        cache_size: runs whose latest state this process keeps (saves a round trip).
        compress: zlib-compress stored states (about half the size, more CPU).
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str | None = None,
        ttl_seconds: float | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        pool_size: int | None = None,
        busy_timeout: float | None = None,
        backoff: float | None = None,
        cache_size: int | None = None,
        compress: bool | None = None,
    ) -> None:
        opts = parse_url(url)  # a mistake in the URL is reported first: it needs fixing either way
        _require_redis(url)
        given = {
            "prefix": prefix,
            "ttl": ttl_seconds,
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "pool_size": pool_size,
            "busy_timeout": busy_timeout,
            "backoff": backoff,
            "cache": cache_size,
            "compress": compress,
        }
        for name, value in given.items():
            if value is not None:
                setattr(opts, name, value)
        validate_prefix(url, opts.prefix)
        if opts.ttl is None:
            opts.ttl = DEFAULT_STATE_TTL_SECONDS
        if opts.ttl <= 0 or opts.timeout <= 0:
            raise ConfigError(f"Redis store {redact(url)}: ttl and timeout must be positive")
        self.url = redact(url)
        """The URL, without its password."""
        self.options = opts
        self.prefix = opts.prefix
        self.ttl_seconds = opts.ttl
        self._ttl_ms = max(1, round(opts.ttl * 1000))
        self._client: Any = None
        self._slots = _Slots(opts.pool_size, opts.busy_timeout)
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._mu = threading.Lock()
        self._pid = os.getpid()
        self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._cache: OrderedDict[str, tuple[bytes, Any, object]] = OrderedDict()
        self._outage: _Outage | None = None
        self._generation: bytes | None = None
        self._check_generation = True
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, ttl_seconds: float | None = None) -> RedisStore:
        """A store for ``url``; ``ttl_seconds`` (the config's) applies unless the URL sets ttl."""
        has_ttl = parse_url(url).ttl is not None
        _require_redis(url)
        return cls(url, ttl_seconds=None if has_ttl else ttl_seconds)

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r})"

    # -- keys --------------------------------------------------------------------
    def run_key(self, key: str) -> str:
        """The Redis key of a run's state."""
        return f"{self.prefix}run:{{{key_part(key)}}}"

    def value_key(self, key: str) -> str:
        """The Redis key of a side record."""
        return f"{self.prefix}kv:{{{key_part(key)}}}"

    # -- clients and failures ------------------------------------------------------
    def _sync_client(self) -> Any:
        client = self._client
        if client is None:
            with self._mu:
                if self._closed:
                    raise StoreError(f"loopwarden Redis store {self.url}: the store is closed")
                if self._client is None:
                    client = build_client(self.options)
                    if getattr(client, "nodes_manager", None) is None:
                        self._slots.keep_from(client.connection_pool)
                    self._client = client
                client = self._client
        return client

    async def _async_client(self) -> _AsyncClient:
        loop = asyncio.get_running_loop()
        entry = self._aclients.get(loop)
        if entry is None:
            if self._closed:
                raise StoreError(f"loopwarden Redis store {self.url}: the store is closed")
            client = build_client(self.options, is_async=True)
            entry = self._aclients[loop] = _AsyncClient(client, self.options.pool_size)
        if not entry.ready:
            # Concurrent first commands would each discover the Cluster topology and
            # close each other's connections: the first caller does it for all.
            async with entry.lock:
                if not entry.ready:
                    await entry.client.initialize()
                    entry.ready = True
        return entry

    def _gate(self) -> bool:
        """Fail at once while Redis is down; True when this call is the probe."""
        if self._outage is None:
            return False
        with self._mu:
            out = self._current_outage()
            if out is None:
                return False
            now = time.monotonic()
            if out.probing or now < out.retry_at:
                out.skipped += 1
                raise _Unavailable(
                    f"loopwarden Redis store {self.url} is unavailable ({out.reason}); "
                    f"next attempt in {max(0.0, out.retry_at - now):.1f} s"
                )
            out.probing = True
            return True

    def _current_outage(self) -> _Outage | None:
        return self._outage

    def _failed(self, exc: Exception, probe: bool) -> StoreError:
        reason = _describe(exc, self.options.timeout)
        now = time.monotonic()
        with self._mu:
            out = self._outage
            if out is None:
                first = min(_FIRST_BACKOFF, self.options.backoff)
                self._outage = _Outage(now, now + first, first, reason)
            else:
                if probe:
                    out.delay = min(max(out.delay * 2, _FIRST_BACKOFF), self.options.backoff)
                    out.retry_at = now + out.delay
                    out.probing = False
                out.skipped += 1
        if out is None:
            logger.warning(
                "loopwarden Redis store %s is unavailable: %s. Loop detection is suspended "
                "(tool calls fail open, or closed when configured) and Redis is tried again "
                "every few seconds; this is logged once per outage",
                self.url,
                reason,
            )
        return _Unavailable(f"loopwarden Redis store {self.url}: {reason}", exc)

    def _succeeded(self) -> None:
        if self._outage is None:
            return
        with self._mu:
            out, self._outage = self._outage, None
        if out is not None:
            logger.warning(
                "loopwarden Redis store %s is reachable again after %.1f s (%d guard steps "
                "were not checked)",
                self.url,
                time.monotonic() - out.since,
                out.skipped,
            )

    def _abandon_probe(self, probe: bool) -> None:
        if probe:
            with self._mu:
                if self._outage is not None:
                    self._outage.probing = False

    def _learned_generation(self, generation: bytes) -> None:
        self._check_generation = False
        known, self._generation = self._generation, generation
        if known is not None and known != generation:
            logger.warning(
                "loopwarden Redis store %s came back without its data (restarted without "
                "persistence, flushed, or failed over to an empty replica): runs in progress "
                "start afresh",
                self.url,
            )

    # -- driving the protocol ----------------------------------------------------------
    def _run(self, ops: Generator[cas.Op, Any, cas.Outcome[T, O]]) -> cas.Outcome[T, O]:
        probe = self._gate()
        slots = self._slots
        try:
            waited = slots.enter(self.url)
        except BaseException:
            self._abandon_probe(probe)
            raise
        try:
            if waited and not probe:  # an outage began while this call waited: fail at once
                probe = self._gate()
            client = self._sync_client()
            reply: Any = None
            while True:
                try:
                    op = ops.send(reply)
                except StopIteration as done:
                    result: cas.Outcome[T, O] = done.value
                    break
                if isinstance(op, cas.Sleep):
                    time.sleep(op.seconds)
                    reply = None
                else:
                    reply = _cas(client, op, slots)
            if self._check_generation or result.vanished or self._outage is not None:
                self._learned_generation(
                    _eval(
                        client, cas.GEN_SHA, cas.GEN_SCRIPT, (1, self._gen_key(), cas.new_token())
                    )
                )
        except Exception as exc:
            err = self._classify(exc, probe)
            if err is exc:
                raise
            raise err from None
        finally:
            slots.leave()
        self._succeeded()
        return result

    async def _arun(self, ops: Generator[cas.Op, Any, cas.Outcome[T, O]]) -> cas.Outcome[T, O]:
        probe = self._gate()
        try:
            entry = await self._async_client()
            waited = await _aenter(entry.slots, self.options.busy_timeout, self.url)
        except Exception as exc:
            err = self._classify(exc, probe)
            if err is exc:
                raise
            raise err from None
        try:
            if waited and not probe:
                probe = self._gate()
            client = entry.client
            reply: Any = None
            while True:
                try:
                    op = ops.send(reply)
                except StopIteration as done:
                    result: cas.Outcome[T, O] = done.value
                    break
                if isinstance(op, cas.Sleep):
                    await asyncio.sleep(op.seconds)
                    reply = None
                else:
                    reply = await _acas(client, op)
            if self._check_generation or result.vanished or self._outage is not None:
                generation = await _aeval(
                    client, cas.GEN_SHA, cas.GEN_SCRIPT, (1, self._gen_key(), cas.new_token())
                )
                self._learned_generation(generation)
        except Exception as exc:
            err = self._classify(exc, probe)
            if err is exc:
                raise
            raise err from None
        finally:
            entry.slots.release()
        self._succeeded()
        return result

    def _classify(self, exc: Exception, probe: bool) -> Exception:
        """What a failed operation raises: an outage (reported once), contention, or ``exc``."""
        if _pool_exhausted(exc):
            exc = _Busy(f"loopwarden Redis store {self.url}: {exc}; raise pool_size")
        if isinstance(exc, _Busy) or not _is_redis_error(exc):
            # Waiting for a connection is contention, never an outage.
            self._abandon_probe(probe)
            return exc
        return self._failed(exc, probe)

    def _gen_key(self) -> str:
        return f"{self.prefix}generation"

    # -- the local cache -------------------------------------------------------------
    def _take(self, rkey: str, tag: object) -> tuple[bytes, Any] | None:
        with self._mu:
            entry = self._cache.pop(rkey, None)
        if entry is None or (entry[2] is not tag and entry[2] != tag):
            return None
        return entry[0], entry[1]

    def _keep(self, rkey: str, outcome: cas.Outcome[Any, Any], tag: object) -> None:
        if outcome.cached is None or self.options.cache <= 0:
            return
        with self._mu:
            self._cache[rkey] = (*outcome.cached, tag)
            while len(self._cache) > self.options.cache:
                self._cache.popitem(last=False)

    def _stripe(self, rkey: str) -> threading.Lock:
        if os.getpid() != self._pid:  # a forked child: locks held by parent threads are stuck
            self._pid = os.getpid()
            self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
            self._mu = threading.Lock()
        return self._stripes[hash(rkey) % _LOCK_STRIPES]

    # -- encoding ------------------------------------------------------------------
    def _encode(self, state: RunState) -> cas.Data:
        if self.options.compress:
            return zlib.compress(state.to_bytes(), 1)
        return state.to_parts()

    def _decoder(self, key: str, config: LoopDetectionConfig) -> Callable[[bytes], RunState]:
        def decode(data: bytes) -> RunState:
            if data[:1] == b"x":  # a zlib stream; plain states start with "{"
                try:
                    data = zlib.decompress(data)
                except zlib.error:
                    data = b""  # unreadable: decode_state starts the run afresh
            return decode_state(data, config, key, self.url)

        return decode

    def _run_ops(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> Generator[cas.Op, Any, cas.Outcome[T, RunState]]:
        rkey = self.run_key(key)

        def step(state: RunState) -> tuple[cas.Data, T, RunState]:
            state.updated = time.time()
            result = fn(state)
            return self._encode(state), result, state

        return cas.update(
            rkey,
            self._take(rkey, config),
            lambda: RunState.new(config),
            self._decoder(key, config),
            step,
            self._ttl_ms,
            self.options.busy_timeout,
        )

    # -- the Store protocol ------------------------------------------------------------
    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        """Load (or create) the state of ``key``, apply ``fn``, save it; atomically.

        ``fn`` may run more than once (when another process wrote the run meanwhile).
        """
        rkey = self.run_key(key)
        stripe = self._stripe(rkey)
        # Threads of this process take turns on a run instead of racing each other.
        if not stripe.acquire(timeout=self.options.busy_timeout):
            raise StoreError(f"loopwarden Redis store {self.url}: run {key!r} is busy")
        try:
            outcome = self._run(self._run_ops(key, config, fn))
            self._keep(rkey, outcome, config)
        finally:
            stripe.release()
        return outcome.result

    async def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        """:meth:`transact` on the asyncio client of the running loop."""
        outcome = await self._arun(self._run_ops(key, config, fn))
        self._keep(self.run_key(key), outcome, config)
        return outcome.result

    def delete(self, key: str) -> None:
        """Forget one run."""
        self._delete(self.run_key(key))

    def _delete(self, rkey: str) -> None:
        with self._mu:
            self._cache.pop(rkey, None)
        self._command(lambda client: client.delete(rkey))

    def _command(self, call: Callable[[Any], T]) -> T:
        """One plain command through the outage gate."""
        probe = self._gate()
        slots = self._slots
        try:
            waited = slots.enter(self.url)
        except BaseException:
            self._abandon_probe(probe)
            raise
        try:
            if waited and not probe:
                probe = self._gate()
            result = call(self._sync_client())
        except Exception as exc:
            err = self._classify(exc, probe)
            if err is exc:
                raise
            raise err from None
        finally:
            slots.leave()
        self._succeeded()
        return result

    # -- side records (SideRecords) ----------------------------------------------------
    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        """Atomically update a small side record: ``fn(old)`` returns ``(new, result)``.

        ``new=None`` deletes the record. Side records expire like runs.
        """
        rkey = self.value_key(key)
        stripe = self._stripe(rkey)
        if not stripe.acquire(timeout=self.options.busy_timeout):
            raise StoreError(f"loopwarden Redis store {self.url}: record {key!r} is busy")

        def step(old: bytes | None) -> tuple[bytes | None, T, bytes | None]:
            new, result = fn(old)
            return new, result, new

        try:
            ops = cas.update(
                rkey,
                self._take(rkey, bytes),
                lambda: None,
                bytes,
                step,
                self._ttl_ms,
                self.options.busy_timeout,
            )
            outcome = self._run(ops)
            self._keep(rkey, outcome, bytes)
        finally:
            stripe.release()
        return outcome.result

    def delete_value(self, key: str) -> None:
        """Forget one side record."""
        self._delete(self.value_key(key))

    # -- inspection (Inspectable) -----------------------------------------------------
    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The stored state of ``key`` (read only), or ``None``."""
        data = self._command(lambda client: client.get(self.run_key(key)))
        return None if data is None else self._decoder(key, config)(data[8:])

    def keys(self) -> list[str]:
        """Keys of the stored runs (a SCAN over the prefix; for inspection and tests)."""
        head = f"{self.prefix}run:{{"
        pattern = _glob_escape(head) + "*"

        def scan(client: Any) -> list[str]:
            found = {k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(pattern)}
            return sorted(unquote(k[len(head) : -1]) for k in found if k.endswith("}"))

        return self._command(scan)

    def expire(self, now: float | None = None) -> None:
        """Nothing to do: Redis expires idle runs itself (each write renews the TTL)."""

    def check(self) -> None:
        """Connect, authenticate and run the scripts once; raises :class:`StoreError` naming
        what is wrong (unreachable, authentication, missing commands)."""
        slots = self._slots
        slots.enter(self.url)
        try:
            client = self._sync_client()
            client.ping()
            generation = _eval(client, cas.GEN_SHA, cas.GEN_SCRIPT, (1, self._gen_key(), b"x"))
            # A write and a delete of a scratch record: every command updates use.
            token = cas.new_token()
            scratch = f"{self._gen_key()}:{{check-{token.hex()}}}"
            written = _cas(client, cas.Cas(scratch, b"", token, b"x", 10_000), slots)
            reply = (
                written
                if written != 1
                else _cas(client, cas.Cas(scratch, token, b"", None, 0), slots)
            )
        except Exception as exc:
            if not _is_redis_error(exc):
                raise
            raise StoreError(
                f"loopwarden Redis store {self.url}: {_describe(exc, self.options.timeout)}", exc
            ) from None
        finally:
            slots.leave()
        if not generation or reply != 1:
            raise StoreError(f"loopwarden Redis store {self.url}: unexpected script replies")

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Close this store's connections (async ones as far as their loops allow)."""
        with self._mu:
            self._closed = True
            client, self._client = self._client, None
            aclients = list(self._aclients.items())
            self._aclients = weakref.WeakKeyDictionary()
            self._cache.clear()
        self._slots.close()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
                # Sentinel clients own neither their pool nor the sentinel connections.
                pool = getattr(client, "connection_pool", None)
                if pool is not None:
                    pool.disconnect()
                    for sentinel in _sentinels(pool):
                        sentinel.close()
        for loop, aclient in aclients:
            _close_async(loop, aclient.client)

    async def aclose(self) -> None:
        """Close this store, awaiting the running loop's async client."""
        loop = asyncio.get_running_loop()
        aclient = self._aclients.pop(loop, None)
        if aclient is not None:
            await _aclose(aclient.client)
        self.close()


def _close_async(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    try:
        if loop.is_closed():
            return
        if loop.is_running():
            loop.create_task(_aclose(client))
        else:
            loop.run_until_complete(_aclose(client))
    except Exception:
        logger.debug("loopwarden could not close an asyncio Redis client", exc_info=True)


async def _aclose(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.aclose()
        pool = getattr(client, "connection_pool", None)
        if pool is not None:
            await pool.disconnect()
            for sentinel in _sentinels(pool):
                await sentinel.aclose()


def _sentinels(pool: Any) -> list[Any]:
    manager = getattr(pool, "sentinel_manager", None)
    return list(getattr(manager, "sentinels", []))


def _eval(client: Any, sha: str, script: str, args: tuple[Any, ...]) -> Any:
    """EVALSHA, loading the script on a server that does not know it; ``args`` start
    with the number of keys."""
    try:
        return client.evalsha(sha, *args)
    except _rex.NoScriptError:
        client.script_load(script)
        return client.evalsha(sha, *args)


async def _aeval(client: Any, sha: str, script: str, args: tuple[Any, ...]) -> Any:
    try:
        return await client.evalsha(sha, *args)
    except _rex.NoScriptError:
        await client.script_load(script)
        return await client.evalsha(sha, *args)


def _cas_args(op: cas.Cas) -> tuple[Any, ...]:
    stage = cas.staging_key(op.key, op.token if op.data is not None else b"")
    return (2, op.key, stage, op.expected, b"d" if op.data is None else b"w")


class _Busy(StoreError):
    """Every connection stayed in use for ``busy_timeout``: contention, not an outage."""


class _Slots:
    """Turns at the pool of one synchronous client, and the connections updates keep.

    At most ``size`` (``pool_size``) operations of the store run at once, each
    using one connection at a time; a thread past that waits here for its turn,
    up to ``wait`` seconds (``busy_timeout``). Waiting is contention: it is never
    taken for an outage, and redis-py's own pool never runs dry, so no one waits
    there (a pool-wait timeout used to read as "cannot connect").

    Updates keep connections checked out between steps: checking one out of the
    pool costs a non-blocking read and two timeout changes on the socket
    (redis-py's check that it holds no stale reply), a third of a step on a slow
    network stack, and an update never hands back a connection with replies
    unread (it disconnects on any failure). Kept connections plus running
    operations never exceed ``size``: a kept one goes back to the pool as soon
    as an operation might need the pool's last connection.
    """

    def __init__(self, size: int, wait: float) -> None:
        self.size = max(1, size)
        self.wait = wait
        self.pool: Any = None
        self._reset()

    def _reset(self) -> None:
        # A plain lock on the common path; the condition only while someone waits.
        self.mu = threading.Lock()
        self.cond = threading.Condition(self.mu)
        self.running = 0
        self.waiting = 0
        self.idle: list[Any] = []
        self.pid = os.getpid()

    def keep_from(self, pool: Any) -> None:
        """Keep connections of ``pool`` between updates (not on a Cluster: many pools)."""
        self.pool = pool

    def enter(self, url: str) -> bool:
        """Wait for a turn; True when this call had to wait."""
        if os.getpid() != self.pid:  # a forked child: the parent's turns and sockets are not ours
            self._reset()
        spare = None
        with self.mu:
            waited = self.running >= self.size
            if waited:
                self._wait(url)
            self.running += 1
            if self.idle and self.running + len(self.idle) > self.size:
                spare = self.idle.pop()
        if spare is not None:
            self.pool.release(spare)
        return waited

    def _wait(self, url: str) -> None:
        deadline = time.monotonic() + self.wait
        self.waiting += 1
        try:
            while self.running >= self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Busy(
                        f"loopwarden Redis store {url}: all {self.size} connections stayed "
                        f"busy for {self.wait:g} s; raise pool_size or busy_timeout"
                    )
                self.cond.wait(left)
        finally:
            self.waiting -= 1

    def leave(self) -> None:
        with self.mu:
            self.running -= 1
            if self.waiting:
                self.cond.notify()

    def take(self) -> Any:
        with self.mu:
            if self.idle:
                return self.idle.pop()
        return self.pool.get_connection()

    def give(self, conn: Any) -> None:
        with self.mu:
            if len(self.idle) + self.running < self.size:
                self.idle.append(conn)
                return
        self.pool.release(conn)

    def drop(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            conn.disconnect()
        self.pool.release(conn)

    def close(self) -> None:
        with self.mu:
            idle, self.idle = self.idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                self.pool.release(conn)


async def _aenter(slots: asyncio.Semaphore, wait: float, url: str) -> bool:
    """An asyncio turn (see :class:`_Slots`); True when this call had to wait."""
    waited = slots.locked()
    try:
        await asyncio.wait_for(slots.acquire(), wait)
    except TimeoutError:
        raise _Busy(
            f"loopwarden Redis store {url}: every connection stayed busy for {wait:g} s; "
            "raise pool_size or busy_timeout"
        ) from None
    return waited


def _pool_exhausted(exc: BaseException) -> bool:
    """redis-py found no free connection in its pool (a wait, not a broken server)."""
    if isinstance(exc, getattr(_rex, "MaxConnectionsError", ())):
        return True
    return isinstance(exc, _rex.ConnectionError) and str(exc).startswith("No connection available")


def _cas_commands(op: cas.Cas, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    commands: list[tuple[Any, ...]] = []
    if op.data is not None:
        value = [op.token, op.data] if isinstance(op.data, bytes) else [op.token, *op.data]
        commands.append((b"SET", args[2], value, b"PX", op.ttl_ms))
    commands.append((b"EVALSHA", cas.CAS_SHA, *args))
    return commands


def _cas(client: Any, op: cas.Cas, slots: _Slots) -> Any:
    """One compare-and-set: the staging SET and the script, in one round trip
    (two on a Cluster, whose client pipelines no scripts)."""
    args = _cas_args(op)
    if getattr(client, "nodes_manager", None) is not None:
        if op.data is not None:
            client.set(args[2], op.record(), px=op.ttl_ms)
        return _eval(client, cas.CAS_SHA, cas.CAS_SCRIPT, args)
    commands = _cas_commands(op, args)
    for attempt in (0, 1):
        try:
            return _first_error_or_last(_exchange(client, commands, slots))
        except _rex.NoScriptError:
            if attempt:
                raise
            client.script_load(cas.CAS_SCRIPT)
    raise AssertionError("unreachable")


async def _acas(client: Any, op: cas.Cas) -> Any:
    args = _cas_args(op)
    if getattr(client, "nodes_manager", None) is not None:
        if op.data is not None:
            await client.set(args[2], op.record(), px=op.ttl_ms)
        return await _aeval(client, cas.CAS_SHA, cas.CAS_SCRIPT, args)
    commands = _cas_commands(op, args)
    for attempt in (0, 1):
        try:
            return _first_error_or_last(await _aexchange(client, commands))
        except _rex.NoScriptError:
            if attempt:
                raise
            await client.script_load(cas.CAS_SCRIPT)
    raise AssertionError("unreachable")


# Why not redis-py's pipeline for the update: it writes every value above 6 KB
# as a chunk of its own, one system call each, and the server may answer the
# first command before the rest has arrived, so the replies come back in more
# reads too; with its bookkeeping that cost about as much again as the round
# trip itself. Here the commands leave in one write and their replies usually
# come back in one read. The pool, its connection checks and the client's retry
# on a broken connection are redis-py's own.


def _pack(commands: list[tuple[Any, ...]]) -> bytes:
    """The commands in RESP, as one buffer; an argument given as a list of byte
    pieces is one bulk string (so a large state is copied once, here)."""
    out: list[bytes] = []
    add = out.append
    for command in commands:
        add(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, list):
                add(b"$%d\r\n" % sum(map(len, arg)))
                out.extend(arg)
                add(b"\r\n")
                continue
            if isinstance(arg, str):
                arg = arg.encode()
            elif isinstance(arg, int):
                arg = b"%d" % arg
            add(b"$%d\r\n" % len(arg))
            add(arg)
            add(b"\r\n")
    return b"".join(out)


def _first_error_or_last(replies: list[Any]) -> Any:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies[-1]


def _exchange(client: Any, commands: list[tuple[Any, ...]], slots: _Slots) -> list[Any]:
    """``commands`` in one write; their replies in order (error replies as exceptions)."""
    conn = slots.take()
    try:
        replies: list[Any] = conn.retry.call_with_retry(
            lambda: _send_and_read(conn, commands), lambda _error: conn.disconnect()
        )
    except BaseException:
        slots.drop(conn)
        raise
    slots.give(conn)
    return replies


def _send_and_read(conn: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    conn.send_packed_command([_pack(commands)])
    replies: list[Any] = []
    try:
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except _rex.ResponseError as exc:
                replies.append(exc)
    except BaseException:
        conn.disconnect()  # replies left unread would answer the next command
        raise
    return replies


async def _aexchange(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    pool = client.connection_pool
    conn = await pool.get_connection()

    async def attempt() -> list[Any]:
        await conn.send_packed_command([_pack(commands)])
        replies: list[Any] = []
        try:
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except _rex.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return replies

    async def failed(_error: Exception) -> None:
        await conn.disconnect()

    try:
        return await conn.retry.call_with_retry(attempt, failed)  # type: ignore[no-any-return]
    finally:
        await pool.release(conn)


def _is_redis_error(exc: BaseException) -> bool:
    return isinstance(exc, (_rex.RedisError, _rex.RedisClusterException, OSError))


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _require_redis(url: str) -> None:
    if _rex is None:
        raise ConfigError(
            f"the Redis store ({redact(url)}) needs the redis package: "
            "pip install 'loopwarden[redis]'"
        )
