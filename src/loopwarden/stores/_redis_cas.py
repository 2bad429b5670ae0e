"""The Redis store's update protocol, written once for the sync and the async client.

Each stored record is a hash ``{t: token, d: data}``. The token is 64 random
bits, new on every write. An update sends the data it computed together with
the token it started from to a small Lua script, which writes only when the
stored token still matches (compare-and-set) and otherwise answers with the
current token and data, so a retry needs no extra read. Random tokens (not a
counter) mean a run that was deleted and created again never matches a stale
token by accident, and a write whose reply was lost is recognised by its own
token on the retry.

The protocol is a generator that yields operations (``Cas``, ``Sleep``) and
receives their replies; :mod:`loopwarden.stores.redis` drives it with a
blocking or an asyncio client.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from ..errors import StoreError

__all__ = ["CAS_SCRIPT", "CAS_SHA", "GEN_SCRIPT", "GEN_SHA", "Cas", "Sleep", "update"]

T = TypeVar("T")
O = TypeVar("O")  # noqa: E741 - the local form of a record (RunState, bytes, ...)

# KEYS[1]: the record. ARGV: expected token ("" = absent), new token, then either
# data and TTL in milliseconds (write) or nothing (delete).
CAS_SCRIPT = """\
local t = redis.call('HGET', KEYS[1], 't')
if t == false then t = '' end
if t ~= ARGV[1] then
  if t == '' then return {} end
  return {t, redis.call('HGET', KEYS[1], 'd')}
end
if #ARGV < 4 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 't', ARGV[2], 'd', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
"""
CAS_SHA = hashlib.sha1(CAS_SCRIPT.encode()).hexdigest()

# The store's generation: created once, read back. A server that lost its data
# (restarted without persistence, flushed) comes back without it.
GEN_SCRIPT = """\
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""
GEN_SHA = hashlib.sha1(GEN_SCRIPT.encode()).hexdigest()


class Cas(NamedTuple):
    """Run the compare-and-set script: reply ``1`` (written) or ``[]``/``[token, data]``."""

    key: str
    args: tuple[bytes | int, ...]


class Sleep(NamedTuple):
    """Wait before retrying a contended update."""

    seconds: float


Op = Cas | Sleep


@dataclass(frozen=True)
class Outcome(Generic[T, O]):
    result: T
    cached: tuple[bytes, O] | None
    """What the record now holds, for the local cache (``None``: deleted)."""
    vanished: bool
    """A record this process had cached was gone from the server."""


def new_token() -> bytes:
    # The random module reseeds itself in forked children, so siblings differ.
    return random.getrandbits(64).to_bytes(8, "little")


def update(
    key: str,
    cached: tuple[bytes, O] | None,
    fresh: Callable[[], O],
    decode: Callable[[bytes], O],
    step: Callable[[O], tuple[bytes | None, T, O]],
    ttl_ms: int,
    busy_timeout: float,
) -> Generator[Op, Any, Outcome[T, O]]:
    """Apply ``step`` to the record at ``key`` until a compare-and-set succeeds.

    ``step(obj)`` returns the data to store (``None`` deletes), the result, and
    the record's new local form (for the cache).
    It starts from the cached copy, or from a fresh record (right for a new
    run; for an existing one the script's reply carries the stored data). So
    the common case is one round trip, and two when another process wrote the
    record since. ``step`` may therefore run more than once: it must be pure.
    """
    token, obj = cached if cached is not None else (b"", fresh())
    vanished = False
    conflicts = 0
    started = 0.0
    while True:
        data, result, after = step(obj)
        mine = new_token()
        args: tuple[bytes | int, ...] = (
            (token, mine) if data is None else (token, mine, data, ttl_ms)
        )
        reply = yield Cas(key, args)
        if reply == 1 or (reply and reply[0] == mine):
            # The second form: our write went through but its reply was lost and
            # the client retried it.
            return Outcome(result, None if data is None else (mine, after), vanished)
        if reply:
            token, obj = reply[0], decode(reply[1])
        else:
            vanished = vanished or bool(token)
            token, obj = b"", fresh()
        conflicts += 1
        if conflicts >= 3:
            # Heavy contention on one run: back off with jitter so that the
            # writers spread out, within the busy timeout.
            now = time.monotonic()
            started = started or now
            if now - started > busy_timeout:
                raise StoreError(
                    f"could not update {key!r}: other writers changed it {conflicts} times "
                    f"in a row for {busy_timeout:g} s; raise busy_timeout in the store URL"
                )
            yield Sleep(random.uniform(0, min(0.01, 0.0001 * 2 ** min(conflicts, 10))))
