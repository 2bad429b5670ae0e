"""``loopwarden hook AGENT``: fast path (see loopwarden.hooks.daemon and .runner)."""

# Runs for every tool call of an agent and is compiled on every start where no
# byte code is cached, so it is kept short; the explanations live in the
# helper's module.
# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

import os
import sys

from ..hooks._protocol import AGENTS, ENV_KEYS, PROTOCOL, runtime_dir, socket_path

# Re-exported: these lived here before hooks._protocol.
__all__ = ["AGENTS", "ENV_KEYS", "PROTOCOL", "main", "runtime_dir", "socket_path"]


def _forward(argv: list[str], payload: bytes) -> tuple[int, bytes, bytes] | None:
    # None: no helper took the event (nothing was sent); handle it in this process.
    env = os.environ
    path = socket_path(env)
    try:
        st = os.stat(path.rpartition("/")[0])
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # never talk to a socket in a directory others control
    try:
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (ImportError, AttributeError, OSError):
        return None
    try:
        sock.settimeout(2.0)
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    pairs = [f"{k}={env[k]}" for k in ENV_KEYS if k in env]
    fields = [PROTOCOL, cwd, str(len(argv)), *argv, str(len(pairs)), *pairs, ""]
    chunks = []
    try:
        sock.settimeout(20.0)  # above the store's busy timeout, below the agents' hook timeout
        sock.sendall(b"\0".join([os.fsencode(f) for f in fields]) + payload)
        sock.shutdown(_socket.SHUT_WR)
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError as exc:
        # The event may be recorded already: never handle it twice; allow (fail open).
        return 0, b"{}", f"loopwarden: the hook helper failed ({exc}); allowed\n".encode()
    finally:
        sock.close()
    code, _, rest = b"".join(chunks).partition(b"\0")
    if code == b"R":
        return None  # the helper is outdated and exiting
    size, _, rest = rest.partition(b"\0")
    try:
        return int(code), rest[int(size) :], rest[: int(size)]
    except ValueError:
        return 0, b"{}", b"loopwarden: malformed answer from the hook helper; allowed\n"


def main(argv: list[str]) -> int:
    payload = None
    if (
        argv
        and argv[0] in AGENTS
        and not {"--no-daemon", "--stop-daemon", "-h", "--help"}.intersection(argv)
        and os.environ.get("LOOPWARDEN_HOOK_DAEMON", "1").lower() not in ("0", "off", "no", "false")
        and hasattr(os, "getuid")  # Unix only; elsewhere events are handled in process
    ):
        try:
            payload = sys.stdin.buffer.read()
        except (AttributeError, OSError, ValueError):
            payload = b""
        try:
            answer = _forward(argv, payload)
        except Exception:  # a bug here must not cost the event: handle it in process
            answer = None
        if answer is not None:
            if answer[2]:
                sys.stderr.buffer.write(answer[2])
                sys.stderr.flush()
            sys.stdout.buffer.write(answer[1])
            sys.stdout.flush()
            return answer[0]
    from ..hooks.runner import run_cli

    return run_cli(argv, payload)
