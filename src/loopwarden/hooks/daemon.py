"""The hook helper: a long-lived process that answers forwarded hook events.

Started on demand by the first hook invocation that finds none running, it
listens on a Unix socket in a private directory (``$LOOPWARDEN_RUNTIME_DIR``,
``$XDG_RUNTIME_DIR/loopwarden`` or ``/tmp/loopwarden-<uid>``, mode 0700) and
exits after ``$LOOPWARDEN_HOOK_IDLE`` seconds without events (default 900),
on ``loopwarden hook --stop-daemon``, or when loopwarden's own source files
change (an upgrade), after telling the caller to handle its event itself.

Every event is answered by :func:`loopwarden.hooks.runner.handle` with the
caller's argv, environment and working directory; all state is in the SQLite
store, so the helper holds nothing a hook process would not see.

It also answers Claude Code's HTTP hooks (:mod:`.httpserve`) on the listening
sockets that the hook commands of a session's start and of each prompt hand
to it (:mod:`.httpstart`).

Wire format (one connection per event; ``\\0`` separates fields)::

    greeting: +   (sent by the helper on accepting, before it reads; see HELLO)
    request:  LWH3 \\0 cwd \\0 N \\0 argv[0..N] \\0 M \\0 env[0..M] (k=v) \\0 <event bytes>
    control:  LWC1 \\0 stop|ping
              LWC1 \\0 listen \\0 port \\0 uid \\0 netns \\0 check \\0 key \\0 proof
                   (+ the listening socket and the check's descriptor, SCM_RIGHTS;
                   without descriptors: a new key for that port)
    answer:   <exit code> \\0 <len(stderr)> \\0 <stderr> <stdout>     or  R  (outdated: retry)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from .._logging import logger
from ..errors import LoopwardenError
from ._protocol import CONTROL, HELLO, HELLO_TIMEOUT, PROTOCOL, runtime_dir, socket_path
from .context import HookContext
from .hooklog import write_log
from .httpkeys import helper_name
from .httpserve import HttpFront, Listener, ListenSpec
from .peeruid import CheckKind, PeerCheck
from .runner import handle

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "HTTP_IDLE_SECONDS",
    "idle_seconds",
    "idle_text",
    "main",
    "ping",
    "serve",
    "silent_helper",
    "spawn",
    "stop",
    "wait_for_start",
]

DEFAULT_IDLE_SECONDS = 900.0
HTTP_IDLE_SECONDS = 3600.0
"""A helper that serves HTTP hooks waits at least this long for an event before it exits."""
_WORKERS = 4
_STALE_CHECK_SECONDS = 2.0
_LOCK_FD = 3  # where a spawned helper finds the lock its starter took
_LISTEN_FD = 4  # ... and the listening socket for HTTP hooks, if it was given one
_CHECK_FD = 5  # ... and that socket's peer check
_KEY_FD = 6  # ... and a pipe holding the key its requests must carry
_MAX_FDS = 4  # descriptors accepted with one control request
# How long a stopping helper waits for events in progress before it exits anyway.
_STOP_GRACE_SECONDS = 5.0


def idle_seconds(env: Mapping[str, str]) -> float:
    """How long the helper waits for an event before it exits (``$LOOPWARDEN_HOOK_IDLE``)."""
    try:
        value = float(env.get("LOOPWARDEN_HOOK_IDLE", DEFAULT_IDLE_SECONDS))
    except ValueError:
        return DEFAULT_IDLE_SECONDS
    return value if 0 < value < math.inf else DEFAULT_IDLE_SECONDS


def idle_text(env: Mapping[str, str]) -> str:
    """:func:`idle_seconds` in words: ``15 minutes``, ``90 seconds``."""
    seconds = idle_seconds(env)
    if seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"


def _private_dir(path: str) -> bool:
    """Create the runtime directory (0700); refuse a symlink, or one another user owns.

    A symlink is refused rather than followed: under ``/tmp`` anyone can plant
    one, and its target would be chmod'ed and get the helper's socket.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        logger.warning(
            "loopwarden hook: runtime directory %s refused (%s); no hook helper "
            "(a symlink is never followed)",
            path,
            exc.strerror or exc,
        )
        return False
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            logger.warning(
                "loopwarden hook: runtime directory %s belongs to another user; no hook helper",
                path,
            )
            return False
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class _SourceWatch:
    """Notices when loopwarden's loaded modules change on disk (an upgrade or an edit)."""

    def __init__(self) -> None:
        self.files = {
            path: self._mtime(path)
            for name, module in list(sys.modules.items())
            if name.split(".")[0] == "loopwarden"
            and isinstance(path := getattr(module, "__file__", None), str)
        }
        self.checked = time.monotonic()

    @staticmethod
    def _mtime(path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return -1

    def changed(self) -> bool:
        now = time.monotonic()
        if now - self.checked < _STALE_CHECK_SECONDS:
            return False
        self.checked = now
        return any(self._mtime(path) != mtime for path, mtime in self.files.items())


def _split(data: bytes, count: int) -> tuple[list[bytes], bytes]:
    fields: list[bytes] = []
    rest = data
    for _ in range(count):
        field, sep, rest = rest.partition(b"\0")
        if not sep:
            raise ValueError("truncated request")
        fields.append(field)
    return fields, rest


def _parse(data: bytes) -> tuple[str, list[str], dict[str, str], bytes]:
    (magic, cwd, n_argv), rest = _split(data, 3)
    if magic.decode() != PROTOCOL:
        raise ValueError(f"unknown protocol {magic[:16]!r}")
    argv, rest = _split(rest, int(n_argv))
    (n_env,), rest = _split(rest, 1)
    pairs, payload = _split(rest, int(n_env))
    env: dict[str, str] = {}
    for pair in pairs:
        key, _, value = os.fsdecode(pair).partition("=")
        env[key] = value
    return os.fsdecode(cwd), [os.fsdecode(a) for a in argv], env, payload


def _recv_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _recv_with_fds(conn: socket.socket) -> tuple[bytes, list[int]]:
    """Everything the client sends, and the descriptors that came with its first bytes."""
    fds: list[int] = []
    first, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(_MAX_FDS * 4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, usable, 4)]
    if not first:
        return b"", fds
    return first + _recv_all(conn), fds


