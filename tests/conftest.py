from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(name="lw_logs")
def fixture_lw_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture everything the ``loopwarden`` logger writes, from DEBUG up."""
    caplog.set_level(logging.DEBUG, logger="loopwarden")
    yield caplog


@pytest.fixture(autouse=True)
def _close_leftover_event_loop() -> Iterator[None]:
    """Close an event loop a test left set on this thread (Pydantic AI's and the OpenAI
    Agents SDK's ``run_sync`` do so on purpose). Otherwise it is collected later, inside
    some other test, whose run then fails on the unclosed-loop ResourceWarning."""
    yield
    policy = asyncio.get_event_loop_policy()
    loop = getattr(getattr(policy, "_local", None), "_loop", None)
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()
        policy.set_event_loop(None)


# -- a session that cannot hang after its last test ---------------------------------------
# CI once saw pytest print its summary and then never exit (a thread or process left by a
# test kept the interpreter alive until the suite's timeout). After the session, a daemon
# watchdog gives the interpreter EXIT_GRACE seconds to finish; if it is still alive then, it
# prints every thread's stack and the live child processes (so the culprit is named in the
# log) and ends the process with the session's own exit status.
EXIT_GRACE = 60.0
_exit_status = [0]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status[0] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    import sys
    import threading

    lingering = [
        t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    ]
    if lingering:
        names = ", ".join(t.name for t in lingering)
        sys.stderr.write(f"\nconftest: non-daemon threads alive after the session: {names}\n")
    threading.Thread(target=_watchdog, name="exit-watchdog", daemon=True).start()


def _watchdog() -> None:
    import faulthandler
    import multiprocessing
    import os
    import sys
    import time

    time.sleep(EXIT_GRACE)
    sys.stderr.write(
        f"\nconftest: the interpreter is still alive {EXIT_GRACE:g} s after the session\n"
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    children = [f"{p.name} (pid {p.pid})" for p in multiprocessing.active_children()]
    sys.stderr.write(f"conftest: live multiprocessing children: {children or 'none'}\n")
    sys.stderr.flush()
    os._exit(_exit_status[0])
