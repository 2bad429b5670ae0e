"""What the hook process and the hook helper agree on (stdlib only, no other import).

Both sides import this module: ``loopwarden.cli.hook`` (the per-call entry
point, which must stay cheap) and :mod:`loopwarden.hooks.daemon`. Keeping it
here, below both, is what stops ``hooks`` from importing ``cli``.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every hook call
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["AGENTS", "ENV_KEYS", "PROTOCOL", "runtime_dir", "socket_path"]

AGENTS = ("claude-code", "codex", "gemini")
"""The coding agents ``loopwarden hook`` and ``install`` accept (adapters in ``hooks.agents``)."""

PROTOCOL = "LWH1"
"""Wire version of a forwarded event; part of the socket name, so versions never meet."""

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


def runtime_dir(env: "Mapping[str, str]") -> str:
    """The private directory of the helper's socket."""
    d = env.get("LOOPWARDEN_RUNTIME_DIR")
    if d:
        return d
    d = env.get("XDG_RUNTIME_DIR")
    return d + "/loopwarden" if d else f"/tmp/loopwarden-{os.getuid()}"


def socket_path(env: "Mapping[str, str]") -> str:
    """The helper's socket: one per environment and installation."""
    # FNV-1a, as hashlib costs an import. The installation is the loopwarden
    # package directory (this file's grandparent), as it was in loopwarden.cli.
    h = 0xCBF29CE484222325
    key = f"{sys.prefix}\0{os.path.dirname(os.path.dirname(__file__))}\0{PROTOCOL}"
    for byte in key.encode("utf-8", "surrogateescape"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{runtime_dir(env)}/hook-{h:016x}.sock"
