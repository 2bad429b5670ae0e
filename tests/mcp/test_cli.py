"""``loopwarden mcp-proxy`` as a process: clear errors, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import HERE, LOOPWARDEN, StderrLines, stop_process

pytestmark = pytest.mark.timeout(90)


def test_bad_invocations_exit_with_a_clear_message(tmp_path: Path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    legacy = [sys.executable, str(HERE / "legacy_server.py")]
    bad_config = tmp_path / "bad.json"
    bad_config.write_text(json.dumps({"tools": {"loopDetection": {"warningTreshold": 3}}}))
    cases = {
        "missing command": (["--", str(tmp_path / "no-such-server")], 1, "cannot start upstream"),
        "no upstream": ([], 2, "give an upstream"),
        "remote bind": (["--http", "--host", "0.0.0.0", "--", "x"], 2, "not a loopback address"),
        "bad config": (
            ["--config", str(bad_config), "--", "x"],
            2,
            "tools.loopDetection.warningTreshold",
        ),
        "bad URL": (["--upstream", "ftp://example"], 2, "not an http(s) URL"),
        "port in use": (["--http", "--port", port, "--", *legacy], 1, "cannot listen on"),
        "bad ask timeout": (["--ask-timeout", "0", "--", "x"], 2, "--ask-timeout must be positive"),
        "bad on-stop": (["--on-stop", "ansewr", "--", "x"], 2, "'ansewr' is not one of"),
    }
    # Started together: each one is a Python process start, slow on this machine.
    procs = {
        name: subprocess.Popen(
            [LOOPWARDEN, "mcp-proxy", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (args, _, _) in cases.items()
    }
    with taken:
        results = {name: proc.communicate(timeout=60) for name, proc in procs.items()}
    for name, (_, code, message) in cases.items():
        out, err = results[name]
        assert procs[name].returncode == code, f"{name}: exit {procs[name].returncode}\n{err}"
        assert message in err, f"{name}: {err}"
        assert "Traceback" not in err, f"{name}: {err}"
        assert out == "", f"{name}: stdout is the MCP channel, but got {out!r}"


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie has exited; its parent just has not reaped it yet.
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_stdin_eof_and_sigterm_shut_down_cleanly_and_stop_the_upstream():
    legacy = [sys.executable, str(HERE / "legacy_server.py")]
    procs = {
        how: subprocess.Popen(
            [LOOPWARDEN, "mcp-proxy", "--log-level", "info", "--", *legacy],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for how in ("eof", "sigterm")
    }
    logs = {how: StderrLines(proc) for how, proc in procs.items()}
    try:
        for how, proc in procs.items():
            logs[how].wait_for("guarding 2 tools")
            # The upstream's stderr is passed through to ours.
            assert "legacy upstream starting" in logs[how].text
            upstreams = _children(proc.pid)
            assert len(upstreams) == 1, how
            assert proc.stdin is not None
            if how == "eof":
                proc.stdin.close()
            else:
                proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0, f"{how}: {logs[how].text}"
            assert _gone(upstreams[0]), f"{how}: the upstream server outlived the proxy"
            assert proc.stdout is not None and proc.stdout.read() == ""
            assert "Traceback" not in logs[how].text
    finally:
        for how, proc in procs.items():
            stop_process(proc)
            logs[how].close()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
