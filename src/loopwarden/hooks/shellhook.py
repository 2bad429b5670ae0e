"""The shell hook: Codex CLI's and Gemini CLI's hook command without a Python start.

Every tool call of those agents starts hook processes (they have no HTTP
hooks), and starting Python is most of what such a process costs. So
``loopwarden install codex`` (and ``gemini``) writes, where bash can open
TCP connections (``/dev/tcp``), the command::

    /usr/bin/bash .../loopwarden/hooks/shellhook.sh 4 PYTHON -S -c '...' codex [OPTIONS]

``shellhook.sh`` sends the event to the hook helper over its loopback HTTP
port (:mod:`.httpserve`, the port Claude Code's HTTP hooks use; port and key
from the user's key file, :mod:`.httpkeys`) and prints the helper's answer:
the hook command's own stdout, stderr and exit code, from the same code. It
sends the event only after the helper has shown the key file's proof, so a
program that took the port while no helper ran gets no event. When anything
is not as expected (no helper, no key file, a frozen helper, another program
on the port, an upgrade) it runs the Python hook command (the ``4`` words after
the count) with ``--http-port auto``, which answers the event as before and
sets the port up for the next events.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

__all__ = ["SCRIPT", "bash_path", "shell_command"]

SCRIPT = Path(__file__).with_name("shellhook.sh")
AGENTS = ("codex", "gemini")
"""The agents whose hook command is the shell hook (Claude Code has HTTP hooks)."""

_checked: dict[str, bool] = {}


def bash_path() -> str | None:
    """A bash that can open TCP connections (``/dev/tcp``), or None."""
    if os.name != "posix":
        return None
    found = shutil.which("bash")
    if found is None:
        return None
    found = os.path.realpath(found)
    if found not in _checked:
        _checked[found] = _opens_tcp(found)
    return found if _checked[found] else None


def _opens_tcp(bash: str) -> bool:
    """Whether ``bash`` connects to a listening loopback port through ``/dev/tcp``
    (a build may leave it out)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        try:
            done = subprocess.run(
                [bash, "-c", f'exec 3<>"/dev/tcp/127.0.0.1/{port}" && echo ok'],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0 and done.stdout.strip() == b"ok"


def shell_command(python: list[str], hook: list[str]) -> str | None:
    """The shell hook command around the Python hook command ``python`` + ``hook`` (the
    hook's own arguments: AGENT [OPTIONS]); None where bash cannot run it."""
    bash = bash_path()
    if bash is None or not SCRIPT.is_file():
        return None
    return shlex.join([bash, str(SCRIPT), str(len(python)), *python, *hook])
