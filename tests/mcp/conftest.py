"""Shared helpers for the MCP proxy tests: real processes, real MCP clients."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp.client.stdio import StdioServerParameters

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "upstream_server.py"
_script = Path(sys.executable).with_name("loopwarden")
LOOPWARDEN = str(_script) if _script.exists() else (shutil.which("loopwarden") or "loopwarden")

# Small thresholds keep the loops short: warn at 2, block at 4, stop at 6.
SMALL: dict[str, Any] = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 2,
            "criticalThreshold": 4,
            "globalCircuitBreakerThreshold": 6,
            "unknownToolThreshold": 2,
        }
    }
}
# poll_status answers "job N: pending": its warnings and blocks are worded for a wait.
WARNED = "WARNING: the job is still running: poll_status has been polled"
BLOCKED = "CRITICAL: loopwarden blocked this call"
STOPPED = "loopwarden has stopped this run"  # the default onStop's answer (no elicitation)
UPSTREAM_TOOLS = {"poll_status", "counter", "fail", "rpc_fail", "add_tool"}


def texts(result: Any) -> list[str]:
    """The text blocks of a CallToolResult."""
    return [block.text for block in result.content if getattr(block, "type", None) == "text"]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "loopwarden.json"
    path.write_text(json.dumps(SMALL), encoding="utf-8")
    return path


def upstream_command() -> list[str]:
    return [sys.executable, str(UPSTREAM)]


def proxy_params(*options: str, command: list[str] | None = None) -> StdioServerParameters:
    """``loopwarden mcp-proxy OPTIONS -- COMMAND`` (default: the test upstream), as a client
    launches it. ``command=[]`` leaves the stdio upstream out (for ``--upstream URL``)."""
    args = ["mcp-proxy", *options]
    command = upstream_command() if command is None else command
    if command:
        args += ["--", *command]
    return StdioServerParameters(command=LOOPWARDEN, args=args, env=dict(os.environ))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} within {timeout} s")


class StderrLines:
    """Collects a subprocess's stderr lines in a thread, so tests can wait for one."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert proc.stderr is not None
        stream = proc.stderr

        def pump() -> None:
            for line in stream:
                self.lines.append(line)
                self._queue.put(line)
            self._queue.put(None)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()
        self._stream = stream

    def close(self) -> None:
        """Wait for EOF (the process has exited) and close the pipe."""
        self._thread.join(timeout=10)
        self._stream.close()

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} not seen on stderr: {''.join(self.lines)}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"stderr closed before {needle!r}: {''.join(self.lines)}")
            if needle in line:
                return line

    @property
    def text(self) -> str:
        return "".join(self.lines)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def http_upstream() -> Iterator[str]:
    """The test upstream served over streamable HTTP on 127.0.0.1, in its own process."""
    port = free_port()
    proc = subprocess.Popen(
        [*upstream_command(), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)
