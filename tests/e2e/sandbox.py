"""Run CLI sessions against a scripted model API, inside a network namespace with only ``lo``.

Started by the tests as ``unshare -n -- python sandbox.py SPEC.json`` (``unshare -rn``
when not root). It brings ``lo`` up, refuses to go on if any other interface
exists, serves the fake API of ``fakeapi.py`` on 127.0.0.1, runs each command
of the spec in turn (same server, so a session can continue over several
invocations) and writes what happened to ``SPEC.json``'s ``result`` file.

Spec (``port``: optional, a fixed port for a CLI whose settings file must name it)::

    {"script": {...fakeapi script...}, "log": "requests.jsonl", "result": "result.json",
     "runs": [{"argv": [...], "env": {...}, "cwd": "...", "timeout": 120}]}

In ``argv`` and ``env`` values, ``{port}`` is the server's port and ``{session_id}``
the session id the previous runs reported (from their JSON output).
"""

from __future__ import annotations

import fcntl
import json
import re
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeapi import serve

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_SESSION = re.compile(r'"(?:session_id|thread_id|sessionId|sessionID)"\s*:\s*"([0-9a-zA-Z_-]{8,})"')


def loopback_only() -> None:
    """Bring ``lo`` up; fail unless it is the only interface (so nothing can leave)."""
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"]:
        raise SystemExit(f"sandbox: not an isolated network namespace (interfaces: {names})")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def _fill(value: str, values: dict[str, str]) -> str:
    for key, found in values.items():
        value = value.replace("{" + key + "}", found)
    return value


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    loopback_only()
    server = serve(spec["script"], Path(spec["log"]), spec.get("port", 0))
    values = {"port": str(server.server_address[1])}
    results: list[dict[str, Any]] = []
    for run in spec["runs"]:
        argv = [_fill(a, values) for a in run["argv"]]
        env = {k: _fill(v, values) for k, v in run["env"].items()}
        start = time.monotonic()
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(
                argv,
                env=env,
                cwd=run.get("cwd"),
                input=run.get("stdin", "").encode(),
                capture_output=True,
                timeout=run.get("timeout", 180),
            )
            code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code, out, err = None, exc.stdout or b"", exc.stderr or b""
        took = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU of the CLI and of every process it waited for (its hooks): steadier
        # than wall time on a busy machine.
        cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
        stdout = out.decode("utf-8", "replace")
        found = _SESSION.search(stdout)
        if found and "session_id" not in values:
            values["session_id"] = found.group(1)
        results.append(
            {
                "argv": argv,
                "code": code,
                "stdout": stdout,
                "stderr": err.decode("utf-8", "replace"),
                "seconds": took,
                "cpu": cpu,
            }
        )
        Path(spec["result"]).write_text(json.dumps({"runs": results, "values": values}))
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
