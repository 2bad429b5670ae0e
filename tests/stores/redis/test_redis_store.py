"""Redis store specifics: URLs, clear errors, TLS, Unix sockets, Sentinel, hooks, no leaks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import loopwarden as lw
from loopwarden.errors import ConfigError, StoreError
from loopwarden.stores import store_from_url
from loopwarden.stores._redis_url import parse_url, redact
from loopwarden.stores.redis import RedisStore
from tests.hooks import payloads as p
from tests.stores.redis._servers import SentinelSetup, Server
from tests.stores.redis._workers import CONFIG, bump

# Without the redis extra (the no-extras CI suite) these tests skip, with the reason.
pytest.importorskip("redis", reason="the redis extra is not installed")

LOOP = {"tools": {"loopDetection": {"enabled": True}}}


class TestUrls:
    def test_schemes_and_options(self) -> None:
        """Every limits-style scheme parses, with options from the query string."""
        o = parse_url("redis://u:pw@h1:7000/3?prefix=app:&ttl=60&timeout=0.1&pool_size=4")
        assert (o.kind, o.hosts, o.db, o.username, o.password) == (
            "standalone",
            [("h1", 7000)],
            3,
            "u",
            "pw",
        )
        assert (o.prefix, o.ttl, o.timeout, o.pool_size, o.ssl) == ("app:", 60, 0.1, 4, False)
        assert parse_url("rediss://h").ssl and parse_url("rediss://h").hosts == [("h", 6379)]
        unix = parse_url("redis+unix:///run/redis.sock?db=2")
        assert (unix.kind, unix.unix_path, unix.db) == ("unix", "/run/redis.sock", 2)
        cluster = parse_url("redis+cluster://:pw@a:1,b:2")
        assert cluster.hosts == [("a", 1), ("b", 2)] and cluster.password == "pw"
        sentinel = parse_url("redis+sentinel://s1,s2:5/mymaster/1")
        assert sentinel.hosts == [("s1", 26379), ("s2", 5)]
        assert (sentinel.service, sentinel.db) == ("mymaster", 1)
        assert parse_url("redis://[::1]:7000").hosts == [("::1", 7000)]

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            ("redis://h?colour=red", "unknown option 'colour'"),
            ("redis://h?ttl=soon", "ttl='soon' must be a number of seconds"),
            ("redis://h?timeout=0", "must be greater than zero"),
            ("redis://h:99999", "out of range"),
            ("redis://a:1,b:2", "name one host"),
            ("redis+cluster://a:1/2", "no numbered databases"),
            ("redis+sentinel://s:1", "missing service name"),
            ("redis+unix://", "missing socket path"),
            ("redis://h?prefix={app}", "must not contain braces"),
            ("redis://u:hunter2@h?x=1", "redis://***@h?x=***"),
        ],
    )
    def test_bad_urls_name_the_fault_not_the_password(self, url: str, says: str) -> None:
        """A bad URL is a ConfigError that says what is wrong and hides the password."""
        with pytest.raises(ConfigError) as caught:
            RedisStore(url)
        assert says in str(caught.value)
        assert "hunter2" not in str(caught.value)

    def test_redact(self) -> None:
        """User and password are hidden; hosts and the store's own options stay readable."""
        assert redact("redis://u:p@h:1/0?prefix=x") == "redis://***@h:1/0?prefix=x"
        assert redact("redis+cluster://:p@a:1,b:2") == "redis+cluster://***@a:1,b:2"
        assert redact("redis://h:1") == "redis://h:1"

    def test_store_from_url_knows_every_scheme(self, redis_server: Server) -> None:
        """store_from_url builds a RedisStore for each scheme and passes the config's TTL."""
        for url in ("redis://h", "rediss://h", "redis+unix:///s", "redis+cluster://h:1"):
            assert isinstance(store_from_url(url), RedisStore)
        store = store_from_url(f"{redis_server.url}?prefix=x:", ttl_seconds=42)
        assert isinstance(store, RedisStore) and store.ttl_seconds == 42
        assert repr(store) == f"RedisStore('{redis_server.url}?prefix=x:')"

    def test_arguments_override_the_url(self) -> None:
        """Keyword arguments win over the same options in the URL."""
        store = RedisStore("redis://h?prefix=a:&timeout=1", prefix="b:", timeout=2, cache_size=0)
        assert (store.prefix, store.options.timeout, store.options.cache) == ("b:", 2, 0)

    def test_missing_extra_names_the_install(self, tmp_path: Path) -> None:
        """Without the redis package the error says which extra to install."""
        code = (
            "import sys; sys.modules['redis'] = None\n"
            "import loopwarden as lw\n"
            "try:\n"
            "    lw.LoopGuard(store='redis://localhost:6379/0')\n"
            "except lw.ConfigError as exc:\n"
            "    print(exc)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert "pip install 'loopwarden[redis]'" in done.stdout


class TestClearErrors:
    def test_unreachable(self, prefix: str) -> None:
        """Nothing listening: check() names the URL and says it cannot connect."""
        from tests.stores.redis._servers import free_port

        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0?prefix={prefix}")
        with pytest.raises(StoreError, match=r"redis://127\.0\.0\.1:\d+/0.*cannot connect"):
            store.check()
        store.close()

    def test_authentication(self, own_server: Server, lw_logs: pytest.LogCaptureFixture) -> None:
        """A wrong or missing password is named as an authentication failure, never shown."""
        own_server.start("--requirepass", "s3cret-pw")
        for url in (own_server.url, f"redis://:wrong-pw@127.0.0.1:{own_server.port}/0"):
            store = RedisStore(url)
            with pytest.raises(StoreError) as caught:
                store.check()
            assert "authentication failed" in str(caught.value)
            assert "s3cret" not in str(caught.value) and "wrong-pw" not in str(caught.value)
            store.close()
        good = RedisStore(f"redis://:s3cret-pw@127.0.0.1:{own_server.port}/0")
        good.check()
        assert good.transact("k", CONFIG, bump) == 1
        good.close()
        guard = lw.LoopGuard(LOOP, store=f"redis://:wrong-pw@127.0.0.1:{own_server.port}/0")
        assert guard.run("r").before_call("t", {}).action == "allow"  # fails open
        assert "authentication failed" in lw_logs.text and "wrong-pw" not in lw_logs.text
        guard.close()

    def test_missing_command(self, own_server: Server) -> None:
        """A server without scripting is named as lacking a command loopwarden needs."""
        own_server.start("--rename-command", "EVALSHA", "")
        store = RedisStore(own_server.url)
        with pytest.raises(StoreError, match="lacks a command loopwarden needs"):
            store.check()
        with pytest.raises(StoreError, match="Lua scripting"):
            store.transact("k", CONFIG, bump)
        store.close()

    def test_permissions(self, own_server: Server) -> None:
        """An ACL user without the needed commands gets an error listing them."""
        own_server.start()
        with own_server.client() as client:
            client.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@read")
        store = RedisStore(f"redis://ro:pw@127.0.0.1:{own_server.port}/0")
        with pytest.raises(StoreError, match=r"lacks a permission.*EVALSHA"):
            store.check()
        store.close()


class TestTopologies:
    def test_unix_socket(self, own_server: Server, prefix: str) -> None:
        """redis+unix:// reaches a server over its Unix socket."""
        sock = own_server.dir / "redis.sock"
        own_server.start("--unixsocket", str(sock), "--unixsocketperm", "700")
        store = RedisStore(f"redis+unix://{sock}?db=1&prefix={prefix}")
        assert [store.transact("k", CONFIG, bump) for _ in range(3)] == [1, 2, 3]
        with own_server.client(db=1) as client:
            assert client.exists(store.run_key("k"))
        store.close()

    def test_tls(self, own_server: Server, tmp_path: Path, prefix: str) -> None:
        """rediss:// talks TLS, verifying the server with the CA file given in the URL."""
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
                *("-addext", "subjectAltName=IP:127.0.0.1"),
            ],
            capture_output=True,
            check=True,
        )
        tls_port = own_server.port
        own_server.port = 0
        own_server.start(
            "--port", "0", "--tls-port", str(tls_port), "--tls-cert-file", str(cert),
            "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
            "--tls-auth-clients", "no", wait=False,
        )  # fmt: skip
        url = f"rediss://127.0.0.1:{tls_port}/0?prefix={prefix}&ssl_ca_certs={cert}&timeout=2"
        from tests._wait import wait_until

        store = RedisStore(url)
        wait_until(lambda: _checks(store), what="the TLS server")
        assert store.transact("k", CONFIG, bump) == 2
        plain = RedisStore(f"redis://127.0.0.1:{tls_port}/0?timeout=0.5")
        with pytest.raises(StoreError):
            plain.check()
        plain.close()
        store.close()

    def test_sentinel(self, redis_sentinel: SentinelSetup, prefix: str) -> None:
        """redis+sentinel:// finds the primary through the sentinel, sync and async."""
        store = RedisStore(f"{redis_sentinel.url}?prefix={prefix}")
        assert [store.transact("k", CONFIG, bump) for _ in range(3)] == [1, 2, 3]
        with redis_sentinel.primary.client() as client:
            assert client.exists(store.run_key("k"))

        async def twice() -> list[int]:
            results = [await store.atransact("k", CONFIG, bump) for _ in range(2)]
            await store.aclose()
            return results

        import asyncio

        assert asyncio.run(twice()) == [4, 5]


