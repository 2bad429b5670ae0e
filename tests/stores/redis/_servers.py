"""Real Redis servers for the tests: standalone, Cluster and Sentinel, on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

try:
    import redis
except ImportError:  # no redis extra (the no-extras CI suite): every Redis entry skips
    redis = None  # type: ignore[assignment]

from tests._wait import wait_until

SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")


def require_redis() -> str:
    """The redis-server binary; a skip outside CI when it is missing, a failure in CI."""
    if redis is None:
        pytest.skip("the redis extra is not installed (pip install 'loopwarden[redis]')")
    if SERVER is None or CLI is None:
        reason = "redis-server and redis-cli are not installed (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must install them (.ci/apt-packages)")
        pytest.skip(reason)
    return SERVER


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One redis-server process in its own directory; can be killed and started again."""

    def __init__(self, directory: Path, *args: str, port: int | None = None) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **kwargs)  # type: ignore[arg-type]

    def start(self, *extra: str, wait: bool = True) -> Server:
        self.stop()
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [
                require_redis(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                *self.args,
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
        )
        log.close()
        # Never outlive the test session, whatever happens to the fixture's teardown.
        weakref.finalize(self, _kill, self.proc)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            try:
                with self.client(socket_connect_timeout=0.5) as client:
                    return bool(client.ping())
            except redis.exceptions.AuthenticationError:
                return True
            except redis.exceptions.ResponseError as exc:
                return "NOAUTH" in str(exc)
            except redis.exceptions.RedisError:
                return False

        wait_until(ready, timeout=30, what=f"redis-server on port {self.port}")

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "server.log").read_text(errors="replace")[-2000:]
        return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def cli(*args: str) -> str:
    done = subprocess.run(
        [CLI or "redis-cli", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Cluster:
    """Three primaries with one replica each, made by ``redis-cli --cluster create``."""

    def __init__(self, directory: Path) -> None:
        self.nodes: list[Server] = []
        for i in range(6):
            bus = free_port()
            node = Server(
                directory / f"node{i}",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-port",
                str(bus),
            )
            self.nodes.append(node)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])
        return f"redis+cluster://{hosts}"

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_ready()
        cli(
            "--cluster",
            "create",
            *(f"127.0.0.1:{n.port}" for n in self.nodes),
            "--cluster-replicas",
            "1",
            "--cluster-yes",
        )
        self.wait_healthy()
        return self

    def wait_healthy(self, nodes: Iterable[Server] | None = None) -> None:
        """Every node sees all slots served and three primaries, each with a linked replica."""

        def healthy() -> bool:
            for node in nodes or self.nodes:
                try:
                    with node.client() as client:
                        info = client.execute_command("CLUSTER", "INFO")
                        text = info.decode() if isinstance(info, bytes) else str(info)
                        if "cluster_state:ok" not in text:
                            return False
                        if "cluster_slots_ok:16384" not in text:
                            return False
                        role = client.execute_command("ROLE")
                        if role[0] == b"slave" and role[3] != b"connected":
                            return False
                except redis.exceptions.RedisError:
                    return False
            return True

        wait_until(healthy, timeout=60, what="the Redis Cluster to be healthy")

    def node_for_port(self, port: int) -> Server:
        return next(n for n in self.nodes if n.port == port)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SentinelSetup:
    """A primary, one replica and one Sentinel watching them as ``lw-primary``."""

    SERVICE = "lw-primary"

    def __init__(self, directory: Path) -> None:
        self.primary = Server(directory / "primary")
        self.replica = Server(directory / "replica")
        self.sentinel_dir = directory / "sentinel"
        self.sentinel = Server(self.sentinel_dir)

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{self.SERVICE}"

    def start(self) -> SentinelSetup:
        self.primary.start()
        self.replica.start("--replicaof", "127.0.0.1", str(self.primary.port))
        self.sentinel_dir.mkdir(parents=True, exist_ok=True)
        conf = self.sentinel_dir / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel.port}\nbind 127.0.0.1\ndir {self.sentinel_dir}\n"
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
            f"sentinel failover-timeout {self.SERVICE} 5000\n"
        )
        log = open(self.sentinel_dir / "server.log", "ab")  # noqa: SIM115
        self.sentinel.proc = subprocess.Popen(
            [require_redis(), str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        weakref.finalize(self, _kill, self.sentinel.proc)
        self.sentinel.wait_ready()

        def replica_known() -> bool:
            with self.sentinel.client() as client:
                replicas = client.execute_command("SENTINEL", "REPLICAS", self.SERVICE)
                return bool(replicas)

        wait_until(replica_known, timeout=30, what="the sentinel to discover the replica")
        return self

    def stop(self) -> None:
        for server in (self.sentinel, self.replica, self.primary):
            server.stop()


@contextlib.contextmanager
def running(server: Server, *extra: str) -> Iterator[Server]:
    server.start(*extra)
    try:
        yield server
    finally:
        server.stop()
