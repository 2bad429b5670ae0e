"""The library logger. It has a NullHandler, as libraries should: applications decide
where loopwarden's warnings go (``logging.getLogger("loopwarden")``)."""

from __future__ import annotations

import logging

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .engine.compaction import LogLine

logger = logging.getLogger("loopwarden")
logger.addHandler(logging.NullHandler())


def write_line(line: LogLine) -> None:
    """Write a line the engine returned instead of logging it."""
    logger.log(line.level, line.message, *line.args)