class _Server:
    def __init__(self, path: str, idle: float) -> None:
        self.path = path
        self.idle = idle
        self.ctx = HookContext(serve_metrics=True)
        self.watch = _SourceWatch()
        self.stopping = threading.Event()
        self.active = 0
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.http: HttpFront | None = None

    def activity(self, step: int) -> None:
        """A request starts (+1) or ends (-1): the helper is not idle meanwhile."""
        with self.lock:
            self.active += step
            self.last = time.monotonic()

    def http_answer(
        self, argv: list[str], env: Mapping[str, str], cwd: str, payload: bytes, relay: bool
    ) -> tuple[int, bytes, bytes] | None:
        """One event over HTTP: the hook command's answer. An outdated helper declines a
        shell hook's event (it runs the hook command instead) but still answers Claude
        Code's HTTP hooks (nothing to fall back to there), then exits."""
        if self.watch.changed():
            self.stopping.set()
            if relay:
                return None
        reply = handle(self.ctx, argv, env, cwd, payload)
        return reply.code, reply.out, reply.err.encode("utf-8", "replace")

    @staticmethod
    def report(level: int, message: str) -> None:
        """A line for the hook log (of the helper's own environment: a refused request
        has not said whose it is)."""
        write_log(os.environ, [(level, message, False)], "hook-helper")

    def http_front(self) -> HttpFront:
        with self.lock:
            if self.http is None:
                self.http = HttpFront(
                    self.http_answer,
                    helper_name(self.path),
                    self.activity,
                    os.environ,
                    self.report,
                )
            return self.http

    def listen(self, spec: ListenSpec) -> None:
        """Serve Claude Code's HTTP hooks on ``spec`` too."""
        listener = Listener(
            spec.sock,
            spec.port,
            spec.netns,
            spec.uid,
            spec.check,
            spec.token.encode("utf-8"),
            spec.proof.encode("utf-8"),
        )
        self.http_front().add(listener)

    def control(self, command: bytes, fds: list[int]) -> None:
        """A control request other than stop and ping (it took ownership of ``fds``)."""
        parts = command.split(b"\0")
        if parts[0] != b"listen" or len(parts) != 7:
            raise ValueError(f"unknown control request {parts[0][:32]!r}")
        port, uid = int(parts[1]), int(parts[2])
        netns, kind, token, proof = (p.decode("utf-8", "surrogateescape") for p in parts[3:])
        if not fds:
            self.http_front().set_token(port, token.encode("utf-8"), proof.encode("utf-8"))
            return
        if kind not in ("netlink", "proc", "none"):
            raise ValueError(f"unknown peer check {kind!r}")
        check_kind: CheckKind = kind  # type: ignore[assignment]
        sock = socket.socket(fileno=fds.pop(0))
        check = PeerCheck(check_kind, fds.pop(0) if check_kind != "none" and fds else None)
        self.listen(ListenSpec(sock, check, port, uid, netns, token, proof))

    def serve_conn(self, conn: socket.socket) -> None:
        with self.lock:
            self.active += 1
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            conn.sendall(HELLO)
            data, fds = _recv_with_fds(conn)
            if not data:
                return  # the hook gave up waiting for the greeting: nothing was sent
            if data.startswith(CONTROL.encode() + b"\0"):
                command = data[len(CONTROL) + 1 :]
                if command == b"stop":
                    self.stopping.set()
                elif command != b"ping":
                    try:
                        self.control(command, fds)
                    except (ValueError, OSError) as exc:
                        self.report(
                            logging.ERROR, f"loopwarden hook helper: control request refused: {exc}"
                        )
                        conn.sendall(f"1\0{exc}".encode())
                        return
                conn.sendall(f"0\0{os.getpid()}".encode())
                return
            if self.watch.changed():
                self.stopping.set()
                conn.sendall(b"R")  # the caller handles it with the new code
                return
            try:
                cwd, argv, env, payload = _parse(data)
            except (ValueError, UnicodeDecodeError) as exc:
                # Only a mismatched client sends this; say so where a user will see it.
                message = f"loopwarden hook helper: malformed request ({exc}); allowed"
                write_log(os.environ, [(logging.ERROR, message, False)], "hook-helper")
                err = f"{message}\n".encode()
                conn.sendall(f"0\0{len(err)}\0".encode() + err + b"{}")
                return
            reply = handle(self.ctx, argv, env, cwd, payload)
            err = reply.err.encode("utf-8", "replace")
            conn.sendall(f"{reply.code}\0{len(err)}\0".encode() + err + reply.out)
        except OSError:
            pass  # the hook process went away; nothing to answer
        finally:
            for fd in fds:  # descriptors no request took
                with contextlib.suppress(OSError):
                    os.close(fd)
            conn.close()
            with self.lock:
                self.active -= 1
                self.last = time.monotonic()

    def work(self, sock: socket.socket) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                if self.idle_expired():
                    self.stopping.set()
                continue
            except OSError:
                self.stopping.set()  # the listening socket is gone
                continue
            with self.lock:
                self.last = time.monotonic()
            conn.setblocking(True)
            self.serve_conn(conn)

    def idle_expired(self) -> bool:
        idle = self.idle
        if self.http is not None and self.http.ports():
            # Nothing restarts a helper between two HTTP hook events of a turn (only the
            # next prompt does): outlast a long tool call or a long think.
            idle = max(idle, HTTP_IDLE_SECONDS)
        with self.lock:
            return self.active == 0 and time.monotonic() - self.last > idle


