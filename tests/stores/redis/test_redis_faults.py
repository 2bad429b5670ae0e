"""Redis faults: the agent is never broken, each outage is logged once, no restart needed."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

import loopwarden as lw
from loopwarden.stores.redis import RedisStore
from tests._wait import wait_until
from tests.stores.redis._proxy import Proxy
from tests.stores.redis._servers import Cluster, Server

# Without the redis extra (the no-extras CI suite) these tests skip, with the reason.
redis = pytest.importorskip("redis", reason="the redis extra is not installed")

LOOP = {"tools": {"loopDetection": {"enabled": True}}}
AOF = ("--appendonly", "yes", "--appendfsync", "always")


def outage_warnings(logs: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in logs.records
        if r.levelno >= logging.WARNING and "is unavailable" in r.getMessage()
    ]


def loud(logs: pytest.LogCaptureFixture) -> list[str]:
    """Records at ERROR or above (a dead Redis must not log one per call)."""
    return [r.getMessage() for r in logs.records if r.levelno >= logging.ERROR]


def call(run: lw.RunGuard, i: int) -> str:
    """One guarded tool call with distinct params; the decision's action."""
    params = {"page": i}
    decision = run.before_call("fetch", params, call_id=f"c{i}")
    if decision.allowed:
        run.after_call("fetch", params, call_id=f"c{i}", result={"rows": i})
    return decision.action


def call_ids(run: lw.RunGuard) -> list[str]:
    return [r["call_id"] for r in run.snapshot()["records"]]


def recover(
    run: lw.RunGuard, logs: pytest.LogCaptureFixture, start: int, text: str = "reachable again"
) -> int:
    """Keep calling until the store logs ``text``; the next call index."""
    counter = iter(range(start, start + 100_000))

    def back() -> bool:
        call(run, next(counter))
        return text in logs.text

    wait_until(back, timeout=60, interval=0.05, what=f"the store to log {text!r}")
    return next(counter)


@pytest.fixture(name="proxy")
def fixture_proxy(redis_server: Server) -> Iterator[Proxy]:
    proxy = Proxy(redis_server.port)
    yield proxy
    proxy.close()


def test_sigkill_fails_open_logs_once_and_aof_restart_keeps_counts(
    own_server: Server, lw_logs: pytest.LogCaptureFixture
) -> None:
    """A killed server never breaks the agent, is logged once, and an AOF restart keeps the run."""
    own_server.start(*AOF)
    guard = lw.LoopGuard(LOOP, store=f"{own_server.url}?timeout=0.5")
    run = guard.run("r", session_id="s")
    assert [call(run, i) for i in range(5)] == ["allow"] * 5
    own_server.kill()
    assert [call(run, i) for i in range(5, 60)] == ["allow"] * 55
    assert len(outage_warnings(lw_logs)) == 1
    assert "cannot connect" in outage_warnings(lw_logs)[0]
    assert loud(lw_logs) == []
    own_server.start(*AOF)
    after = recover(run, lw_logs, 60)
    ids = call_ids(run)
    assert ids[:5] == [f"c{i}" for i in range(5)]  # counted before the kill, still there
    assert call(run, after) == "allow" and call_ids(run)[-1] == f"c{after}"
    assert "without its data" not in lw_logs.text
    assert len(outage_warnings(lw_logs)) == 1
    guard.close()


def test_restart_without_persistence_starts_afresh_and_says_so(
    own_server: Server, lw_logs: pytest.LogCaptureFixture
) -> None:
    """A server that comes back empty gives the run a fresh state, and the log says why."""
    own_server.start()
    guard = lw.LoopGuard(LOOP, store=f"{own_server.url}?timeout=0.5")
    run = guard.run("r", session_id="s")
    for i in range(5):
        call(run, i)
    own_server.kill()
    own_server.start()
    # A restart this quick may not even look like an outage (the client reconnects at
    # once); the vanished run makes the store check the server's generation anyway.
    recover(run, lw_logs, 5, "came back without its data")
    assert not set(call_ids(run)) & {f"c{i}" for i in range(5)}
    guard.close()


def test_other_processes_notice_the_lost_data_too(
    own_server: Server, lw_logs: pytest.LogCaptureFixture
) -> None:
    """Each worker that finds its cached run gone checks the server's generation and logs the
    loss once, even when the flush or restart never looked like an outage."""
    own_server.start()
    first, second = RedisStore(own_server.url), RedisStore(own_server.url)
    cfg = lw.LoopGuard(LOOP).config_for()
    first.transact("k1", cfg, lambda st: None)
    second.transact("k2", cfg, lambda st: None)
    with own_server.client() as client:
        client.flushall()
    for _ in range(3):
        first.transact("k1", cfg, lambda st: None)
        second.transact("k2", cfg, lambda st: None)
    assert lw_logs.text.count("came back without its data") == 2  # once per store
    first.delete("k1")
    assert "without its data" not in lw_logs.text.split("afresh")[-1]  # a delete is no loss
    first.transact("k1", cfg, lambda st: None)
    assert lw_logs.text.count("came back without its data") == 2
    first.close()
    second.close()


