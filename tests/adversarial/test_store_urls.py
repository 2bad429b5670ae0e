"""Store URLs with credentials: never printed, parsed as Redis parses them, checked as built.

Issue 24, items 8 and 9. A password is a canary holding ``/``, ``#``, ``?`` and
``@``; every URL form that can carry one (userinfo raw or percent-encoded, a
password alone, a lone userinfo, ``?password=``, ``rediss://``, Unix sockets,
Sentinel and Cluster, other schemes) goes through the public entry points:
``LoopGuard``, ``loopwarden config check`` (text and JSON) and the hook
command (stderr and ``hook.log``). Forms Redis itself accepts are used against
a real redis-server that requires that password; ``config check`` must call
valid exactly the configs the guard builds, without connecting anywhere.
"""

from __future__ import annotations

import socket
import string
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import loopwarden as lw
from tests.adversarial._procs import LOOPWARDEN, Ran, run_bounded
from tests.adversarial._values import examples
from tests.adversarial.conftest import (
    SMALL,
    claude_event,
    hook,
    leaks,
    short_dir,
    state_dir,
    write_config,
)

pytestmark = pytest.mark.timeout(180)


def _piece() -> str:
    return uuid.uuid4().hex[:10]


# Each piece is longer than the 8-character window `leaks` looks for, so a copy of any
# piece between two special characters counts as a leak.
SECRET = f"PW{_piece()}/{_piece()}#{_piece()}?{_piece()}@{_piece()}"
ENCODED = quote(SECRET, safe="")


