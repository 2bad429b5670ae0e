"""A TCP proxy for fault tests: passes traffic, stalls it (no bytes move), or drops connections."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:<port> to a server; ``mode`` is ``pass``, ``stall`` or ``drop``."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.accepted = 0
        self._mode = "pass"
        self._moved = threading.Condition()
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def set_mode(self, mode: str) -> None:
        with self._moved:
            self._mode = mode
            self._moved.notify_all()
            if mode == "drop":
                socks, self._socks = self._socks, []
            else:
                socks = []
        for sock in socks:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self._mode == "drop":
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._moved:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._moved:
                    # Stalled: hold the bytes until the mode changes (or forever).
                    self._moved.wait_for(lambda: self._mode != "stall" or self._closed)
                    if self._mode == "drop" or self._closed:
                        break
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)

    def close(self) -> None:
        self._closed = True
        self.set_mode("drop")
        _close(self.listener)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
