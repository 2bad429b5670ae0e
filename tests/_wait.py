"""One way for tests to wait for something: poll a predicate until a deadline.

Tests never assert on wall time and never sleep a fixed time to let something
happen; they wait for the condition itself, with a generous deadline that only
matters when the test fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = ""
) -> T:
    """Return the first truthy value of ``predicate()``; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate!r}")
        time.sleep(interval)


def poll_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02) -> T:
    """Like :func:`wait_until`, but return the last (falsy) value at the deadline instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
