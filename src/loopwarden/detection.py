"""Deprecated: the detectors moved to :mod:`loopwarden.engine.detect`.

This alias is kept for one release; import ``Detection`` from ``loopwarden``.
"""

from __future__ import annotations

import warnings

from .engine.detect import (
    GENERIC_REPEAT,
    GLOBAL_CIRCUIT_BREAKER,
    KNOWN_POLL_NO_PROGRESS,
    PING_PONG,
    UNKNOWN_TOOL_REPEAT,
    Detection,
    detect_in_window,
)

__all__ = [
    "GENERIC_REPEAT",
    "GLOBAL_CIRCUIT_BREAKER",
    "KNOWN_POLL_NO_PROGRESS",
    "PING_PONG",
    "UNKNOWN_TOOL_REPEAT",
    "Detection",
    "detect_in_window",
]

warnings.warn(
    "loopwarden.detection is deprecated and will be removed in the next release; "
    "use loopwarden.Detection or loopwarden.engine.detect",
    DeprecationWarning,
    stacklevel=2,
)
