"""The hook's log: each request's ``loopwarden`` log records, to a file and to stderr.

A hook event is answered in the hook process or in a helper thread; either
way the log records it causes are collected for that request alone, appended
to the hook log (``$LOOPWARDEN_LOG`` or ``hook.log`` next to the state), and
problems (not guard events, which are for the model) are summed up in one
line each for stderr, which the agents show the user.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping

from .._logging import logger
from .options import log_path

__all__ = ["Capture", "start_capture", "write_log"]

_LOG_MAX_BYTES = 1024 * 1024

Line = tuple[int, str, bool]
"""(level, formatted text, is a guard event)"""


class Capture(logging.Handler):
    """Collects the ``loopwarden`` log records of the current thread's request."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.local = threading.local()
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        lines: list[Line] | None = getattr(self.local, "lines", None)
        if lines is not None:
            try:
                is_event = hasattr(record, "loopwarden_event")
                lines.append((record.levelno, self.format(record), is_event))
                if record.exc_info and record.exc_info[1] is not None and not is_event:
                    # For stderr: the cause in one line (the log file has the traceback).
                    self.local.causes[len(lines) - 1] = str(record.exc_info[1])
            except Exception:
                self.handleError(record)

    def finish(self, env: Mapping[str, str], context: str, cwd: str) -> str:
        """End this thread's request: write its lines to the log; the problems for stderr."""
        lines: list[Line] = self.local.lines
        self.local.lines = None
        if not lines:
            return ""
        write_log(env, lines, context, cwd)
        causes: dict[int, str] = self.local.causes
        problems: list[str] = []
        for index, (level, text, is_event) in enumerate(lines):
            if level < logging.WARNING or is_event:
                continue
            line = text.splitlines()[0]
            cause = causes.get(index)
            if cause and all(cause not in seen for seen in problems):
                line = f"{line}: {cause}"
            problems.append(line)
        return "".join(f"{p}\n" for p in problems)


_capture: Capture | None = None
_capture_lock = threading.Lock()


def start_capture() -> Capture:
    """Start collecting this thread's log records (installs the handler once)."""
    global _capture
    with _capture_lock:
        if _capture is None:
            _capture = Capture()
            logger.addHandler(_capture)
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                logger.setLevel(logging.INFO)
    _capture.local.lines = []
    _capture.local.causes = {}
    return _capture


def write_log(env: Mapping[str, str], lines: list[Line], context: str, cwd: str = "") -> None:
    """Append ``lines`` to the hook log (rotated once past 1 MB); never raises."""
    path = log_path(env, cwd)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    text = "".join(f"{stamp} {context} {line}\n" for _, line, _ in lines)
    try:
        # 0700 whoever creates the directory first, the log or the store.
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            if path.stat().st_size > _LOG_MAX_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
        except FileNotFoundError:
            pass
        # Non-blocking: a FIFO put where the log goes must not hang the hook.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass  # logging must never break the hook
