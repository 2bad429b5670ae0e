"""The hook's fast path, and what the hook process and the hook helper agree on.

Every tool call of a coding agent starts a hook process, so this module is
kept to builtins: ``sys``, ``posix`` (not ``os``: importing ``os`` costs more
than the rest of the hook when Python starts without ``site``), and
``_socket`` when there is a helper to talk to. ``loopwarden install`` writes
the hook as ``python -S -c "<put loopwarden on the path; call main>" AGENT``,
which imports only this module; ``loopwarden hook AGENT``
(``loopwarden.cli.hook``) is the same code behind the console script.

:func:`main` forwards the event to the helper (:mod:`.daemon`) over a Unix
socket and prints its answer; with no helper it imports the full hook
(:mod:`.runner`) and handles the event itself.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

import sys

try:
    import posix as _posix

    _POSIX = True
except ImportError:  # pragma: no cover - Windows: no helper, every event in process
    _POSIX = False

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every hook call
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AGENTS",
    "CONTROL",
    "ENV_KEYS",
    "HELLO",
    "HELLO_TIMEOUT",
    "PROTOCOL",
    "forward",
    "main",
    "runtime_dir",
    "socket_path",
]

AGENTS = ("claude-code", "codex", "gemini", "opencode", "cline", "copilot", "qwen")
"""The coding agents ``loopwarden hook`` and ``install`` accept (adapters in ``hooks.agents``)."""

PROTOCOL = "LWH3"
"""Wire version of a forwarded event; part of the socket name, so versions never meet."""

CONTROL = "LWC1"
"""The first field of a request to the helper that is not an event (stop, ping, listen)."""

HELLO = b"+"
"""What a helper sends first on every connection, before it reads anything: the hook
sends its event only to a helper that is alive."""

HELLO_TIMEOUT = 1.0
"""Seconds the hook waits for :data:`HELLO`: a helper that is frozen (SIGSTOP), or whose
workers are all busy, is passed over and the event is handled in process. No event was
sent to it, so none is counted twice."""

ENV_KEYS = (
    "HOME",
    "LOOPWARDEN_AGENT_ID",
    "LOOPWARDEN_CONFIG",
    "LOOPWARDEN_LOG",
    "LOOPWARDEN_STATE",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)
"""The environment an answer depends on, sent so that the helper answers as the hook would."""

_OWN_KEYS = ("LOOPWARDEN_RUNTIME_DIR", "XDG_RUNTIME_DIR", "LOOPWARDEN_HOOK_DAEMON")
_NO_HELPER_FLAGS = ("--no-daemon", "--stop-daemon", "-h", "--help")


def runtime_dir(env: "Mapping[str, str]") -> str:
    """The private directory of the helper's socket."""
    d = env.get("LOOPWARDEN_RUNTIME_DIR")
    if d:
        return d
    d = env.get("XDG_RUNTIME_DIR")
    if d:
        return d + "/loopwarden"
    return f"/tmp/loopwarden-{_posix.getuid() if _POSIX else 0}"


