"""The Redis store's update protocol, written once for the sync and the async client.

Each stored record is one string key: an 8-byte token followed by the data.
The token is 64 random bits, new on every write. An update is one pipeline of
two commands: a plain ``SET`` of the new token and data under a staging key
next to the record (same hash tag, so the same Cluster slot), then a small Lua
script that compares the record's token with the one the update started from
and, when they match, moves the staging key onto the record with ``RENAME``
(compare-and-set); otherwise it drops the staging key and answers with the
current record, so a retry needs no extra read. The data never passes through
Lua on the common path: handing a script a large argument costs the server
far more than the command itself (about 0.3 ms for a 180 KB state, against
4 us for the ``SET``). Random tokens (not a counter) mean a run that was
deleted and created again never matches a stale token by accident, and a
write whose reply was lost is recognised by its own token on the retry.

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

__all__ = [
    "CAS_SCRIPT",
    "CAS_SHA",
    "GEN_SCRIPT",
    "GEN_SHA",
    "Cas",
    "Data",
    "Sleep",
    "staging_key",
    "update",
]

T = TypeVar("T")
O = TypeVar("O")  # noqa: E741 - the local form of a record (RunState, bytes, ...)

# KEYS[1]: the record, KEYS[2]: its staging key (written just before, in the same
# pipeline, when ARGV[2] is "w"). ARGV[1]: the expected token ("" = absent);
# ARGV[2]: "w" (move the staged record in) or "d" (delete the record).
CAS_SCRIPT = """\
local t = redis.call('GETRANGE', KEYS[1], 0, 7)
if t ~= ARGV[1] then
  if ARGV[2] == 'w' then redis.call('DEL', KEYS[2]) end
  if t == '' then return {} end
  return redis.call('GET', KEYS[1])
end
if ARGV[2] == 'w' then
  redis.call('RENAME', KEYS[2], KEYS[1])
else
  redis.call('DEL', KEYS[1])
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


Data = bytes | list[bytes]
"""A record's data: bytes, or pieces that the writer joins (a large state is copied once)."""


class Cas(NamedTuple):
    """Stage ``token`` + ``data`` (unless ``data`` is ``None``: delete) and run the
    compare-and-set script.

    Reply ``1`` (written), ``[]`` (no record) or the current record's bytes.
    """

    key: str
    expected: bytes
    token: bytes
    """The new record's token (its first 8 bytes)."""
    data: Data | None
    """The data to store after the token, ``None`` to delete."""
    ttl_ms: int

    def record(self) -> bytes:
        """Token and data as one value."""
        data = self.data
        assert data is not None
        return self.token + (data if isinstance(data, bytes) else b"".join(data))


def staging_key(key: str, token: bytes) -> str:
    """Where an update stages its record: beside ``key``, in the same Cluster slot."""
    return f"{key}:w:{token.hex()}"


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
    step: Callable[[O], tuple[Data | None, T, O]],
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
        reply = yield Cas(key, token, mine, data, ttl_ms)
        if reply == 1 or (isinstance(reply, bytes) and reply[:8] == mine):
            # The second form: our write went through but its reply was lost and
            # the client retried it.
            return Outcome(result, None if data is None else (mine, after), vanished)
        if reply:
            token, obj = reply[:8], decode(reply[8:])
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
