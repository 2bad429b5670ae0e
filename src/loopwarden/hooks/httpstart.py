"""Make sure Claude Code's HTTP hooks are answered: run by the hook command that
``install`` writes for ``SessionStart`` and ``UserPromptSubmit`` (``--http-port``).

Claude Code cannot run an HTTP hook at session start, and an HTTP hook cannot
start anything: when nothing answers, Claude Code goes on without it. So the
command hooks of a session's start and of each prompt, after answering their
own event, ask ``127.0.0.1:PORT`` who answers there (in their own network
namespace, which is the agent's):

* this installation's helper, with the user's key: nothing to do (one local
  round trip);
* nothing: the hook binds the port, makes the :class:`~.peeruid.PeerCheck` of
  this namespace and hands both to the helper over its Unix socket (or starts
  a helper with them), so the port is served before Claude Code's first tool
  call, and whichever network namespace the helper itself runs in;
* the helper with an old key: it gets the key from the user's key file;
* anything else (another program, another loopwarden installation): the
  hook says so to the user (``systemMessage``) and in the hook log; Claude Code
  then goes on without loopwarden's checks.

No engine import here: this runs in the hook process.
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Mapping

from ._protocol import CONTROL, HELLO, HELLO_TIMEOUT, socket_path
from .httpkeys import HttpKeys, KeysError, helper_name, load_keys, probe
from .httpserve import ListenSpec
from .peeruid import PeerCheck

__all__ = ["after_event", "http_port_arg", "netns", "serve_http"]

_TRIES_SECONDS = 5.0


def http_port_arg(argv: list[str]) -> int | None:
    """The ``--http-port`` of a hook command line (0: ``auto``; None: absent or not a port)."""
    for index, word in enumerate(argv):
        value = None
        if word == "--http-port" and index + 1 < len(argv):
            value = argv[index + 1]
        elif word.startswith("--http-port="):
            value = word.partition("=")[2]
        if value is not None:
            if value == "auto":
                return 0
            try:
                port = int(value)
            except ValueError:
                return None
            return port if 0 < port < 65536 else None
    return None


def netns() -> str:
    """This process's network namespace ("" where it cannot be told)."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def _daemon_allowed(env: Mapping[str, str], argv: list[str]) -> bool:
    if "--no-daemon" in argv or not hasattr(socket, "AF_UNIX"):
        return False
    return env.get("LOOPWARDEN_HOOK_DAEMON", "1").lower() not in ("0", "off", "no", "false")