@pytest.fixture(name="auth_redis", scope="module")
def fixture_auth_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real redis-server that requires SECRET (default user and user ``lw``), with a
    Unix socket."""
    from tests.stores.redis._servers import Server, require_redis

    require_redis()
    sock_dir = short_dir("lwurl-")
    server = Server(
        tmp_path_factory.mktemp("redis-auth"),
        "--requirepass",
        SECRET,
        "--user",
        "lw",
        "on",
        f">{SECRET}",
        "~*",
        "&*",
        "+@all",
        "--unixsocket",
        str(sock_dir / "r.sock"),
        "--unixsocketperm",
        "700",
    ).start()
    server.sock = sock_dir / "r.sock"
    try:
        yield server
    finally:
        server.stop()


def _no_leak(text: str | bytes, where: str) -> None:
    assert not leaks(SECRET, text), f"{where} shows the password: {text!r}"
    assert not leaks(ENCODED, text), f"{where} shows the encoded password: {text!r}"


# (id, URL with {pw}/{enc}/{port}/{sock}, works against the auth server)
FORMS = [
    ("raw-specials", "redis://lw:{pw}@127.0.0.1:{port}/0", False),
    ("raw-password-alone", "redis://:{pw}@127.0.0.1:{port}", False),
    ("raw-rediss", "rediss://lw:{pw}@127.0.0.1:{port}/0", False),
    ("raw-unix", "unix://lw:{pw}@{sock}", False),
    ("raw-redis+unix", "redis+unix://lw:{pw}@{sock}", False),
    ("raw-sentinel", "redis+sentinel://:{pw}@127.0.0.1:1,127.0.0.1:2/mymaster", False),
    ("raw-cluster", "redis+cluster://lw:{pw}@127.0.0.1:1,127.0.0.1:2", False),
    ("raw-lone-userinfo", "redis://{pw}@127.0.0.1:{port}/0", False),
    ("raw-query", "redis://127.0.0.1:{port}/0?password={pw}", False),
    ("raw-other-scheme", "postgres://lw:{pw}@127.0.0.1/db", False),
    ("raw-sqlite", "sqlite://lw:{pw}@host/x.db?bogus=1", False),
    ("raw-no-scheme-slashes", "redis:lw:{pw}@127.0.0.1", False),
    ("encoded", "redis://lw:{enc}@127.0.0.1:{port}/0", True),
    ("encoded-password-alone", "redis://:{enc}@127.0.0.1:{port}", True),
    ("encoded-query", "redis://127.0.0.1:{port}/0?password={enc}", True),
    ("encoded-user-and-query", "redis://lw@127.0.0.1:{port}/0?password={enc}", True),
    ("encoded-unix", "unix://lw:{enc}@{sock}", True),
    ("encoded-redis+unix", "redis+unix://lw:{enc}@{sock}?db=1", True),
    ("encoded-rediss", "rediss://lw:{enc}@127.0.0.1:1/0", False),
    ("encoded-sentinel", "redis+sentinel://:{enc}@127.0.0.1:1,127.0.0.1:2/mymaster/0", False),
    ("encoded-cluster", "redis+cluster://lw:{enc}@127.0.0.1:1,127.0.0.1:2", False),
]


def _url(template: str, server: Any) -> str:
    return template.format(pw=SECRET, enc=ENCODED, port=server.port, sock=server.sock)


def _drive(guard: lw.LoopGuard) -> list[str]:
    """Identical no-progress calls until the guard stops the run (it cannot without a store
    that works: a failing store fails open)."""
    run = guard.run(f"r-{uuid.uuid4().hex[:8]}")
    actions: list[str] = []
    try:
        for n in range(10):
            decision = run.before_call("poll", {"job": 1}, call_id=f"c{n}")
            actions.append(decision.action)
            if not decision.blocked:
                run.after_call("poll", {"job": 1}, call_id=f"c{n}", result="pending")
    except lw.LoopAbort as abort:
        actions.append(abort.code)
    return actions


@pytest.mark.parametrize(("template", "works"), [f[1:] for f in FORMS], ids=[f[0] for f in FORMS])
def test_store_url_password_is_never_shown(
    tmp_path: Path,
    hook_env: dict[str, str],
    auth_redis: Any,
    caplog: pytest.LogCaptureFixture,
    template: str,
    works: bool,
) -> None:
    """Whatever the URL form, the password appears in no ConfigError, no ``config check``
    output (text or JSON), no hook stderr and no hook.log; forms Redis accepts work."""
    url = _url(template, auth_redis)
    config = {**SMALL, "loopwarden": {"store": url}}
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps(config))
    try:
        guard = lw.LoopGuard(path)
    except lw.ConfigError as exc:
        assert not works, f"Redis accepts {template}, the guard refused it: {exc}"
        _no_leak(str(exc), "the ConfigError")
        assert "Traceback" not in str(exc)
    else:
        try:
            _no_leak(repr(guard.store), "the store's repr")
            if works:
                assert _drive(guard)[-1] == "global_circuit_breaker"
        finally:
            guard.close()
    _no_leak(caplog.text, "the log")
    for fmt in ("text", "json"):
        ran = run_bounded([LOOPWARDEN, "config", "check", str(path), "--format", fmt], timeout=60)
        _no_leak(ran.stdout + ran.stderr, f"config check --format {fmt}")
        assert ran.code in (0, 1), ran.err
    write_config(hook_env, config)
    answer = hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert answer.code == 0
    _no_leak(answer.stderr, "the hook's stderr")
    log = state_dir(hook_env) / "hook.log"
    if log.exists():
        _no_leak(log.read_bytes(), "hook.log")


def test_unencoded_special_characters_get_a_clear_error(tmp_path: Path) -> None:
    """A password with a raw ``/`` (Redis cannot read such a URL either) is refused with a
    message that says to percent-encode it, naming the setting, and shows no secret."""
    path = tmp_path / "config.json"
    store = f"redis://user:{SECRET}@localhost:6379/0"
    path.write_bytes(orjson.dumps({"loopwarden": {"store": store}}))
    with pytest.raises(lw.ConfigError) as raised:
        lw.LoopGuard(path)
    message = str(raised.value)
    assert "%2F" in message and "percent-encode" in message, message
    assert "redis://***@localhost:6379/0" in message, message
    _no_leak(message, "the ConfigError")


TEMPLATES = [
    "redis://u:{pw}@127.0.0.1:6379/0",
    "redis://:{pw}@127.0.0.1",
    "redis://{pw}@127.0.0.1",
    "rediss://u:{pw}@127.0.0.1:1/0?prefix=a:",
    "redis://127.0.0.1/0?password={pw}",
    "redis://127.0.0.1/0?prefix=x&password={pw}&ttl=5",
    "unix://u:{pw}@/run/r.sock",
    "redis+unix://u:{pw}@/run/r.sock?db=2",
    "redis+sentinel://:{pw}@127.0.0.1:1,127.0.0.1:2/m",
    "redis+cluster://u:{pw}@127.0.0.1:1,127.0.0.1:2",
    "sqlite://u:{pw}@h/x.db",
    "memory://u:{pw}@h",
    "nosuch://u:{pw}@h",
    "redis:u:{pw}@127.0.0.1",
]


@examples(300)
@given(
    template=st.sampled_from(TEMPLATES),
    # Upper case: no 8 characters in a row of the messages' own (lower-case) words.
    pw=st.text(alphabet=string.ascii_uppercase + "/?#@&=:%+;,[] ", min_size=9, max_size=40),
    encode=st.booleans(),
)
def test_no_url_form_shows_a_password(template: str, pw: str, encode: bool) -> None:
    """For any password, raw or percent-encoded, in any URL form, neither the guard's
    ConfigError nor its store's repr holds 8 characters of it in a row."""
    written = quote(pw, safe="") if encode else pw
    url = template.replace("{pw}", written)
    rest = template.replace("{pw}", "")
    assume(not leaks(pw, rest) and not leaks(written, rest))  # the URL's own text
    try:
        guard = lw.LoopGuard({"loopwarden": {"store": url}})
    except lw.ConfigError as exc:
        shown = str(exc)
    else:
        shown = repr(guard.store)
        guard.close()
    assert not leaks(pw, shown) and not leaks(written, shown), shown