def socket_path(env: "Mapping[str, str]") -> str:
    """The helper's socket: one per Python environment and loopwarden installation."""
    # FNV-1a, as hashlib costs an import. The environment is the interpreter's
    # directory (sys.prefix is not the virtualenv under -S); the installation is
    # the loopwarden package directory (this file's grandparent).
    h = 0xCBF29CE484222325
    python = (sys.executable or sys.prefix).rpartition("/")[0]
    package = __file__.replace("\\", "/").rsplit("/", 2)[0]
    key = f"{python}\0{package}\0{PROTOCOL}"
    for byte in key.encode("utf-8", "surrogateescape"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{runtime_dir(env)}/hook-{h:016x}.sock"


def _environ() -> dict[str, str]:
    """The few environment variables the fast path needs (``posix.environ`` is bytes)."""
    raw: dict[bytes, bytes] = _posix.environ if _POSIX else {}
    found = {}
    for key in (*ENV_KEYS, *_OWN_KEYS):
        value = raw.get(key.encode())
        if value is not None:
            found[key] = value.decode("utf-8", "surrogateescape")
    return found


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def forward(argv: "list[str]", payload: bytes) -> "tuple[int, bytes, bytes] | None":
    """Have the helper answer the event: (exit code, stdout, stderr), or None when no
    helper took it (nothing was sent; the caller handles it in process)."""
    if not _POSIX:
        return None
    env = _environ()
    path = socket_path(env)
    try:
        st = _posix.lstat(path.rpartition("/")[0])  # a symlink is never followed
    except OSError:
        return None
    if st.st_mode & 0o170000 != 0o040000 or st.st_uid != _posix.getuid() or st.st_mode & 0o077:
        return None  # never talk to a socket in a directory others control
    try:
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (ImportError, AttributeError, OSError):
        return None
    try:
        # A helper that is alive answers at once; the kernel accepts connections for
        # a frozen one too, so wait for its greeting before sending anything.
        sock.settimeout(HELLO_TIMEOUT)
        sock.connect(path)
        if sock.recv(1) != HELLO:
            raise OSError("no greeting")
    except OSError:
        sock.close()
        return None
    try:
        cwd = _posix.getcwd()
    except OSError:
        cwd = ""
    pairs = [f"{k}={env[k]}" for k in ENV_KEYS if k in env]
    fields = [PROTOCOL, cwd, str(len(argv)), *argv, str(len(pairs)), *pairs, ""]
    chunks = []
    try:
        sock.settimeout(20.0)  # above the store's busy timeout, below the agents' hook timeout
        sock.sendall(b"\0".join([_encode(f) for f in fields]) + payload)
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


def _http_served(argv: "list[str]") -> bool:
    """Whether this installation's helper answers the user's HTTP port here, with the key
    file's key (the usual case: one local round trip, no import). Anything else, or any
    doubt: False, and ``hooks.httpstart`` looks into it."""
    try:
        value = argv[argv.index("--http-port") + 1]
        env = _environ()
        xdg = env.get("XDG_DATA_HOME", "")
        if xdg.startswith("/"):
            base = xdg
        elif sys.platform == "darwin":
            base = env.get("HOME", "") + "/Library/Application Support"
        else:
            base = env.get("HOME", "") + "/.local/share"
        fd = _posix.open(base + "/loopwarden/http-hooks.json", _posix.O_RDONLY | _posix.O_NOFOLLOW)
        try:
            st = _posix.fstat(fd)
            if st.st_uid != _posix.getuid() or st.st_mode & 0o077:
                return False
            record = _posix.read(fd, 4096).decode()
        finally:
            _posix.close(fd)
        port = int(value if value != "auto" else record.split('"port": ')[1].split(",")[0])
        token = record.split('"token": "')[1].split('"')[0]
        helper = socket_path(env).rpartition("/")[2].removesuffix(".sock")
        import _socket

        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        try:
            sock.settimeout(1.0)
            sock.connect(("127.0.0.1", port))
            sock.sendall(
                f"GET /loopwarden/v1/ping HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"X-Loopwarden-Token: {token}\r\nConnection: close\r\n\r\n".encode()
            )
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
        head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
        return head.startswith("HTTP/1.1 200 ") and f"\r\nX-Loopwarden-Helper: {helper}\r\n" in (
            head + "\r\n"
        )
    except Exception:  # any doubt: the full check decides
        return False


def _helper_allowed(argv: "list[str]") -> bool:
    if not argv or argv[0] not in AGENTS or not _POSIX:
        return False
    if any(flag in argv for flag in _NO_HELPER_FLAGS):
        return False
    setting = _environ().get("LOOPWARDEN_HOOK_DAEMON", "1").lower()
    return setting not in ("0", "off", "no", "false")


def main(argv: "list[str]") -> int:
    """``loopwarden hook AGENT [options]``: one event from stdin, the answer on stdout."""
    payload = None
    if _helper_allowed(argv):
        try:
            payload = sys.stdin.buffer.read()
        except (AttributeError, OSError, ValueError):
            payload = b""
        try:
            answer = forward(argv, payload)
        except Exception:  # a bug here must not cost the event: handle it in process
            answer = None
        if answer is not None and "--http-port" in argv and not _http_served(argv):
            # Claude Code's session-start and prompt hooks: make sure its HTTP hooks are
            # answered (not on a tool call's path, and only when they are not: imports).
            from .httpstart import main_after_forward

            answer = main_after_forward(argv, answer)
        if answer is not None:
            if answer[2]:
                sys.stderr.buffer.write(answer[2])
                sys.stderr.flush()
            sys.stdout.buffer.write(answer[1])
            sys.stdout.flush()
            return answer[0]
    if "site" not in sys.modules:  # started with -S (installed command): the full hook needs it
        import site

        site.main()
    from .runner import run_cli

    return run_cli(argv, payload)
