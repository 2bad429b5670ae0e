"""At most one wait for the state store per hook event.

One hook event may touch the store several times: the session's side record,
then the run (``PreToolUse``), or one transaction per recorded call (a Claude
Code ``PostToolBatch`` of six calls). When another process holds the SQLite
write lock, each of them would wait its full ``busy_timeout`` before the guard
fails open: six waits for one batch. The hook's stores are wrapped in
:class:`OneWait`: once one operation of an event has failed, every later
operation of the same event fails at once, without touching the store. The
event is then answered as for any store failure (allowed, or denied when
``failMode`` is closed), after a single wait.

The budget is per thread: the hook process handles one event, and each of the
helper's workers handles one event at a time (:func:`begin` starts each).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import StoreError
from ..stores import SideRecords, Store
from ..stores.base import BaseStore

if TYPE_CHECKING:
    from ..config import LoopDetectionConfig
    from ..engine.state import RunState

__all__ = ["OneWait", "begin", "spent"]

T = TypeVar("T")
_event = threading.local()


def begin() -> None:
    """A new hook event starts on this thread: its store operations may wait again."""
    _event.failed = None


def spent() -> StoreError | None:
    """The store failure of this thread's current event, if one happened."""
    failed: StoreError | None = getattr(_event, "failed", None)
    return failed


def _check() -> None:
    failed = spent()
    if failed is not None:
        # Not repeating the first failure's text: it is logged already.
        raise StoreError("not tried: the state store failed earlier in this hook event", failed)


def _call(fn: Callable[..., T], *args: Any) -> T:
    _check()
    try:
        return fn(*args)
    except StoreError as exc:
        _event.failed = exc
        raise


class OneWait(BaseStore, SideRecords):
    """A store (and its side records) whose operations give up once one of the
    current hook event's operations has failed. Everything else is the wrapped
    store's: its URL, and what it can do (``Inspectable`` and so on)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def transact(self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]) -> T:
        inner: Store = self.inner
        done: T = _call(inner.transact, key, config, fn)
        return done

    async def atransact(  # the hook is synchronous; here for the protocol's sake
        self, key: str, config: LoopDetectionConfig, fn: Callable[[RunState], T]
    ) -> T:
        _check()
        inner: Store = self.inner
        pending: Awaitable[T] = inner.atransact(key, config, fn)
        try:
            return await pending
        except StoreError as exc:
            _event.failed = exc
            raise

    def delete(self, key: str) -> None:
        _call(self.inner.delete, key)

    def close(self) -> None:
        self.inner.close()

    def transact_value(self, key: str, fn: Callable[[bytes | None], tuple[bytes | None, T]]) -> T:
        side: SideRecords = self.inner
        done: T = _call(side.transact_value, key, fn)
        return done

    def delete_value(self, key: str) -> None:
        _call(self.inner.delete_value, key)

    def read_value(self, key: str) -> bytes | None:
        read = getattr(self.inner, "read_value", None)
        if read is None:  # no lock-free read: a transaction that changes nothing
            return self.transact_value(key, lambda old: (old, old))
        value: bytes | None = _call(read, key)
        return value

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)
