"""The library logger. It has a NullHandler, as libraries should: applications decide
where loopwarden's warnings go (``logging.getLogger("loopwarden")``)."""

from __future__ import annotations

import logging

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .engine.compaction import LogLine

logger = logging.getLogger("loopwarden")
logger.addHandler(logging.NullHandler())


def _already_reported(exc: BaseException | None) -> bool:
    """``exc`` (or what it wraps) is a failure its source has logged once already, such
    as every call of a store outage after the outage's one warning."""
    for _ in range(3):
        if exc is None:
            return False
        if getattr(exc, "reported", False) is True:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class _QuietRepeats(logging.Filter):
    """Whoever logs a failure that was already reported (the guard's per-call "internal
    error", a run's cleanup...) logs it at DEBUG: one warning per outage, not one record,
    with a traceback, per tool call.

    The level is decided here as if the record had been logged at DEBUG: dropped unless
    the logger is enabled for DEBUG (relabelling alone would reach every handler that
    has no level of its own, such as ``logging.basicConfig``'s)."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if record.levelno > logging.DEBUG and info and _already_reported(info[1]):
            if not logger.isEnabledFor(logging.DEBUG):
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


logger.addFilter(_QuietRepeats())


def write_line(line: LogLine) -> None:
    """Write a line the engine returned instead of logging it."""
    logger.log(line.level, line.message, *line.args)
