"""Deprecated: ``RunState`` moved to :mod:`loopwarden.engine.state`.

This alias is kept for one release.
"""

from __future__ import annotations

import warnings

from .engine.state import RunState, Stop

__all__ = ["RunState", "Stop"]

warnings.warn(
    "loopwarden.state is deprecated and will be removed in the next release; "
    "use loopwarden.engine.state",
    DeprecationWarning,
    stacklevel=2,
)
