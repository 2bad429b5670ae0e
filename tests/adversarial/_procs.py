"""Real subprocesses with hard bounds: a timeout, an address-space cap, and their peak RSS.

Every hostile input here could hang or balloon the process under test, so a
test never waits on it unbounded: the child runs in its own session (the whole
group is killed at the deadline), under ``RLIMIT_AS`` (a runaway allocation
fails inside the child instead of swapping a shared machine), and its peak
resident set size, when asked for, is the kernel's figure for that one process
(``wait4`` in a small launcher), not an estimate.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_script = Path(sys.executable).with_name("loopwarden")
LOOPWARDEN = str(_script) if _script.exists() else (shutil.which("loopwarden") or "loopwarden")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Ran:
    """How a bounded subprocess ended."""

    code: int | None
    """Exit code (negative: killed by that signal); None when it hit the timeout."""
    stdout: bytes
    stderr: bytes
    max_rss: int | None
    """Peak resident set size in bytes (None unless asked for)."""

    @property
    def peak(self) -> int:
        """Peak RSS in bytes (for runs with ``rss=True``)."""
        assert self.max_rss is not None, "the peak RSS was not measured (rss=True)"
        return self.max_rss

    @property
    def timed_out(self) -> bool:
        return self.code is None

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def _limits(max_as: int | None, max_cpu: int | None) -> None:
    if max_as is not None:
        resource.setrlimit(resource.RLIMIT_AS, (max_as, max_as))
    if max_cpu is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (max_cpu, max_cpu + 1))


# Peak RSS via a small launcher: a child forked from pytest itself would report the
# parent's RSS as its own peak (Linux carries ru_maxrss across exec).
_LAUNCHER = """
import os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as fh:
    fh.write(f"{status} {usage.ru_maxrss}")
"""


def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes | Iterable[bytes] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    max_as: int | None = 2048 * MiB,
    max_cpu: int | None = None,
    rss: bool = False,
) -> Ran:
    """Run ``argv`` to completion or ``timeout``; stdout/stderr go through files, not pipes.

    With ``rss`` the peak RSS of ``argv`` alone is measured (through a small launcher).
    """
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as report,
    ):
        command = list(argv)
        if rss:
            command = [sys.executable, "-I", "-S", "-c", _LAUNCHER, report.name, *command]
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=lambda: _limits(max_as, max_cpu),
        )
        feeder = None
        if stdin is not None:
            feeder = threading.Thread(target=_feed, args=(proc, stdin), daemon=True)
            feeder.start()
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            proc.wait(30)
        if feeder is not None:
            feeder.join(10)
        code: int | None = None if timed_out else proc.returncode
        max_rss: int | None = None
        if rss and not timed_out:
            status, _, peak = report.read().partition(" ")
            assert peak, f"the launcher reported nothing for {argv[0]} (exit {proc.returncode})"
            code = os.waitstatus_to_exitcode(int(status))
            max_rss = int(peak) * 1024
        out.seek(0)
        err.seek(0)
        return Ran(code, out.read(), err.read(), max_rss)


def _feed(proc: subprocess.Popen[bytes], data: bytes | Iterable[bytes]) -> None:
    assert proc.stdin is not None
    chunks = [data] if isinstance(data, bytes) else data
    with contextlib.suppress(OSError):
        for chunk in chunks:
            proc.stdin.write(chunk)
    with contextlib.suppress(OSError):
        proc.stdin.close()


# Where /proc/PID/wchan is unreadable (some containers), a process still running after this
# long counts as blocked: a healthy hook or replay here finishes in a second or two.
BLOCKED_AFTER = 30.0


def settled(proc: subprocess.Popen[bytes], timeout: float = BLOCKED_AFTER, pid: int = 0) -> None:
    """Wait until ``proc`` exits or ``pid`` (default: ``proc``) waits on a FIFO, or timeout."""
    from tests._wait import poll_until

    watched = pid or proc.pid
    poll_until(lambda: proc.poll() is not None or blocked_on_fifo(watched), timeout)


def run_unless_blocked(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = BLOCKED_AFTER
) -> Ran | None:
    """Run ``argv``; None (after killing it) as soon as it waits for the other end of a FIFO,
    or if it is still running after ``timeout`` seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=None if env is None else dict(env),
            start_new_session=True,
            preexec_fn=lambda: _limits(2048 * MiB, None),
        )
        try:
            settled(proc, timeout)
        finally:
            blocked = proc.poll() is None
            if blocked:
                kill_group(proc.pid)
                proc.wait(30)
        if blocked:
            return None
        out.seek(0)
        err.seek(0)
        return Ran(proc.returncode, out.read(), err.read(), None)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a live process has used so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (a child started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def wchan(pid: int, tid: int | None = None) -> str:
    """The kernel function a process (or one of its threads) sleeps in; "" if gone."""
    path = f"/proc/{pid}/task/{tid}/wchan" if tid is not None else f"/proc/{pid}/wchan"
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def thread_ids(pid: int) -> list[int]:
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def blocked_on_fifo(pid: int) -> bool:
    """True when some thread of ``pid`` waits for the other end of a FIFO."""
    return any(wchan(pid, tid) in _FIFO_WAITS for tid in thread_ids(pid))


# fifo_open waits in wait_for_partner; a read of an empty pipe in pipe_read/pipe_wait.
_FIFO_WAITS = frozenset({"wait_for_partner", "pipe_read", "pipe_wait", "pipe_wait_readable"})


def processes_mentioning(needle: str) -> list[int]:
    """Pids whose command line contains ``needle`` (e.g. a test's own runtime directory)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in cmdline and int(name) != os.getpid():
            found.append(int(name))
    return found


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL processes this test started (by pid, never by name)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """Children started inside inherit ``mask``."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
