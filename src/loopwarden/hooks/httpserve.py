"""The hook helper's HTTP side: Claude Code's HTTP hooks, answered without a process.

Listening sockets are made by the session-start hook command in its own
network namespace (``hooks.httpstart``) and handed to the helper, each with
the :class:`~.peeruid.PeerCheck` of that namespace and the key requests must
carry. One thread accepts on all of them; each connection gets a thread of
its own, which reads a request, answers it with
:func:`loopwarden.hooks.runner.handle` (the same answers, from the same code,
as the hook command) and waits for the next one (Claude Code keeps its
connection open). So no request waits for another session's.

Bounds (docs/hooks.md): a request head of at most 16 KiB, a body of at most
:data:`MAX_BODY` (4 MiB; a larger one is refused with 413), 10 s to send a
whole request once it has begun, a connection idle for 5 minutes is closed,
at most :data:`MAX_CONNECTIONS` connections (the one idle longest is closed
for a new one; when none is idle, the new one is answered 503) and
:data:`MAX_LISTENERS` listening sockets (the one unused longest is closed).
Every refusal is an HTTP error, on which Claude Code goes on with the tool
call (the hook fails open).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import parse_qsl

from ..errors import LoopwardenError
from ._protocol import AGENTS, ENV_KEYS
from .httpkeys import (
    HEADER_CWD,
    HEADER_EXIT,
    HEADER_HELPER,
    HEADER_PROOF,
    HEADER_STDOUT,
    HEADER_TOKEN,
    HOOK_PATH,
    PING_PATH,
    RUN_PATH,
    env_header,
)
from .peeruid import PeerCheck

__all__ = [
    "MAX_BODY",
    "MAX_CONNECTIONS",
    "MAX_LISTENERS",
    "HttpFront",
    "ListenSpec",
    "Listener",
    "Request",
]

MAX_HEAD = 16 * 1024
MAX_BODY = 4 * 1024 * 1024
MAX_CONNECTIONS = 64
MAX_LISTENERS = 16
REQUEST_SECONDS = 10.0
IDLE_SECONDS = 300.0
_MAX_HEADERS = 100
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


class ListenSpec(NamedTuple):
    """A listening socket for HTTP hooks, made by a hook command to hand to the helper:
    its port, the user allowed to connect and the check that tells (both as seen from
    the network and user namespaces the socket was made in), that namespace, and the key
    requests must carry."""

    sock: socket.socket
    check: PeerCheck
    port: int
    uid: int
    netns: str
    token: str
    proof: str

    def fields(self) -> list[str]:
        """What goes with the descriptors, as text: port, uid, namespace, check kind (the
        key goes separately: never on a command line)."""
        return [str(self.port), str(self.uid), self.netns, self.check.kind]

    def close(self) -> None:
        """Close this process's copies (the helper has its own)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        self.check.close()


