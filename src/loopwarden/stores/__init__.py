"""State stores: where the runtime guard keeps per-run state.

A store runs one function against one run's :class:`~loopwarden.engine.state.RunState`
atomically (read, update, write in one step), so concurrent callers of the same
run never lose or double-count a call. Select one by URL with
:func:`store_from_url`: ``memory://`` (this process), ``sqlite:///path`` (several
processes on one host), ``redis://host:port/db`` (several hosts).
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError, ConfigIssue
from ._urls import may_hold_credentials, redact
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
    "unix": "loopwarden.stores.redis:RedisStore",
    "redis+unix": "loopwarden.stores.redis:RedisStore",
    "redis+cluster": "loopwarden.stores.redis:RedisStore",
    "redis+sentinel": "loopwarden.stores.redis:RedisStore",
}

# Schemes whose URLs may carry a user name and password.
_CREDENTIALED = frozenset(
    ("redis", "rediss", "unix", "redis+unix", "redis+cluster", "redis+sentinel")
)


def store_from_url(url: str, *, ttl_seconds: float | None = None) -> Store:
    """Build a store from a URL such as ``memory://`` or ``sqlite:///var/lib/lw.db``."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in _SCHEMES:
        close = difflib.get_close_matches(scheme, list(_SCHEMES), n=1)
        hint = f" Did you mean {close[0]}://?" if close else ""
        raise ConfigError(
            f"unknown store URL {redact(url)!r}: expected one of "
            f"{', '.join(s + '://' for s in _SCHEMES)}.{hint}"
        )
    if scheme not in _CREDENTIALED and may_hold_credentials(url):
        # Refused before the store reads it: its messages would quote the URL's parts.
        raise ConfigError(
            f"store URL {redact(url)!r}: {scheme}:// URLs take no user name or password"
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
    try:
        store: Store = factory.from_url(url, ttl_seconds=ttl_seconds)
    except ConfigError as exc:
        raise _redacted(exc, url) from None
    return store


def _redacted(exc: ConfigError, url: str) -> ConfigError:
    """``exc`` with ``url`` shown redacted wherever a store's message quoted it whole."""
    shown = redact(url)
    if shown == url:
        return exc
    quoted = repr(url)[1:-1]  # as a message's {url!r} shows it
    issues = [
        ConfigIssue(
            issue.path,
            issue.message.replace(quoted, shown).replace(url, shown),
            issue.file,
            issue.line,
        )
        for issue in exc.issues
    ]
    error = ConfigError(issues)
    error.fail_closed = exc.fail_closed
    return error