def serve(
    path: str,
    idle: float = DEFAULT_IDLE_SECONDS,
    lock_fd: int | None = None,
    listen: ListenSpec | None = None,
) -> int:
    """Run the helper on ``path`` until idle, stopped or outdated. Returns an exit code.

    ``lock_fd``: the helper lock, already taken by the hook that started this helper.
    ``listen``: a listening socket for Claude Code's HTTP hooks, made by that hook.
    """
    import fcntl

    directory = os.path.dirname(path)
    if not _private_dir(directory):
        return 1
    if lock_fd is None:
        lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    else:
        os.set_inheritable(lock_fd, False)
    deadline = time.monotonic() + 3.0
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            # Another helper runs (or is exiting after an upgrade): wait a little.
            if time.monotonic() > deadline:
                os.close(lock_fd)
                return 0
            time.sleep(0.05)
    os.chdir("/")  # keep no directory busy; requests carry their own working directory
    server = _Server(path, idle)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    inode = -1
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead helper's socket; we hold the lock, so no live one
        sock.bind(path)
        sock.listen(64)
        sock.settimeout(0.5)
        inode = os.stat(path).st_ino
        Path(path + ".pid").write_text(f"{os.getpid()}\n")
        # HTTP hooks are answered only once the socket and pid file exist: a prompt's
        # command that saw the port served can then stop this helper (--stop-daemon).
        if listen is not None:
            server.listen(listen)
        # Every worker accepts by itself: an event wakes exactly one thread, with
        # no hand-over between threads on the way (that would add latency).
        # Daemon threads: a worker stuck on an event (a file system that hangs) must not
        # keep a stopped helper alive; its caller gives up on its own timeout.
        workers = [
            threading.Thread(
                target=server.work, args=(sock,), name=f"loopwarden-hook-{n}", daemon=True
            )
            for n in range(_WORKERS)
        ]
        for worker in workers:
            worker.start()
        while not server.stopping.wait(1.0):
            if not any(worker.is_alive() for worker in workers):
                break  # every worker died (a bug): exit rather than keep a dead socket
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        if server.http is not None:
            server.http.stop(_STOP_GRACE_SECONDS)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        # No new connections once the path is gone; then answer those already
        # queued, so that no event reaches a helper that never answers it.
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        sock.setblocking(False)
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                break
            conn.setblocking(True)
            server.serve_conn(conn)
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.unlink(path + ".pid")
        server.ctx.close()
        os.close(lock_fd)
    return 0


