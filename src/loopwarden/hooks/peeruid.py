"""Which user a loopback TCP connection comes from (Linux).

A Unix socket tells its server the peer's uid; a TCP connection does not,
even on loopback. On Linux the kernel still knows the owner of the client's
socket, and two interfaces tell it: the ``sock_diag`` netlink family (one
exact lookup of the connection's four-tuple) and ``/proc/net/tcp`` (every
socket of the network namespace, one per line, with its owner's uid).

Both answer for the network namespace (and in the user namespace) of the
process that opened them, not of the one that asks: a :class:`PeerCheck` is
made by the process that makes the listening socket, in the same namespaces,
and handed to the helper with it (see ``hooks.httpstart``). A listener made
in another network namespace (a sandbox) is checked in that namespace.

Elsewhere (no ``/proc``, no netlink) :meth:`PeerCheck.uid` answers None and
only the key in the request protects the helper.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from typing import Literal

__all__ = ["CheckKind", "PeerCheck"]

CheckKind = Literal["netlink", "proc", "none"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NL_HEADER = struct.Struct("=IHHII")
# inet_diag_msg: family, state, timer, retrans, the socket id (48 bytes), expires,
# rqueue, wqueue, then the uid this module is after.
_UID_OFFSET = _NL_HEADER.size + 4 + 48 + 12
_NO_COOKIE = 0xFFFFFFFF


def _hex_addr(ip: str) -> str:
    """An IPv4 address as ``/proc/net/tcp`` writes it (the 32-bit word in host order)."""
    return f"{struct.unpack('=I', socket.inet_aton(ip))[0]:08X}"


class PeerCheck:
    """Finds the uid owning the client end of a connection to a listener of ours."""

    def __init__(self, kind: CheckKind, fd: int | None) -> None:
        self.kind = kind
        self._fd = fd
        self._sock: socket.socket | None = None
        if kind == "netlink" and fd is not None:
            self._sock = socket.socket(fileno=fd)
            self._sock.settimeout(1.0)
        self._lock = threading.Lock()
        self._seq = 0

    @classmethod
    def create(cls) -> PeerCheck:
        """A check in this process's namespaces: netlink if it answers, else /proc."""
        family = getattr(socket, "AF_NETLINK", None)
        if family is not None:
            try:
                sock = socket.socket(family, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
            except OSError:
                pass
            else:
                check = cls("netlink", sock.detach())
                if check._usable():
                    return check
                check.close()
        try:
            fd = os.open("/proc/self/net/tcp", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return cls("none", None)
        return cls("proc", fd)

    def _usable(self) -> bool:
        """Whether the kernel answers sock_diag lookups (the module may be missing):
        a lookup of a connection that does not exist must say "no such socket"."""
        try:
            return self._netlink("127.0.0.1", 1, "127.0.0.1", 1) == -1
        except OSError:
            return False

    def fileno(self) -> int | None:
        """The descriptor to hand to another process (None for ``none``)."""
        return self._sock.fileno() if self._sock is not None else self._fd

    def uid(self, peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        """The uid owning the socket at ``peer`` connected to ``local``; None when it
        cannot be found out (no way to ask, or the kernel does not know the socket)."""
        if self.kind == "none":
            return None
        with self._lock:
            try:
                if self.kind == "netlink":
                    found = self._netlink(peer[0], peer[1], local[0], local[1])
                    return None if found < 0 else found
                return self._proc(peer, local)
            except (OSError, ValueError, struct.error):
                return None

    def _netlink(self, src: str, sport: int, dst: str, dport: int) -> int:
        """The uid of the TCP socket ``src:sport -> dst:dport``; -1: no such socket."""
        if self._sock is None:
            raise OSError("closed")
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        sockid = (
            struct.pack("!HH", sport, dport)
            + socket.inet_aton(src)
            + bytes(12)
            + socket.inet_aton(dst)
            + bytes(12)
            + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
        )
        request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
        request += sockid
        header = _NL_HEADER.pack(
            _NL_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, self._seq, 0
        )
        self._sock.send(header + request)
        while True:
            data = self._sock.recv(8192)
            _, kind, _, seq, _ = _NL_HEADER.unpack_from(data)
            if seq != self._seq:
                continue  # the answer to an earlier lookup that timed out
            if kind == _NLMSG_ERROR:
                (error,) = struct.unpack_from("=i", data, _NL_HEADER.size)
                if error == 0:
                    continue  # an acknowledgement; the answer follows
                return -1
            (uid,) = struct.unpack_from("=I", data, _UID_OFFSET)
            return int(uid)

    def _proc(self, peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        if self._fd is None:
            return None
        want_local = f"{_hex_addr(peer[0])}:{peer[1]:04X}"
        want_remote = f"{_hex_addr(local[0])}:{local[1]:04X}"
        os.lseek(self._fd, 0, os.SEEK_SET)  # a fresh listing from the start
        chunks: list[bytes] = []
        while chunk := os.read(self._fd, 1 << 16):
            chunks.append(chunk)
        for line in b"".join(chunks).decode("ascii", "replace").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 7 and fields[1] == want_local and fields[2] == want_remote:
                return int(fields[7])
        return None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        elif self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