def _checks(store: RedisStore) -> bool:
    try:
        store.transact("k", CONFIG, bump)
    except StoreError:
        store._outage = None  # retry at once while the server starts
        return False
    return True


class TestKeptConnections:
    def test_other_commands_always_find_a_connection(self, redis_url: str) -> None:
        """Updates keep connections between steps, but never all of the pool's."""
        import threading

        store = RedisStore(redis_url + "&pool_size=2&timeout=2")
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for _ in range(40):
                    store.transact(f"run-{n}", CONFIG, bump)
                    store.keys()
                    store.transact_value(f"side-{n}", lambda old: (b"x", old))
            except BaseException as exc:  # reported below, with the thread's error
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert [store.transact(f"run-{n}", CONFIG, lambda st: st.miss_count) for n in range(6)] == [
            40
        ] * 6
        assert len(store._slots.idle) <= 1
        store.close()

    def test_a_kept_connection_the_server_closed_is_replaced(self, redis_url: str) -> None:
        """The server dropping every client between updates costs no update and no count."""
        import redis

        store = RedisStore(redis_url)
        for _ in range(3):
            store.transact("k", CONFIG, bump)
        admin = redis.Redis.from_url(redis_url.split("?")[0])
        for _ in range(3):
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
            store.transact("k", CONFIG, bump)
        assert store.transact("k", CONFIG, lambda st: st.miss_count) == 6
        admin.close()
        store.close()


