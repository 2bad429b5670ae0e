"""Store URLs in messages: every credential hidden, whatever form the URL takes.

A URL's user name and password (both hidden) end at the last ``@`` of its authority (the
part before the first ``/``, ``?`` or ``#``), as Redis clients read it. A
password holding a raw ``/``, ``?`` or ``#`` ends the authority early, so its
rest (and its ``@``) turns up in the path, query or fragment: wherever such an
``@`` appears after the authority, everything up to the last ``@`` of the
whole URL is hidden (and all of it when a ``?password=`` comes before that
``@``: its value may run up to it). Query values are shown only for options
known to hold no secret; a fragment is never shown. The result is for
messages and logs only.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = [
    "PATH_SCHEMES",
    "SHOWN_OPTIONS",
    "authority_end",
    "may_hold_credentials",
    "redact",
    "stray_at",
]

SHOWN_OPTIONS = frozenset(
    {
        "backoff",
        "busy_timeout",
        "cache",
        "compress",
        "connect_timeout",
        "db",
        "pool_size",
        "prefix",
        "ssl",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "timeout",
        "ttl",
    }
)
"""Query options whose values messages may show (none of them is a secret)."""

PATH_SCHEMES = frozenset({"sqlite", "unix", "redis+unix"})
"""Schemes whose URLs name a file or socket path (which may hold an ``@``), not a host."""

HIDDEN = "***"


def authority_end(rest: str) -> int:
    """Where the authority of ``rest`` (a URL after ``scheme://``) ends."""
    end = len(rest)
    for stop in "/?#":
        found = rest.find(stop, 0, end)
        if found != -1:
            end = found
    return end


def stray_at(scheme: str, authority: str, tail: str) -> bool:
    """An ``@`` after the authority that may end a user name or password.

    Not stray: an ``@`` inside a file or socket path (``sqlite:///a@b.db``:
    a scheme of :data:`PATH_SCHEMES`, an empty authority, no ``/`` right after
    the ``@``), or in the value of a query option known to hold no secret when
    the authority is empty or has credentials of its own (so they cannot reach
    into the query).
    """
    if "@" not in tail:
        return False
    before_fragment, _, fragment = tail.partition("#")
    if "@" in fragment:
        return True
    path, _, query = before_fragment.partition("?")
    if "@" in path:
        if authority or scheme.lower() not in PATH_SCHEMES:
            return True
        if re.search(r"@(?:/|$)", path):  # "user:pw@/socket" with the "//" lost
            return True
    delimited = not authority or "@" in authority
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if "@" in name:
            return True
        if "@" in value and not (delimited and unquote(name) in SHOWN_OPTIONS):
            return True
    return False


def _tail(tail: str) -> str:
    """The path and the query up to the first value it hides (of an option that may hold
    a secret); never the fragment."""
    before_fragment, hash_sign, _ = tail.partition("#")
    path, question, query = before_fragment.partition("?")
    pairs = []
    for pair in query.split("&") if question else ():
        name, equals, _ = pair.partition("=")
        if unquote(name) not in SHOWN_OPTIONS:
            # What follows may be the rest of this value, cut off by a raw "&".
            pairs.append(f"{name}{equals}{HIDDEN}" if equals else HIDDEN)
            break
        pairs.append(pair)
    shown = path + (question + "&".join(pairs) if question else "")
    return shown + (f"#{HIDDEN}" if hash_sign else "")


def _hidden_key_before(text: str) -> bool:
    """``text`` holds a query key whose value is not shown (a ``?password=`` whose raw
    ``#``, ``?`` or ``@`` moved the rest of the URL into its value)."""
    for match in re.finditer(r"[?&]([^?&#=]*)=", text):
        if unquote(match[1]) not in SHOWN_OPTIONS:
            return True
    return False


def _after_last_at(scheme: str, text: str) -> str:
    """What may be shown of a URL whose credentials may run up to its last ``@``."""
    cut = text.rfind("@")
    if _hidden_key_before(text[:cut]):
        return f"{scheme}{HIDDEN}"
    rest = text[cut + 1 :]
    end = authority_end(rest)
    return f"{scheme}{HIDDEN}@{rest[:end]}{_tail(rest[end:])}"


def _scheme(url: str) -> tuple[str, str] | None:
    """``(scheme, rest)`` of ``scheme://rest``; None when ``url`` does not start with one
    (a password may hold a "://" of its own)."""
    scheme, sep, rest = url.partition("://")
    if not sep or re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) is None:
        return None
    return scheme, rest


def may_hold_credentials(url: str) -> bool:
    """``url`` has a user name or password, or an ``@`` that may end one."""
    split = _scheme(url)
    if split is None:
        return "@" in url
    scheme, rest = split
    end = authority_end(rest)
    return "@" in rest[:end] or stray_at(scheme, rest[:end], rest[end:])


def redact(url: str) -> str:
    """``url`` without its credentials, for messages and logs (any scheme, any form).

    ``redis://user:pw@host/0?password=pw`` becomes ``redis://***@host/0?password=***``:
    the user name goes too (a password written without its colon reads as one).
    A URL whose credentials may hold unencoded ``/?#@`` is shown as ``***@``
    followed by what comes after its last ``@`` (or as ``scheme://***`` when a
    hidden query value may run up to that ``@``).
    """
    split = _scheme(url)
    if split is None:
        return url if "@" not in url else _after_last_at("", url)
    scheme, rest = split
    end = authority_end(rest)
    authority, tail = rest[:end], rest[end:]
    if stray_at(scheme, authority, tail):
        return _after_last_at(f"{scheme}://", rest)
    _, at, hosts = authority.rpartition("@")
    return f"{scheme}://{HIDDEN if at else ''}{at}{hosts}{_tail(tail)}"
