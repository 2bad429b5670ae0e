"""``loopwarden hook AGENT``: the console-script form of the hook (see loopwarden.hooks).

The fast path itself lives in :mod:`loopwarden.hooks._protocol`, which the
command ``loopwarden install`` writes (``python -S -c ...``) runs without this
module.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

from ..hooks._protocol import AGENTS, ENV_KEYS, PROTOCOL, main, runtime_dir, socket_path
from ..hooks._protocol import forward as _forward

# Re-exported: these lived here before hooks._protocol.
__all__ = ["AGENTS", "ENV_KEYS", "PROTOCOL", "_forward", "main", "runtime_dir", "socket_path"]