class Request(NamedTuple):
    """One parsed request."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    """Lower-case names; a header sent twice keeps its last value."""
    body: bytes
    close: bool
    """The client asked to close the connection after the answer (or speaks HTTP/1.0)."""


Answerer = Callable[
    [list[str], Mapping[str, str], str, bytes, bool], tuple[int, bytes, bytes] | None
]
"""(the hook's argv, its environment, its working directory or "", the event, whether the
caller can hand the event elsewhere) -> (exit code, stdout, stderr) of the hook command;
None: declined (the helper is outdated, and the caller can hand it elsewhere)."""
Reporter = Callable[[int, str], None]
"""(log level, message): what the helper writes to the hook log."""
_REPORT_EVERY = 60.0  # seconds between two log lines about the same kind of refusal


@dataclass(eq=False)
class Listener:
    """A listening socket handed to the helper, and what its requests must satisfy."""

    sock: socket.socket
    port: int
    netns: str
    uid: int
    """The user whose processes may connect (as the check's namespace numbers users)."""
    check: PeerCheck
    token: bytes
    proof: bytes
    """Sent to a client that waits for it (the shell hook): this is the user's helper."""
    used: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.check.close()


class _Refused(LoopwardenError):
    """The request cannot be answered: the status to send; the connection is closed."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


BeforeBody = Callable[[str, str, dict[str, str]], None]
"""(method, path, headers) of a request whose head has arrived: raises :class:`_Refused`
to refuse it before its body is read (and answers ``Expect: 100-continue``)."""


def _read_request(
    conn: socket.socket, buffer: bytearray, idle: float, before_body: BeforeBody
) -> Request | None:
    """The next request on ``conn`` (None: the client closed, or stayed idle ``idle`` s).

    ``buffer`` holds bytes already received after the previous request. Linear in the
    request's size: the head is searched from where the last search stopped.
    """
    conn.settimeout(idle)
    # Bytes of a request already here: it has begun, its time runs.
    deadline = time.monotonic() + REQUEST_SECONDS if buffer else None
    searched = 0
    while True:
        end = buffer.find(b"\r\n\r\n", max(0, searched - 3))
        if end >= 0:
            break
        if len(buffer) > MAX_HEAD:
            raise _Refused(431, "request head too large")
        searched = len(buffer)
        if deadline is not None:
            conn.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            if deadline is None:
                return None  # idle keep-alive connection
            raise _Refused(408, "request not received in time") from None
        if not chunk:
            if buffer.strip():
                raise _Refused(400, "connection closed inside a request")
            return None
        if deadline is None:
            deadline = time.monotonic() + REQUEST_SECONDS
        buffer += chunk
    if end > MAX_HEAD:
        raise _Refused(431, "request head too large")
    head = bytes(buffer[:end]).decode("latin-1")
    del buffer[: end + 4]
    lines = head.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, "malformed request line")
    method, target, version = parts
    if len(lines) > _MAX_HEADERS + 1:
        raise _Refused(431, "too many header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Refused(400, "malformed header field")
        key = name.lower()
        if key == "content-length" and key in headers:
            raise _Refused(400, "Content-Length sent twice")
        headers[key] = value.strip()
    if "transfer-encoding" in headers:
        raise _Refused(501, "only requests with a Content-Length are accepted")
    try:
        size = int(headers.get("content-length", "0"))
    except ValueError:
        raise _Refused(400, "malformed Content-Length") from None
    if size < 0:
        raise _Refused(400, "malformed Content-Length")
    if size > MAX_BODY:
        raise _Refused(413, f"request body larger than {MAX_BODY} bytes")
    path, _, query = target.partition("?")
    before_body(method, path, headers)
    if deadline is None:
        deadline = time.monotonic() + REQUEST_SECONDS
    while len(buffer) < size:
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = conn.recv(min(1 << 20, max(65536, size - len(buffer))))
        except TimeoutError:
            raise _Refused(408, "request body not received in time") from None
        if not chunk:
            raise _Refused(400, "connection closed inside a request body")
        buffer += chunk
    body = bytes(buffer[:size])
    del buffer[:size]
    connection = headers.get("connection", "").lower()
    close = (version == "HTTP/1.0" and connection != "keep-alive") or connection == "close"
    return Request(method, path, query, headers, body, close)


def _response(
    status: int, body: bytes, helper: str, close: bool, extra: Mapping[str, str] | None = None
) -> bytes:
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        f"{HEADER_HELPER}: {helper}",
        "Connection: close" if close else f"Keep-Alive: timeout={int(IDLE_SECONDS) - 5}",
        *(f"{name}: {value}" for name, value in (extra or {}).items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _path(value: str) -> str:
    """A header value (read as latin-1: byte for byte) as the file name its bytes spell
    (UTF-8, as ``os.fsdecode`` would read them)."""
    return value.encode("latin-1").decode("utf-8", "surrogateescape")


def _error(text: str) -> bytes:
    return json.dumps({"error": text}).encode()


def _last_answer(sock: socket.socket, data: bytes) -> None:
    """Send a last answer so that the client gets to read it: stop sending, then read
    what it still sends (at most 1 s and 1 MiB), so that closing is no reset that would
    destroy the answer on its way."""
    try:
        sock.settimeout(1.0)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 1.0
        drained = 0
        while drained < 1 << 20 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            drained += len(chunk)
    except OSError:
        pass


class _Conn:
    """One client connection, served by a thread of its own."""

    def __init__(self, sock: socket.socket, peer: tuple[str, int], listener: Listener) -> None:
        self.sock = sock
        self.peer = peer
        self.listener = listener
        self.busy = False
        self.since = time.monotonic()

    def shut(self) -> None:
        """Wake the thread (blocked in recv) and make it close the connection."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class HttpFront:
    """The listeners handed to the helper, and the threads that answer on them."""

    def __init__(
        self,
        answer: Answerer,
        helper: str,
        activity: Callable[[int], None],
        fallback_env: Mapping[str, str],
        report: Reporter,
    ) -> None:
        """``answer`` handles a hook event; ``helper`` is how this helper names itself;
        ``activity(+1/-1)`` is told when a request starts and ends (the helper's idle
        clock); ``fallback_env`` is used when a request carries no environment;
        ``report`` writes to the hook log."""
        self._answer = answer
        self._helper = helper
        self._activity = activity
        self._report = report
        self._reported: dict[str, float] = {}
        self._fallback = {k: v for k, v in fallback_env.items() if k in ENV_KEYS}
        self._lock = threading.Lock()
        self._listeners: dict[tuple[int, str], Listener] = {}
        self._pending_close: list[Listener] = []
        self._conns: set[_Conn] = set()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._accept_loop, name="loopwarden-http", daemon=True
        )
        self._thread.start()

    # -- listeners --------------------------------------------------------------------
    def add(self, listener: Listener) -> None:
        """Serve ``listener`` (replacing one on the same port in the same namespace)."""
        listener.sock.setblocking(False)
        with self._lock:
            old = self._listeners.pop((listener.port, listener.netns), None)
            self._listeners[(listener.port, listener.netns)] = listener
            dropped = [old] if old is not None else []
            while len(self._listeners) > MAX_LISTENERS:
                key = min(self._listeners, key=lambda k: self._listeners[k].used)
                dropped.append(self._listeners.pop(key))
            self._pending_close += dropped
        self._wake()
        self._report(
            logging.INFO,
            f"loopwarden hook helper: serving HTTP hooks on 127.0.0.1:{listener.port} "
            f"(network namespace {listener.netns or '?'}, peer check: {listener.check.kind})",
        )

    def _refusal(self, kind: str, message: str) -> None:
        """Log a refusal, at most once a minute per kind (a misconfigured agent would
        otherwise write a line per tool call)."""
        now = time.monotonic()
        with self._lock:
            if now - self._reported.get(kind, -_REPORT_EVERY) < _REPORT_EVERY:
                return
            self._reported[kind] = now
        self._report(logging.WARNING, message)

    def set_token(self, port: int, token: bytes, proof: bytes) -> None:
        """A new key for every listener on ``port`` (the user's key file changed)."""
        with self._lock:
            for listener in self._listeners.values():
                if listener.port == port:
                    listener.token = token
                    listener.proof = proof

    def ports(self) -> list[int]:
        with self._lock:
            return sorted({port for port, _ in self._listeners})

    def _wake(self) -> None:
        """Have the accepting thread pick up the listeners as they are now."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _sync(self) -> None:
        """(accepting thread) Register the current listeners; close the dropped ones."""
        with self._lock:
            wanted = {id(lst.sock): lst for lst in self._listeners.values()}
            dropped, self._pending_close = self._pending_close, []
        for key in list(self._selector.get_map().values()):
            if key.data is not None and id(key.fileobj) not in wanted:
                self._selector.unregister(key.fileobj)
        registered = {id(k.fileobj) for k in self._selector.get_map().values()}
        for ident, listener in wanted.items():
            if ident not in registered:
                self._selector.register(listener.sock, selectors.EVENT_READ, listener)
        for listener in dropped:
            listener.close()

    # -- accepting ----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                events = self._selector.select(timeout=1.0)
            except OSError:
                time.sleep(0.05)
                continue
            for key, _ in events:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    self._sync()
                    continue
                listener: Listener = key.data
                try:
                    sock, peer = listener.sock.accept()
                except OSError:
                    continue
                listener.used = time.monotonic()
                self._admit(sock, peer, listener)
        with self._lock:
            listeners = list(self._listeners.values())
            self._listeners.clear()
        for listener in listeners:
            listener.close()
        self._selector.close()

    def _admit(self, sock: socket.socket, peer: tuple[str, int], listener: Listener) -> None:
        sock.setblocking(True)
        with contextlib.suppress(OSError):  # answers go out at once, not after an ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, peer, listener)
        with self._lock:
            if len(self._conns) >= MAX_CONNECTIONS:
                idle = [c for c in self._conns if not c.busy]
                if not idle:
                    refuse = True
                else:
                    refuse = False
                    min(idle, key=lambda c: c.since).shut()
            else:
                refuse = False
            if not refuse:
                self._conns.add(conn)
        if refuse:
            self._refusal(
                "busy",
                f"loopwarden hook helper: {MAX_CONNECTIONS} HTTP connections busy; one more "
                "refused (503)",
            )
            self._send_and_close(sock, 503, "too many connections")
            return
        thread = threading.Thread(
            target=self._serve, args=(conn,), name="loopwarden-http-conn", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: refuse rather than stall
            with self._lock:
                self._conns.discard(conn)
            self._send_and_close(sock, 503, "no thread available")

    def _send_and_close(self, sock: socket.socket, status: int, text: str) -> None:
        try:
            sock.settimeout(1.0)
            sock.sendall(_response(status, _error(text), self._helper, True))
        except OSError:
            pass
        finally:
            sock.close()

    # -- one connection -----------------------------------------------------------------
    def _serve(self, conn: _Conn) -> None:
        sock, listener = conn.sock, conn.listener
        try:
            if not self._peer_allowed(conn):
                _last_answer(sock, _response(403, _error("forbidden"), self._helper, True))
                return
            buffer = bytearray()
            check = self._before_body(sock, listener)
            while not self._stopping.is_set():
                try:
                    request = _read_request(sock, buffer, IDLE_SECONDS, check)
                except _Refused as refused:
                    if refused.status >= 400 and refused.status not in (401, 403):
                        self._refusal(
                            f"malformed {refused.status}",
                            f"loopwarden hook helper: HTTP request refused ({refused.status}): "
                            f"{refused}",
                        )
                    answer = _response(refused.status, _error(str(refused)), self._helper, True)
                    _last_answer(sock, answer)
                    return
                if request is None:
                    return
                conn.busy = True
                self._activity(1)
                try:
                    status, body, extra = self._route(request)
                finally:
                    self._activity(-1)
                close = request.close or self._stopping.is_set()
                sock.settimeout(REQUEST_SECONDS)
                sock.sendall(_response(status, body, self._helper, close, extra))
                conn.busy = False
                conn.since = time.monotonic()
                if close:
                    return
        except OSError:
            pass  # the client went away, or the helper is stopping
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                sock.close()

    def _peer_allowed(self, conn: _Conn) -> bool:
        """Whether the connection comes from a process of the user (where we can tell)."""
        listener = conn.listener
        if listener.check.kind == "none":
            return True  # no way to know here: the key alone decides
        uid = listener.check.uid(conn.peer, ("127.0.0.1", listener.port))
        if uid == listener.uid:
            return True
        who = "an unknown user" if uid is None else f"uid {uid}"
        self._refusal(
            f"peer {listener.port}",
            f"loopwarden hook helper: HTTP connection from {who} to 127.0.0.1:{listener.port} "
            f"refused (403: only uid {listener.uid} may connect)",
        )
        return False

    def _before_body(self, sock: socket.socket, listener: Listener) -> BeforeBody:
        """Refuse a request by its head (key, Host, Origin) before its body is read; to a
        client that waits for it (``Expect: 100-continue``, the shell hook), say go on, with
        the proof that this is the helper and not a program that took the port."""

        def check(method: str, path: str, headers: dict[str, str]) -> None:
            if "origin" in headers:  # a web page: Claude Code never sends one
                raise _Refused(403, "requests from web pages are refused")
            host = headers.get("host", "")
            if host not in (f"127.0.0.1:{listener.port}", f"localhost:{listener.port}"):
                raise _Refused(403, "unexpected Host header")  # DNS rebinding
            token = headers.get(HEADER_TOKEN.lower(), "").encode("utf-8", "replace")
            if not hmac.compare_digest(token, listener.token):
                self._refusal(
                    f"key {listener.port}",
                    f"loopwarden hook helper: HTTP request on 127.0.0.1:{listener.port} without "
                    "the right key refused (401); run 'loopwarden doctor'",
                )
                raise _Refused(401, "missing or wrong key")
            if headers.get("expect", "").lower() == "100-continue":
                proof = listener.proof.decode("ascii", "replace")
                sock.settimeout(REQUEST_SECONDS)
                sock.sendall(f"HTTP/1.1 100 Continue\r\n{HEADER_PROOF}: {proof}\r\n\r\n".encode())

        return check

    def _route(self, request: Request) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, more headers) for an authorised request."""
        if request.path == PING_PATH:
            ping = {"helper": self._helper, "pid": os.getpid()}
            return 200, json.dumps(ping).encode(), {}
        if request.path.startswith(HOOK_PATH):
            agent, relay = request.path[len(HOOK_PATH) :], False
        elif request.path.startswith(RUN_PATH):
            agent, relay = request.path[len(RUN_PATH) :], True
        else:
            return 404, _error("no such path"), {}
        if agent not in AGENTS:
            return 404, _error("no such agent"), {}
        if request.method != "POST":
            return 405, _error("hook events are POSTed"), {}
        args = [v for k, v in parse_qsl(request.query, keep_blank_values=True) if k == "arg"]
        env = self._environment(request.headers)
        cwd = _path(request.headers.get(HEADER_CWD.lower(), ""))
        cwd = cwd if relay and os.path.isabs(cwd) else ""
        done = self._answer([agent, *args], env, cwd, request.body, relay)
        if done is None:  # outdated: the shell hook hands the event to the hook command
            return 503, _error("the helper is outdated"), {}
        code, out, err = done
        if relay:
            # The hook command's whole answer: exit code, stdout, then stderr.
            headers = {HEADER_EXIT: str(code), HEADER_STDOUT: str(len(out))}
            return 200, out + err, headers
        if code != 0:
            return 400, err, {}
        return 200, out, {}

    def _environment(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The agent's environment, as its request reports it; the helper's own when the
        request says nothing (Claude Code's settings let no variable through)."""
        found = {key: _path(headers.get(env_header(key).lower(), "")) for key in ENV_KEYS}
        if not found.get("HOME"):
            return dict(self._fallback)
        return {key: value for key, value in found.items() if value}

    # -- stopping -----------------------------------------------------------------------
    def stop(self, grace: float) -> None:
        """Close the listeners and idle connections; wait up to ``grace`` s for requests
        in progress, then close what is left."""
        self._stopping.set()
        self._wake()
        self._thread.join(2.0)
        deadline = time.monotonic() + grace
        while True:
            with self._lock:
                conns = list(self._conns)
            for conn in conns:
                if not conn.busy:
                    conn.shut()
            if not any(c.busy for c in conns) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for conn in conns:
            conn.shut()
        self._wake_r.close()
        self._wake_w.close()
