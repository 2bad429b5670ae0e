"""Claude Code's HTTP hooks: the user's port and key, and what the requests look like.

Claude Code POSTs each hook event to a URL instead of starting a process
(``{"type": "http", "url": ..., "headers": ...}``). loopwarden's hook helper
answers those requests on ``127.0.0.1``, on a port chosen once per user by
``loopwarden install`` and kept, with a random key, in a file only the user
can read (``http-hooks.json`` next to the state, mode 0600). ``install``
writes the port into the URL and the key into a header of the user's Claude
Code settings; the helper answers only requests that carry the key and, on
Linux, come from a process of the user (see :mod:`.peeruid`).

Imported by ``install``, ``doctor``, the helper and the session-start hook
command, never on a tool call's path: standard library only, no engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NamedTuple
from urllib.parse import quote

from .._paths import data_dir
from ..errors import LoopwardenError
from ._protocol import ENV_KEYS

__all__ = [
    "HEADER_CWD",
    "HEADER_ENV",
    "HEADER_EXIT",
    "HEADER_HELPER",
    "HEADER_PROOF",
    "HEADER_STDOUT",
    "HEADER_TOKEN",
    "HOOK_PATH",
    "HTTP_TIMEOUT",
    "PING_PATH",
    "RUN_PATH",
    "HttpKeys",
    "KeysError",
    "Probe",
    "data_dir",
    "ensure_keys",
    "env_header",
    "env_headers",
    "free_port",
    "helper_name",
    "hook_url",
    "load_keys",
    "parse_hook_url",
    "probe",
    "record_path",
]

PREFIX = "/loopwarden/v1/"
HOOK_PATH = PREFIX + "hook/"
"""``HOOK_PATH + AGENT`` (and the hook's own options in the query: ``?arg=--config&arg=F``)."""
RUN_PATH = PREFIX + "run/"
"""``RUN_PATH + AGENT``: the shell hook (``hooks.shellhook``): the answer is the hook
command's exit code, stdout and stderr."""
PING_PATH = PREFIX + "ping"
HEADER_TOKEN = "X-Loopwarden-Token"
HEADER_HELPER = "X-Loopwarden-Helper"
"""Sent with every answer of the helper, even a refusal: which helper this is."""
HEADER_PROOF = "X-Loopwarden-Proof"
"""In the helper's ``100 Continue``: the second secret of the key file, which only the
user's helper knows; the shell hook sends its event only after seeing it."""
HEADER_CWD = "X-Loopwarden-Cwd"
HEADER_EXIT = "X-Loopwarden-Exit"
HEADER_STDOUT = "X-Loopwarden-Stdout"
"""How many bytes of the body are the hook's stdout (the rest is its stderr)."""
HEADER_ENV = "X-Loopwarden-Env-"
"""``HEADER_ENV + KEY``: the value of the environment variable KEY in Claude Code's
environment (Claude Code fills it in: ``"${HOME}"``, with ``allowedEnvVars``)."""
HTTP_TIMEOUT = 10
"""Seconds Claude Code waits for an answer (then it goes on without one)."""
_RECORD = "http-hooks.json"
# Ports loopwarden picks from: below Linux's default ephemeral range (32768-60999), so
# the kernel does not hand the port to some outgoing connection while no helper runs.
_PORTS = (20000, 32767)


class KeysError(LoopwardenError):
    """The key file cannot be read or written safely (the message says why)."""


class HttpKeys(NamedTuple):
    """The user's HTTP hook port, key, and the helper's proof (:data:`HEADER_PROOF`)."""

    port: int
    token: str
    proof: str


def env_header(key: str) -> str:
    """The header that carries the environment variable ``key`` (``HOME``)."""
    return HEADER_ENV + key


def record_path(env: Mapping[str, str]) -> Path:
    return data_dir(env) / _RECORD


def load_keys(env: Mapping[str, str]) -> HttpKeys | None:
    """The user's port and key; None when there is no key file yet.

    Raises :class:`KeysError` for a file that others could read or write, or that is
    not the user's: its key would not be a secret.
    """
    path = record_path(env)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KeysError(f"{path}: cannot read the HTTP hook key ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            raise KeysError(
                f"{path}: the HTTP hook key file must belong to you and be readable by you "
                "only (mode 0600); remove it and run 'loopwarden install claude-code' again"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        value = json.loads(data)
        keys = HttpKeys(int(value["port"]), str(value["token"]), str(value["proof"]))
    except (ValueError, KeyError, TypeError):
        raise KeysError(
            f"{path}: not a loopwarden HTTP hook key file; remove it and run "
            "'loopwarden install claude-code' again"
        ) from None
    if not 0 < keys.port < 65536 or len(keys.token) < 32 or len(keys.proof) < 32:
        raise KeysError(f"{path}: the port or the key in it is not valid; remove the file")
    return keys


def _write(path: Path, keys: HttpKeys) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        # One line, in this order: the shell hook reads it with a pattern.
        line = {"port": keys.port, "token": keys.token, "proof": keys.proof}
        os.write(fd, json.dumps(line).encode() + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_keys(env: Mapping[str, str], *, new_port: bool = False) -> HttpKeys:
    """The user's port and key, created on first use (a free port, a random key);
    ``new_port``: keep the key, move to another free port."""
    keys = load_keys(env)
    if keys is not None and not new_port:
        return keys
    token = keys.token if keys is not None else secrets.token_hex(32)
    proof = keys.proof if keys is not None else secrets.token_hex(32)
    port = free_port(exclude={keys.port} if keys is not None else set())
    keys = HttpKeys(port, token, proof)
    try:
        _write(record_path(env), keys)
    except OSError as exc:
        raise KeysError(f"{record_path(env)}: cannot write the HTTP hook key ({exc})") from None
    return keys


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(exclude: set[int] | None = None) -> int:
    """A port nothing listens on at 127.0.0.1, outside the kernel's ephemeral range."""
    low, high = _ephemeral()
    candidates = [p for p in range(*_PORTS) if not low <= p <= high and p not in (exclude or ())]
    rng = random.SystemRandom()
    for port in rng.sample(candidates, min(200, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise KeysError("no free port found on 127.0.0.1 for loopwarden's HTTP hooks")


def hook_url(port: int, agent: str, args: list[str]) -> str:
    """The URL of ``agent``'s HTTP hook, with the hook's own options in the query."""
    query = "&".join(f"arg={quote(a, safe='')}" for a in args)
    return f"http://127.0.0.1:{port}{HOOK_PATH}{agent}" + (f"?{query}" if query else "")


def parse_hook_url(url: object) -> tuple[int, str, list[str]] | None:
    """(port, agent, the hook's own options) of a URL :func:`hook_url` wrote; None for
    any other URL."""
    from urllib.parse import parse_qsl, urlsplit

    if not isinstance(url, str) or not url.startswith("http://127.0.0.1:"):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if port is None or not parts.path.startswith(HOOK_PATH):
        return None
    agent = parts.path[len(HOOK_PATH) :]
    if not agent or "/" in agent:
        return None
    args = [value for key, value in parse_qsl(parts.query, keep_blank_values=True) if key == "arg"]
    return port, agent, args


class Probe(NamedTuple):
    """What answers on a port: ``served`` (a loopwarden helper that knows the key),
    ``refused`` (the key is not the one this helper expects), ``closed`` (nothing
    listens), ``silent`` (a listener that does not answer), ``other`` (another program)."""

    kind: Literal["served", "refused", "closed", "silent", "other"]
    helper: str = ""
    """The helper's name (:func:`helper_name`), for ``served`` and ``refused``."""
    detail: str = ""


def probe(port: int, token: str, timeout: float = 3.0) -> Probe:
    """Ask ``127.0.0.1:port`` (in this network namespace) who it is."""
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except ConnectionRefusedError:
        return Probe("closed")
    except OSError as exc:
        return Probe("silent", detail=str(exc))
    request = (
        f"GET {PING_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{HEADER_TOKEN}: {token}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    data = b""
    try:
        sock.sendall(request)
        while b"\r\n\r\n" not in data and len(data) < 65536:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        if not data:
            return Probe("silent", detail=str(exc) or type(exc).__name__)
    finally:
        sock.close()
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
    lines = head.split("\r\n")
    status = lines[0].split(" ")
    helper = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == HEADER_HELPER.lower():
            helper = value.strip()
    if not head:
        return Probe("silent", detail="the connection closed without an answer")
    if helper and len(status) > 1 and status[1] == "200":
        return Probe("served", helper)
    if helper and len(status) > 1 and status[1] == "401":
        return Probe("refused", helper)
    return Probe("other", detail=lines[0][:200])


def helper_name(socket_file: str) -> str:
    """How a helper names itself in :data:`HEADER_HELPER`: its socket's file name (one
    per Python environment and loopwarden installation, see ``_protocol.socket_path``)."""
    return os.path.basename(socket_file).removesuffix(".sock")


def env_headers() -> dict[str, str]:
    """The environment headers of an HTTP hook, as Claude Code fills them in."""
    return {env_header(key): "${" + key + "}" for key in ENV_KEYS}
