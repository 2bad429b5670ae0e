"""Redis store URLs: parsing, redaction, and building the redis-py clients they name.

Schemes follow the ``limits`` library, so a deployment can reuse its URLs:

* ``redis://[[user]:password@]host[:port][/db]`` and ``rediss://...`` (TLS);
* ``redis+unix://[[user]:password@]/path/to/socket[?db=N]`` (also ``unix://...``, as
  redis-py spells it);
* ``redis+cluster://[[user]:password@]host:port[,host:port...]``;
* ``redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]``
  (the credentials are used for the sentinels and the primary alike).

Store options go in the query string (``?prefix=lw:&ttl=3600&timeout=0.25``) or
as keyword arguments of :class:`~loopwarden.stores.redis.RedisStore`. As in
redis-py, the user name and password may also be given as ``?username=`` and
``?password=`` (those in front of the host win), and are percent-decoded once.
A ``/``, ``?``, ``#`` or ``@`` inside them must be percent-encoded; a URL where
one is not is refused with a message that says so (Redis could not read it
either). Messages show the URL through :func:`redact`, never a credential.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..errors import ConfigError
from ._urls import authority_end, redact

__all__ = ["KINDS", "RedisOptions", "build_client", "key_part", "parse_url", "redact"]

# scheme -> topology
KINDS = {
    "redis": "standalone",
    "rediss": "standalone",
    "redis+unix": "unix",
    "unix": "unix",
    "redis+cluster": "cluster",
    "redis+sentinel": "sentinel",
}

DEFAULT_PREFIX = "lw:"
# A healthy Redis on the same network answers in well under a millisecond; a
# quarter of a second tolerates fork pauses and slow links without letting a
# dead server stall every tool call.
DEFAULT_TIMEOUT = 0.25
DEFAULT_POOL_SIZE = 32
DEFAULT_BUSY_TIMEOUT = 5.0
DEFAULT_BACKOFF = 5.0
DEFAULT_CACHE = 256

_FLOATS = ("ttl", "timeout", "connect_timeout", "busy_timeout", "backoff")
_INTS = ("pool_size", "cache", "db")
_BOOLS = ("ssl", "ssl_check_hostname", "compress")
_STRS = ("prefix", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_CREDENTIALS = ("username", "password")
OPTIONS = frozenset(_FLOATS + _INTS + _BOOLS + _STRS + _CREDENTIALS)
# Options whose values may hold an "@" (elsewhere after the host, one is a credential's).
_TEXTS = frozenset(("prefix", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", *_CREDENTIALS))
_AFTER_SECRET = (
    "an option after the password or user name is not valid; if it is the rest of the "
    "password, write a '&' inside it as %26"
)
_UNENCODED = (
    "the user name or password holds a '/', '?', '#' or '@' that is not percent-encoded; "
    "write them as %2F, %3F, %23 and %40 (Redis reads such a URL the same way)"
)


@dataclasses.dataclass
class RedisOptions:
    """Everything a Redis store URL says, with defaults filled in."""

    kind: str
    hosts: list[tuple[str, int]]
    db: int = 0
    username: str | None = None
    password: str | None = None
    unix_path: str | None = None
    service: str | None = None
    ssl: bool = False
    ssl_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    prefix: str = DEFAULT_PREFIX
    ttl: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    backoff: float = DEFAULT_BACKOFF
    cache: int = DEFAULT_CACHE
    compress: bool = False


def _bad(url: str, problem: str) -> ConfigError:
    return ConfigError(f"Redis store URL {redact(url)}: {problem}")


def _number(url: str, name: str, text: str, kind: type[float | int]) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        unit = "a number of seconds" if kind is float else "a whole number"
        raise _bad(url, f"{name}={text!r} must be {unit}") from None
    if value < 0 or (name in ("timeout", "pool_size") and value == 0):
        raise _bad(url, f"{name}={text!r} must be greater than zero")
    return value


def _flag(url: str, name: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on", ""):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise _bad(url, f"{name}={text!r} must be true or false")


def _host_port(url: str, item: str, default_port: int) -> tuple[str, int]:
    if item.startswith("["):  # [ipv6]:port
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = item.partition(":")
    if not host:
        raise _bad(url, f"missing host in {item!r}")
    if not port:
        return host, default_port
    try:
        number = int(port)
    except ValueError:
        raise _bad(url, f"port {port!r} is not a number") from None
    if not 0 < number < 65536:
        raise _bad(url, f"port {number} is out of range")
    return host, number


def _misplaced_at(rest: str) -> bool:
    """An ``@`` after the host that can only be part of an unencoded user name or password.

    Allowed: in a socket path (no host named) and in the values of text options.
    """
    end = authority_end(rest)
    authority, tail = rest[:end], rest[end:]
    if "@" not in tail:
        return False
    before_fragment, _, fragment = tail.partition("#")
    path, _, query = before_fragment.partition("?")
    if "@" in fragment or ("@" in path and authority.rpartition("@")[2]):
        return True
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if "@" in name or ("@" in value and unquote(name) not in _TEXTS):
            return True
    return False


def parse_url(url: str) -> RedisOptions:
    """Parse a Redis store URL; raises :class:`~loopwarden.errors.ConfigError` naming the fault."""
    scheme, sep, rest = url.partition("://")
    kind = KINDS.get(scheme.lower())
    if not sep or kind is None:
        raise _bad(url, f"expected one of {', '.join(s + '://' for s in KINDS)}")
    if _misplaced_at(rest):
        raise _bad(url, _UNENCODED)
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed "[" of an IPv6 address; the text may hold a secret
        raise _bad(url, "not a valid URL (check the brackets around an IPv6 address)") from None
    userinfo, at, netloc = parts.netloc.rpartition("@")
    username = password = None
    if at:
        name, colon, secret = userinfo.partition(":")
        username = unquote(name) or None
        password = unquote(secret) if colon else None
    opts = RedisOptions(kind=kind, hosts=[], username=username, password=password)
    path = unquote(parts.path)
    if kind == "unix":
        if netloc:
            raise _bad(url, "write the socket path after three slashes: redis+unix:///path")
        if not path or path == "/":
            raise _bad(url, "missing socket path (redis+unix:///path/to/redis.sock)")
        opts.unix_path = path
    elif not netloc:
        raise _bad(url, "missing host")
    else:
        default_port = 26379 if kind == "sentinel" else 6379
        items = [item for item in netloc.split(",") if item]
        opts.hosts = [_host_port(url, item, default_port) for item in items]
        if kind == "standalone" and len(opts.hosts) != 1:
            raise _bad(url, "name one host (use redis+cluster:// or redis+sentinel:// for several)")
    segments = [s for s in path.split("/") if s] if kind != "unix" else []
    if kind == "sentinel":
        if not segments:
            raise _bad(url, "missing service name (redis+sentinel://host:port/service)")
        opts.service = segments.pop(0)
    if segments:
        if kind == "cluster":
            raise _bad(url, "Redis Cluster has no numbered databases; remove the /db part")
        if len(segments) > 1:
            raise _bad(url, f"unexpected path {path!r}")
        opts.db = int(_number(url, "database", segments[0], int))
    opts.ssl = scheme.lower() == "rediss"
    after_credential = False
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name in _CREDENTIALS:
            # As redis-py: those in front of the host win, then the first one here.
            if not getattr(opts, name):
                setattr(opts, name, text or None)
            after_credential = True
            continue
        try:
            _option(url, opts, name, text)
        except ConfigError:
            if not after_credential:
                raise
            # Its text may be the end of the password, cut off by a raw "&": not shown.
            raise _bad(url, _AFTER_SECRET) from None
    validate_prefix(url, opts.prefix)
    return opts


def _option(url: str, opts: RedisOptions, name: str, text: str) -> None:
    """Apply one query option (not a credential) to ``opts``."""
    if name in _FLOATS or name in _INTS:
        value = _number(url, name, text, float if name in _FLOATS else int)
        if name == "ttl":
            opts.ttl = value
        elif name == "db":
            if opts.kind == "cluster" and value:
                raise _bad(url, "Redis Cluster has no numbered databases")
            opts.db = int(value)
        else:
            setattr(opts, name, value)
    elif name in ("ssl", "compress"):
        setattr(opts, name, _flag(url, name, text))
    elif name == "ssl_check_hostname":
        opts.ssl_options[name] = _flag(url, name, text)
    elif name == "ssl_cert_reqs":
        if text not in ("none", "optional", "required"):
            raise _bad(url, "ssl_cert_reqs must be none, optional or required")
        opts.ssl_options[name] = text
    elif name == "prefix":
        opts.prefix = text
    elif name in OPTIONS:
        opts.ssl_options[name] = text
    else:
        raise _bad(url, f"unknown option {name!r} (known: {', '.join(sorted(OPTIONS))})")


def validate_prefix(url: str, prefix: str) -> None:
    if "{" in prefix or "}" in prefix:
        raise _bad(
            url,
            f"key prefix {prefix!r} must not contain braces: loopwarden adds its own hash "
            "tags so that each run's keys share one Cluster slot",
        )


def key_part(key: str) -> str:
    """A run or record key made safe for a Redis key's hash tag (reversible)."""
    return quote(key, safe=":@/+=!$&'()*,;-._~")