def test_fail_closed_blocks_while_down_and_recovers(
    own_server: Server, lw_logs: pytest.LogCaptureFixture
) -> None:
    """With failMode closed, calls are blocked while Redis is down and allowed once it is back."""
    own_server.start()
    config = {**LOOP, "loopwarden": {"failMode": "closed"}}
    guard = lw.LoopGuard(config, store=f"{own_server.url}?timeout=0.5")
    run = guard.run("r")
    assert call(run, 0) == "allow"
    own_server.kill()
    decision = run.before_call("fetch", {"page": 1}, call_id="c1")
    assert decision.blocked and "fail closed" in (decision.message or "")
    assert run.before_call("fetch", {"page": 2}, call_id="c2").blocked
    own_server.start()
    wait_until(lambda: call(run, 3) == "allow", timeout=60, interval=0.05)
    assert len(outage_warnings(lw_logs)) == 1
    guard.close()


def test_stalled_server_every_call_returns_within_the_timeout(
    proxy: Proxy, prefix: str, lw_logs: pytest.LogCaptureFixture
) -> None:
    """A server that stops answering costs each call at most the timeout, then nothing."""
    timeout = 0.3
    guard = lw.LoopGuard(LOOP, store=f"{proxy.url}?prefix={prefix}&timeout={timeout}")
    run = guard.run("r")
    assert [call(run, i) for i in range(3)] == ["allow"] * 3
    proxy.set_mode("stall")
    longest = 0.0
    for i in range(3, 40):
        started = time.monotonic()
        assert call(run, i) == "allow"
        longest = max(longest, time.monotonic() - started)
    # A hung call would never return; the bound only has to tell "timeout" from "hang".
    assert longest < timeout * 10
    assert len(outage_warnings(lw_logs)) == 1
    assert "no answer within 0.3 s" in outage_warnings(lw_logs)[0]
    proxy.set_mode("pass")
    recover(run, lw_logs, 40)
    assert loud(lw_logs) == []
    guard.close()


def test_dropped_connections_back_off_instead_of_retrying_every_call(
    proxy: Proxy, prefix: str, lw_logs: pytest.LogCaptureFixture
) -> None:
    """While Redis is unreachable, calls fail fast without a connection attempt each."""
    guard = lw.LoopGuard(LOOP, store=f"{proxy.url}?prefix={prefix}")
    run = guard.run("r")
    call(run, 0)
    proxy.set_mode("drop")
    before = proxy.accepted
    assert [call(run, i) for i in range(1, 301)] == ["allow"] * 300
    # 600 store steps; only the probes after each back-off reach the network.
    assert proxy.accepted - before < 30
    assert len(outage_warnings(lw_logs)) == 1
    proxy.set_mode("pass")
    recover(run, lw_logs, 301)
    guard.close()


def test_cluster_failover_of_the_runs_primary(
    redis_cluster: Cluster, prefix: str, lw_logs: pytest.LogCaptureFixture
) -> None:
    """Killing the primary of the run's slot: fail-open meanwhile, then the promoted replica
    serves the run with its counts intact."""
    store = RedisStore(f"{redis_cluster.url}?prefix={prefix}&timeout=0.5")
    guard = lw.LoopGuard(LOOP, store=store)
    run = guard.run("r", session_id="s")
    for i in range(5):
        call(run, i)
    client = store._sync_client()
    node = client.get_node_from_key(store.run_key(run.key))
    primary = redis_cluster.node_for_port(node.port)

    def replicated() -> bool:
        with primary.client() as direct:
            role = direct.execute_command("ROLE")
        return bool(role[2]) and all(int(r[2]) == int(role[1]) for r in role[2])

    wait_until(replicated, what="the replica to catch up")
    primary.kill()
    try:
        recover(run, lw_logs, 5)
        assert call_ids(run)[:5] == [f"c{i}" for i in range(5)]
        assert len(outage_warnings(lw_logs)) == 1
    finally:
        primary.start()  # it rejoins as a replica; later tests get a healthy cluster
        redis_cluster.wait_healthy()
        guard.close()


def test_read_only_replica_is_named(redis_sentinel: object, prefix: str) -> None:
    """Pointing the URL at a replica gives an error that says so."""
    from tests.stores.redis._servers import SentinelSetup

    assert isinstance(redis_sentinel, SentinelSetup)
    store = RedisStore(f"{redis_sentinel.replica.url}?prefix={prefix}")
    with pytest.raises(lw.StoreError, match="read-only replica"):
        store.transact("k", lw.LoopGuard(LOOP).config_for(), lambda st: None)
    store.close()
    with pytest.raises(redis.exceptions.ReadOnlyError), redis_sentinel.replica.client() as c:
        c.set(f"{prefix}x", 1)
