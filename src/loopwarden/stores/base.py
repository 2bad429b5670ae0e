"""The store contract: one required interface, plus capabilities a backend may declare.

Every store implements :class:`Store`. What else it can do is declared by the
small capability protocols below and checked once, where a store is handed to
the guard or a hook, never per call:

* :class:`InProcess`: the store hands out live state objects and never does
  I/O, so callers may use the sync methods from async code;
* :class:`SideRecords`: small keyed byte records beside run states (coding-agent
  hooks keep a session's transcript position there);
* :class:`Inspectable`: stored runs can be listed, read, expired and checked
  (``doctor``, tests).

The function given to :meth:`Store.transact` must be pure with respect to
anything outside the state it receives: a backend with optimistic concurrency
(Redis's compare-and-set; SQLite's update made before it takes the write lock)
may run it more than once for one update, and keep only the last run's changes.
The runtime guard relies on this: it logs, writes run records and emits events
only after ``transact`` returns.

============  ==========  ==========  ===========  ===========
store         InProcess   SideRecords Inspectable  expires runs
============  ==========  ==========  ===========  ===========
MemoryStore   yes         no          yes          yes (TTL, LRU)
LocalStore    yes         no          no           no (one replay)
SQLiteStore   no          yes         yes          yes (TTL)
============  ==========  ==========  ===========  ===========
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from types import TracebackType

    # typing_extensions is no runtime dependency of the core.
    from typing import Self

    from ..config import LoopDetectionConfig
    from ..engine.state import RunState

__all__ = [
    "BaseStore",
    "InProcess",
    "Inspectable",
    "SideRecords",
    "Store",
    "decode_state",
    "unreadable",
]

T = TypeVar("T")
S = TypeVar("S", bound="BaseStore")


@runtime_checkable
class Store(Protocol):
    """Atomic per-run state updates."""

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        """Load (or create) the state of ``key``, apply ``fn``, save it; all atomically."""
        ...

    def atransact(
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> Awaitable[T]:
        """Async form of :meth:`transact`."""
        ...

    def delete(self, key: str) -> None:
        """Forget one run."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


@runtime_checkable
class InProcess(Protocol):
    """Live state objects in this process; never blocks on I/O."""

    def attach(self, key: str, config: LoopDetectionConfig) -> RunState:
        """The live state of ``key``; update it under ``state.lock`` (``None``: unlocked)."""
        ...


@runtime_checkable
class SideRecords(Protocol):
    """Small keyed byte records that expire like runs."""

    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        """Atomically update one record: ``fn(old)`` returns ``(new, result)``; ``None`` deletes."""
        ...

    def delete_value(self, key: str) -> None:
        """Forget one record."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """Stored runs can be listed, read, expired and checked."""

    def load(self, key: str, config: LoopDetectionConfig) -> RunState | None:
        """The stored state of ``key``, or ``None``."""
        ...

    def keys(self) -> list[str]:
        """Keys of the stored runs."""
        ...

    def expire(self, now: float | None = None) -> None:
        """Delete runs idle for longer than the TTL."""
        ...

    def check(self) -> None:
        """Raise :class:`~loopwarden.errors.StoreError` when the backend is unusable."""
        ...


class BaseStore(Store):
    """A :class:`Store` base with the lifecycle of the built-in stores: ``with store:`` closes it.

    A backend subclasses it together with the capabilities it offers, e.g.
    ``class SQLiteStore(BaseStore, SideRecords, Inspectable)``; type checkers
    then verify every method the declarations promise.
    """

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def aclose(self) -> None:
        """Close from async code: a store whose connections belong to the running event
        loop releases them there (the default simply closes)."""
        self.close()


def decode_state(data: bytes, config: LoopDetectionConfig, key: str, where: object) -> RunState:
    """A stored run state, or a fresh one when the bytes cannot be read (written by another
    state version, damaged): one unreadable state must not wedge its run forever, so it
    starts afresh and a warning says so (``where`` names the store)."""
    from ..engine.state import RunState

    try:
        return RunState.from_bytes(data, config)
    except Exception as exc:
        unreadable(key, where, exc)
        return RunState.new(config)


def unreadable(key: str, where: object, exc: BaseException) -> None:
    """Log that the stored state of ``key`` in ``where`` could not be read (its run starts
    afresh)."""
    from .._logging import logger

    logger.warning(
        "loopwarden state of run %r in %s is unreadable (%s); starting it afresh",
        key.rsplit("\x1f", 1)[-1],
        where,
        str(exc) or type(exc).__name__,
    )
