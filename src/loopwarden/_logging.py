"""The library logger. It has a NullHandler, as libraries should: applications decide
where loopwarden's warnings go (``logging.getLogger("loopwarden")``)."""

from __future__ import annotations

import logging

logger = logging.getLogger("loopwarden")
logger.addHandler(logging.NullHandler())