class TestKeysAndLeaks:
    def test_keys_with_odd_characters_round_trip(self, redis_url: str) -> None:
        """Run keys with braces, separators and spaces keep one slot tag and list back intact."""
        store = RedisStore(redis_url)
        odd = ["a\x1fs{1}\x1fr}x", "a\x1f\x1fr 1", "ünï\x1fcode\x1f*?["]
        for key in odd:
            store.transact(key, CONFIG, bump)
            rkey = store.run_key(key)
            assert rkey.count("{") == 1 and rkey.endswith("}")
        assert store.keys() == sorted(odd)
        store.close()

    def test_compressed_states(self, redis_url: str) -> None:
        """compress=true stores zlib states that any store of the deployment can read."""
        packed = RedisStore(redis_url + "&compress=true")
        plain = RedisStore(redis_url)
        for i in range(30):
            (packed if i % 2 else plain).transact("k", CONFIG, bump)
        assert plain.transact("k", CONFIG, lambda st: st.miss_count) == 30
        raw = packed._sync_client().get(packed.run_key("k"))[8:]  # after the token
        packed.transact("k", CONFIG, bump)
        assert raw[:1] == b"{"  # the last write was plain's
        assert packed._sync_client().get(packed.run_key("k"))[8:9] == b"x"
        packed.close()
        plain.close()

    def test_no_raw_params_or_results_at_rest(
        self, redis_server: Server, redis_url: str, prefix: str
    ) -> None:
        """A canary in params and results appears in no Redis key or value."""
        canary = "CANARY-7f3e9b2a"
        guard = lw.LoopGuard(LOOP, store=redis_url)
        run = guard.run("r", session_id="s")
        for i in range(12):
            params = {"query": f"{canary} {i % 2}", "token": canary}
            try:  # the alternation is a cycle: blocked, then stopped (state at rest either way)
                decision = run.before_call("search", params, call_id=f"c{i}")
            except lw.LoopAbort:
                break
            if decision.allowed:
                run.after_call("search", params, call_id=f"c{i}", result=f"{canary} found")
        for _ in range(3):  # failures: the failure streak keeps only a digest of the error
            run.after_call("lookup", {"q": canary}, error=f"{canary} failed")
        store = guard.store
        assert isinstance(store, RedisStore)
        store.transact_value("side", lambda old: (b"offset", None))
        with redis_server.client() as client:
            keys = list(client.scan_iter(f"{prefix}*"))
            assert len(keys) >= 3  # the run, the side record, the generation
            for key in keys:
                assert canary.encode() not in key
                kind = client.type(key)
                values = client.hvals(key) if kind == b"hash" else [client.get(key)]
                assert all(canary.encode() not in v for v in values)
        guard.close()


def test_hooks_keep_runs_and_session_records_in_redis(
    redis_server: Server, prefix: str, tmp_path: Path
) -> None:
    """The coding-agent hook with LOOPWARDEN_STATE=redis://... keeps everything in Redis."""
    loopwarden = shutil.which("loopwarden", path=str(Path(sys.executable).parent))
    assert loopwarden is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_"))}
    home = tmp_path / "home"
    (home / ".config" / "loopwarden").mkdir(parents=True)
    small = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2}}}
    (home / ".config" / "loopwarden" / "config.json").write_bytes(orjson.dumps(small))
    env.update(HOME=str(home), LOOPWARDEN_STATE=f"{redis_server.url}?prefix={prefix}")

    def hook(event: dict[str, object]) -> dict[str, object]:
        done = subprocess.run(
            [loopwarden, "hook", "claude-code", "--no-daemon"],
            input=orjson.dumps(event),
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        )
        answer: dict[str, object] = orjson.loads(done.stdout) if done.stdout.strip() else {}
        return answer

    answers = []
    for n in range(1, 4):
        answers += [hook(p.claude_pre(n)), hook(p.claude_post(n))]
    assert "WARNING" in str(answers)  # the repeated identical call is warned about
    assert not (home / ".local" / "share" / "loopwarden" / "state.db").exists()  # no SQLite
    with redis_server.client() as client:
        keys = {k.decode() for k in client.scan_iter(f"{prefix}*")}
    assert any(k.startswith(f"{prefix}kv:{{hook") for k in keys)
    assert any(k.startswith(f"{prefix}run:{{claude-code") for k in keys)