class _Silent(LoopwardenError):
    """A helper accepted the connection but sent no greeting (frozen, or every worker busy)."""


def _control(env: Mapping[str, str], command: str) -> int | None:
    """Send a control command; the helper's pid, or None when none answers.

    Raises :class:`_Silent` when a helper listens but does not greet.
    """
    if not hasattr(socket, "AF_UNIX") or not hasattr(os, "getuid"):
        return None  # no helper on this platform
    path = socket_path(env)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HELLO_TIMEOUT)
        try:
            sock.connect(path)
        except OSError:
            return None
        try:
            greeting = sock.recv(1)
        except OSError:
            greeting = b""
        if greeting != HELLO:
            raise _Silent
        sock.settimeout(2.0)
        sock.sendall(f"{CONTROL}\0{command}".encode())
        sock.shutdown(socket.SHUT_WR)
        answer = _recv_all(sock)
    except OSError:
        return None
    finally:
        sock.close()
    code, _, pid = answer.partition(b"\0")
    try:
        return int(pid) if code == b"0" else None
    except ValueError:
        return None


def ping(env: Mapping[str, str]) -> int | None:
    """The pid of the running helper, or None (also for one that does not answer:
    see :func:`silent_helper`)."""
    try:
        return _control(env, "ping")
    except _Silent:
        return None


def silent_helper(env: Mapping[str, str]) -> int | None:
    """The pid of a helper that listens but does not answer (stopped with SIGSTOP, or
    all its workers stuck), from its pid file; None when there is none."""
    try:
        _control(env, "ping")
    except _Silent:
        return _pid_file(socket_path(env))
    return None


