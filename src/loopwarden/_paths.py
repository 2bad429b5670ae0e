"""Where loopwarden keeps its files by default (no imports beyond the standard library's
cheapest, so that hooks can use it at start-up)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def data_dir(env: Mapping[str, str]) -> Path:
    """loopwarden's data directory: ``$XDG_DATA_HOME/loopwarden``, else
    ``~/.local/share/loopwarden``; ``~/Library/Application Support/loopwarden`` on macOS
    and ``%LOCALAPPDATA%\\loopwarden`` on Windows."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    xdg = env.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        base = Path(xdg)
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    else:
        base = home / ".local" / "share"
    return base / "loopwarden"
