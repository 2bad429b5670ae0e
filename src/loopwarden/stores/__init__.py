"""State stores: where the runtime guard keeps per-run state.

A store runs one function against one run's :class:`~loopwarden.engine.state.RunState`
atomically (read, update, write in one step), so concurrent callers of the same
run never lose or double-count a call. Select one by URL with
:func:`store_from_url`: ``memory://`` (this process), ``sqlite:///path`` (several
processes on one host), ``redis://host:port/db`` (several hosts).
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from .base import BaseStore, InProcess, Inspectable, SideRecords, Store
from .memory import LocalStore, MemoryStore

__all__ = [
    "BaseStore",
    "InProcess",
    "Inspectable",
    "LocalStore",
    "MemoryStore",
    "SideRecords",
    "Store",
    "store_from_url",
]


# scheme -> "module:Class", imported only when used.
_SCHEMES = {
    "memory": "loopwarden.stores.memory:MemoryStore",
    "sqlite": "loopwarden.stores.sqlite:SQLiteStore",
    "redis": "loopwarden.stores.redis:RedisStore",
    "rediss": "loopwarden.stores.redis:RedisStore",
    "redis+unix": "loopwarden.stores.redis:RedisStore",
    "redis+cluster": "loopwarden.stores.redis:RedisStore",
    "redis+sentinel": "loopwarden.stores.redis:RedisStore",
}


def store_from_url(url: str, *, ttl_seconds: float | None = None) -> Store:
    """Build a store from a URL such as ``memory://`` or ``sqlite:///var/lib/lw.db``."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in _SCHEMES:
        close = difflib.get_close_matches(scheme, list(_SCHEMES), n=1)
        hint = f" Did you mean {close[0]}://?" if close else ""
        raise ConfigError(
            f"unknown store URL {url!r}: expected one of "
            f"{', '.join(s + '://' for s in _SCHEMES)}.{hint}"
        )
    module_name, _, class_name = _SCHEMES[scheme].partition(":")
    try:
        import importlib

        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("loopwarden"):
            raise ConfigError(f"store {scheme}:// is not available in this version") from None
        raise
    factory = getattr(module, class_name)
    store: Store = factory.from_url(url, ttl_seconds=ttl_seconds)
    return store