def _sentinel_master(smod: Any, opts: RedisOptions, kwargs: dict[str, Any], retry: Any) -> Any:
    sentinel = smod.Sentinel(
        opts.hosts,
        sentinel_kwargs={
            "username": opts.username,
            "password": opts.password,
            "socket_timeout": opts.timeout,
            "socket_connect_timeout": kwargs["socket_connect_timeout"],
        },
        **kwargs,
    )
    return sentinel.master_for(
        opts.service, db=opts.db, retry=retry, max_connections=opts.pool_size
    )


def build_client(opts: RedisOptions, *, is_async: bool = False) -> Any:
    """A redis-py client for ``opts``: synchronous, or asyncio (bound to the running loop)."""
    import redis.backoff
    import redis.exceptions

    if is_async:
        import redis.asyncio as mod
        import redis.asyncio.cluster as cmod
        import redis.asyncio.retry as rmod
        import redis.asyncio.sentinel as smod
    else:
        import redis as mod  # type: ignore[no-redef]
        import redis.cluster as cmod  # type: ignore[no-redef]
        import redis.retry as rmod  # type: ignore[no-redef]
        import redis.sentinel as smod  # type: ignore[no-redef]

    # One immediate retry on a broken connection (a pooled socket the server
    # closed, e.g. after a restart); never on a timeout, which would double
    # the wait on a stalled server.
    retry = rmod.Retry(
        redis.backoff.NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)
    )
    kwargs: dict[str, Any] = {
        "username": opts.username,
        "password": opts.password,
        "socket_timeout": opts.timeout,
        "socket_connect_timeout": opts.connect_timeout or opts.timeout,
        # RESP2: every Redis and Valkey version and every proxy speaks it.
        "protocol": 2,
    }
    if opts.ssl:
        kwargs["ssl"] = True
        kwargs.update(opts.ssl_options)
    if opts.kind == "cluster":
        nodes = [cmod.ClusterNode(host, port) for host, port in opts.hosts]
        return cmod.RedisCluster(
            startup_nodes=nodes, max_connections=opts.pool_size, retry=retry, **kwargs
        )
    if opts.kind == "sentinel":
        return _sentinel_master(smod, opts, kwargs, retry)
    # A blocking pool: past pool_size, callers wait (up to the timeout) for a free
    # connection instead of failing at once.
    ssl = kwargs.pop("ssl", False)
    kwargs.update(db=opts.db, retry=retry, max_connections=opts.pool_size, timeout=opts.timeout)
    if opts.kind == "unix":
        kwargs.update(path=opts.unix_path, connection_class=mod.UnixDomainSocketConnection)
    else:
        kwargs["host"], kwargs["port"] = opts.hosts[0]
        if ssl:
            kwargs["connection_class"] = mod.SSLConnection
    return mod.Redis.from_pool(mod.BlockingConnectionPool(**kwargs))