def _private(directory: str) -> bool:
    """The helper's runtime directory is ours alone (see ``_protocol.forward``)."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _register(env: Mapping[str, str], keys: HttpKeys, port: int, spec: ListenSpec | None) -> bool:
    """Hand ``spec`` (None: only the key file's keys for ``port``) to the running helper."""
    path = socket_path(env)
    if not _private(os.path.dirname(path)):
        return False
    fields = [CONTROL, "listen", str(port), str(os.getuid()), netns(), "none"]
    fields += [keys.token, keys.proof]
    fds: list[int] = []
    if spec is not None:
        fields[2:6] = spec.fields()
        fds.append(spec.sock.fileno())
        check_fd = spec.check.fileno()
        if check_fd is not None:
            fds.append(check_fd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HELLO_TIMEOUT)
        sock.connect(path)
        if sock.recv(1) != HELLO:
            return False
        sock.settimeout(5.0)
        message = "\0".join(fields).encode("utf-8", "surrogateescape")
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        sock.sendmsg([message], ancillary)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    except OSError:
        return False
    finally:
        sock.close()
    return answer.startswith(b"0\0")


def _bind(port: int) -> socket.socket | None:
    """A listening socket on 127.0.0.1:port; None when something else holds the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise
    return sock


def _hand_over(
    env: Mapping[str, str], keys: HttpKeys, port: int, sock: socket.socket, running: bool
) -> str | None:
    """Give the listening socket to the helper (starting one if none runs)."""
    spec = ListenSpec(sock, PeerCheck.create(), port, os.getuid(), netns(), keys.token, keys.proof)
    try:
        if running and _register(env, keys, port, spec):
            return None
        if "site" not in sys.modules:  # the fast path (python -S): the helper needs site
            import site

            site.main()
        from .daemon import spawn, wait_for_start

        for _ in range(2):
            if spawn(env, spec):
                return None
            # A helper runs, is starting, or is exiting: give it the socket once it answers.
            if wait_for_start(env) is not None and _register(env, keys, port, spec):
                return None
        return "the hook helper could not be started"
    finally:
        spec.close()  # the helper has its own copies


def serve_http(port: int, env: Mapping[str, str], argv: list[str], *, running: bool) -> str | None:
    """Make sure this installation's helper answers HTTP hooks on ``127.0.0.1:port`` here
    (0: the port in the user's key file).

    ``running``: a helper just answered this hook's event. Returns what the user must be
    told when the hooks cannot be answered (None: they are).
    """
    where = f"127.0.0.1:{port or 'PORT'}"
    if not _daemon_allowed(env, argv):
        return (
            f"loopwarden: the hook helper is switched off (LOOPWARDEN_HOOK_DAEMON or "
            f"--no-daemon), so nothing answers Claude Code's HTTP hooks on {where} and tool "
            "calls are not checked; use command hooks instead: "
            "'loopwarden install claude-code --command'"
        )
    try:
        keys = load_keys(env)
    except KeysError as exc:
        return f"loopwarden: {exc}; tool calls are not checked"
    if keys is None:
        if port == 0:
            return None  # the shell hook had nothing to go on: it will run this command again
        return (
            "loopwarden: no HTTP hook key found; run 'loopwarden install claude-code' again "
            "(tool calls are not checked until then)"
        )
    port = port or keys.port
    where = f"127.0.0.1:{port}"
    own = helper_name(socket_path(env))
    deadline = time.monotonic() + _TRIES_SECONDS
    while True:
        found = probe(port, keys.token)
        if found.kind == "served" and found.helper == own:
            return None
        if found.kind == "refused" and found.helper == own:
            # The user's key file changed since the helper got it (a new install).
            if _register(env, keys, port, None):
                return None
            return f"loopwarden: the hook helper on {where} could not be given the new key"
        if found.kind in ("served", "refused"):
            return (
                f"loopwarden: another loopwarden installation ({found.helper}) answers on "
                f"{where}, not this one; stop it with its 'loopwarden hook --stop-daemon', or "
                "run 'loopwarden install claude-code' from the installation you want"
            )
        if found.kind == "closed":
            sock = _bind(port)
            if sock is not None:
                return _hand_over(env, keys, port, sock, running)
            # Taken between the probe and the bind (another session starting): ask again.
        elif found.kind == "silent":
            # (probe waited: a helper still starting has answered by then)
            return (
                f"loopwarden: something listens on {where} but does not answer (a hook "
                "helper that is stopped or stuck?); tool calls are checked more slowly "
                "until it answers or is stopped ('loopwarden hook --stop-daemon')"
            )
        else:
            what = found.detail or "no answer"
            return (
                f"loopwarden: port {port} on 127.0.0.1 is used by another program ({what}), "
                "so loopwarden cannot answer Claude Code's HTTP hooks and tool calls are not "
                "checked; run 'loopwarden install claude-code' to move to a free port"
            )
        if time.monotonic() > deadline:
            return f"loopwarden: could not take port {port} on 127.0.0.1 for the HTTP hooks"
        time.sleep(0.05)


def _with_message(answer: bytes, message: str) -> bytes:
    """The hook's JSON answer with ``message`` for the user (``systemMessage``)."""
    try:
        data = json.loads(answer or b"{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    old = data.get("systemMessage")
    data["systemMessage"] = f"{old}\n{message}" if isinstance(old, str) and old else message
    return json.dumps(data).encode()


def after_event(
    argv: list[str], env: Mapping[str, str], answer: bytes, *, running: bool
) -> tuple[bytes, str]:
    """The hook's answer, with a message for the user when its HTTP hooks cannot be
    answered (also returned, for stderr and the hook log; "" when all is well)."""
    port = http_port_arg(argv)
    if port is None:
        return answer, ""
    agent = argv[0] if argv else ""
    if port == 0 and not _daemon_allowed(env, argv):
        return answer, ""  # the shell hook's fallback with the helper off: nothing to set up
    try:
        message = serve_http(port, env, argv, running=running)
    except Exception as exc:  # never break the agent over this
        message = f"loopwarden: could not set up the HTTP hooks on port {port}: {exc}"
    if not message:
        return answer, ""
    with contextlib.suppress(Exception):
        import logging

        from .hooklog import write_log

        write_log(env, [(logging.ERROR, message, False)], f"hook {agent}")
    if agent != "claude-code":
        # Codex and Gemini: the shell hook goes on through the hook command; say why on
        # stderr (their answers have no message for the user).
        return answer, message + "\n"
    return _with_message(answer, message), message + "\n"


def main_after_forward(
    argv: list[str], answer: tuple[int, bytes, bytes]
) -> tuple[int, bytes, bytes]:
    """(the fast path) A forwarded event's answer, after making sure of the HTTP hooks."""
    out, err = after_event(argv, os.environ, answer[1], running=True)
    return answer[0], out, answer[2] + err.encode("utf-8", "replace")
