"""Deprecated: ``ToolCallHistory`` moved to :mod:`loopwarden.engine.history`.

This alias is kept for one release; use ``loopwarden.ToolCallHistory``.
"""

from __future__ import annotations

import warnings

from .engine.history import Record, ToolCallHistory, normalize_run_id

__all__ = ["Record", "ToolCallHistory", "normalize_run_id"]

warnings.warn(
    "loopwarden.history is deprecated and will be removed in the next release; "
    "use loopwarden.ToolCallHistory or loopwarden.engine.history",
    DeprecationWarning,
    stacklevel=2,
)
