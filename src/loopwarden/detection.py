"""Deprecated: the detectors moved to :mod:`loopwarden.engine.detect`.

This alias is kept for one release; import ``Detection`` from ``loopwarden``.
"""

from __future__ import annotations

import warnings

from .engine.detect import *  # noqa: F403 - the whole old module, moved

warnings.warn(
    "loopwarden.detection is deprecated and will be removed in the next release; "
    "use loopwarden.Detection or loopwarden.engine.detect",
    DeprecationWarning,
    stacklevel=2,
)