REDIS_ACCEPTS = [
    "redis://lw:{enc}@h.example:6380/3",
    "redis://:{enc}@h.example",
    "redis://h.example/2?password={enc}",
    "redis://lw@h.example/2?password={enc}",
    "rediss://lw:{enc}@h.example:6390/1",
    "unix://lw:{enc}@/run/redis/r.sock?db=4",
    "redis://h.example/0?prefix=team@x:",
]


@pytest.mark.parametrize("template", REDIS_ACCEPTS)
def test_urls_redis_accepts_mean_the_same_to_the_store(template: str) -> None:
    """A URL redis-py parses gives the store the same user, password, host, port, db and
    socket path (percent-encoding decoded once, ``?password=`` honoured, ``unix://``)."""
    redis = pytest.importorskip("redis.connection", reason="the redis extra is not installed")
    url = template.format(enc=ENCODED)
    theirs = redis.parse_url(url)
    store = lw.store_from_url(url)
    try:
        ours = store.options  # type: ignore[attr-defined]
        assert ours.password == theirs.get("password")
        assert ours.username == theirs.get("username")
        assert ours.db == theirs.get("db", 0)
        if "path" in theirs:
            assert ours.unix_path == theirs["path"]
        else:
            assert ours.hosts == [(theirs["host"], theirs.get("port", 6379))]
        _no_leak(repr(store), "the store's repr")
    finally:
        store.close()


# -- item 9: config check builds what the guard builds -------------------------------------
STORES = [
    "memory://",
    "sqlite://{tmp}/state.db",
    "sqlite://{tmp}/state.db?bogus=1",
    "sqlite://{tmp}/state.db?busy_timeout=soon",
    "redis://127.0.0.1:{port}/0",
    "redis://127.0.0.1:notaport/0",
    "redis://127.0.0.1:{port}/0?bogus=1",
    "redis://127.0.0.1:{port}/0?prefix={{x}}",
    "redis://127.0.0.1:{port}/0?timeout=0",
    "redis+cluster://127.0.0.1:{port}/2",
    "redis+sentinel://127.0.0.1:{port}",
    "redis://user:pa/ss#wo?rd@localhost:6379/0",
    "nosuch://x",
]


@pytest.fixture(name="listener")
def fixture_listener() -> Iterator[socket.socket]:
    """A listening TCP socket on loopback that counts as "a Redis server" for the URLs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def _accepted(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize("template", STORES)
def test_config_check_agrees_with_the_guard(
    tmp_path: Path, listener: socket.socket, template: str
) -> None:
    """``config check`` calls a config valid exactly when ``LoopGuard`` builds it, and it
    neither connects to the store's server nor creates the store's file."""
    store = template.format(tmp=tmp_path / "new", port=listener.getsockname()[1])
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps({"loopwarden": {"store": store}}))
    try:
        lw.LoopGuard(path).close()
    except lw.ConfigError:
        builds = False
    else:
        builds = True
    assert not _accepted(listener), "building the guard connected to the server"
    for fmt in ("text", "json"):
        ran: Ran = run_bounded([LOOPWARDEN, "config", "check", str(path), "--format", fmt])
        assert ran.code == (0 if builds else 1), (store, ran.out, ran.err)
        assert "Traceback" not in ran.err
        if not builds:
            assert "loopwarden.store" in ran.out, ran.out
        if fmt == "json":
            assert orjson.loads(ran.stdout)["valid"] is builds
    assert not _accepted(listener), "config check connected to the server"
    assert not (tmp_path / "new").exists(), "config check created the store's directory"