def _pid_file(path: str) -> int | None:
    """The pid in the helper's pid file, if that process is alive and is this helper."""
    try:
        pid = int(Path(path + ".pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if path.encode() in cmdline.split(b"\0") else None


def wait_for_start(env: Mapping[str, str], timeout: float = 5.0) -> int | None:
    """The helper's pid once it answers, if one is running or starting (its lock is
    taken); None at once when no helper holds the lock, or after ``timeout``."""
    import fcntl

    deadline = time.monotonic() + timeout
    while True:
        pid = ping(env)
        if pid is not None or time.monotonic() > deadline:
            return pid
        try:
            fd = os.open(socket_path(env) + ".lock", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            time.sleep(0.05)  # held: a helper is starting (the lock is released on exit)
            continue
        finally:
            os.close(fd)  # (closing also releases the lock if we took it)
        return None


def stop(env: Mapping[str, str], wait: float = _STOP_GRACE_SECONDS + 2.0) -> bool:
    """Ask the running helper to exit and wait until it has; one that does not (or that
    does not answer at all) is terminated (its socket removed), so no socket outlives a
    stop."""
    path = socket_path(env)
    if not os.path.exists(path):
        # A helper still starting (it holds the lock, its socket is not there yet) is
        # waited for, so that a stop right after a hook started one is not lost.
        wait_for_start(env)
    try:
        pid = _control(env, "stop")
    except _Silent:
        pid = _pid_file(path)
        if pid is None:
            return False
        wait = 0.0  # it cannot hear the request: terminate it now
    if pid is None:
        return False
    if _gone(pid, path, wait):
        return True
    import signal

    logger.warning("loopwarden: the hook helper (pid %d) did not stop; terminating it", pid)
    # SIGCONT after SIGTERM: a stopped helper gets to handle the SIGTERM (or dies of
    # the SIGKILL).
    for sig in (signal.SIGTERM, signal.SIGCONT, signal.SIGKILL):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
        if sig != signal.SIGTERM and _gone(pid, None, 2.0):
            break
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.unlink(path + ".pid")
    return True


def _gone(pid: int, path: str | None, wait: float) -> bool:
    """Wait until the helper's process has exited and (if given) its socket is gone."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except OSError:
            alive = True
        if not alive and (path is None or not os.path.exists(path)):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def spawn(env: Mapping[str, str], listen: ListenSpec | None = None) -> bool:
    """Start a helper in the background (detached, no inherited pipes). Best effort.

    The helper lock is taken here, before the helper starts, and handed to it: of
    many hooks that find no helper at once, exactly one starts a helper, and none
    does while one is running or still starting. ``listen`` goes with it too (the
    caller keeps its own copy, to close). False: no helper was started.
    """
    if not hasattr(os, "posix_spawn") or not hasattr(socket, "AF_UNIX"):
        return False
    import fcntl

    path = socket_path(env)
    if not _private_dir(runtime_dir(env)):
        return False
    try:
        lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    # Each descriptor the helper gets is first copied above the numbers it gets them
    # as, so that no copy overwrites another's source.
    passed: list[int] = []
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a helper runs, or another hook is starting one
        code = (
            "import sys; del sys.path[0]; from loopwarden.hooks.daemon import main; "
            "raise SystemExit(main(sys.argv[1:]))"
        )
        argv = [sys.executable, "-c", code, "--socket", path, "--idle", str(idle_seconds(env))]
        argv += ["--lock-fd", str(_LOCK_FD)]
        sources = [(lock_fd, _LOCK_FD)]
        if listen is not None:
            argv += ["--listen", ",".join(listen.fields())]
            sources.append((listen.sock.fileno(), _LISTEN_FD))
            check_fd = listen.check.fileno()
            if check_fd is not None:
                sources.append((check_fd, _CHECK_FD))
            # The key through a pipe: not on the command line, not in the environment.
            key_r, key_w = os.pipe()
            passed.append(key_r)
            os.write(key_w, f"{listen.token}\n{listen.proof}".encode())
            os.close(key_w)
            sources.append((key_r, _KEY_FD))
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        for source, target in sources:
            copy = fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, 10)
            passed.append(copy)
            actions.append((os.POSIX_SPAWN_DUP2, copy, target))
        try:
            os.posix_spawn(
                sys.executable,
                argv,
                dict(os.environ),
                file_actions=actions,
                setsid=True,  # not part of the agent's process group: survives the hook
            )
        except OSError:
            logger.warning("loopwarden hook: could not start the hook helper", exc_info=True)
            return False
        return True
    finally:
        for fd in passed:
            os.close(fd)
        os.close(lock_fd)


def _inherited(spec: str) -> ListenSpec:
    """The listening socket a starting hook handed over (``--listen``)."""
    port, uid, netns, kind = spec.split(",", 3)
    if kind not in ("netlink", "proc", "none"):
        raise ValueError(f"unknown peer check {kind!r}")
    check_kind: CheckKind = kind  # type: ignore[assignment]
    check = PeerCheck(check_kind, _CHECK_FD if check_kind != "none" else None)
    sock = socket.socket(fileno=_LISTEN_FD)
    os.set_inheritable(_LISTEN_FD, False)
    if check_kind != "none":
        os.set_inheritable(_CHECK_FD, False)
    with os.fdopen(_KEY_FD, "rb") as key:
        token, _, proof = key.read(4096).decode("utf-8").partition("\n")
    return ListenSpec(sock, check, int(port), int(uid), netns, token, proof)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopwarden-hook-helper")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_SECONDS)
    parser.add_argument("--lock-fd", type=int, default=None)
    parser.add_argument("--listen", default=None)
    args = parser.parse_args(argv)
    listen = _inherited(args.listen) if args.listen else None
    return serve(args.socket, args.idle, args.lock_fd, listen)
