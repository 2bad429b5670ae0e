"""Deprecated: the post-compaction guard moved to :mod:`loopwarden.engine.compaction`.

This alias is kept for one release; use ``loopwarden.PostCompactionGuard``.
"""

from __future__ import annotations

import warnings

from .engine.compaction import COMPACTION_LOOP_PERSISTED, CompactionVerdict, PostCompactionGuard
from .engine.messages import compaction_abort as compaction_message

__all__ = [
    "COMPACTION_LOOP_PERSISTED",
    "CompactionVerdict",
    "PostCompactionGuard",
    "compaction_message",
]

warnings.warn(
    "loopwarden.compaction is deprecated and will be removed in the next release; "
    "use loopwarden.PostCompactionGuard or loopwarden.engine.compaction",
    DeprecationWarning,
    stacklevel=2,
)
