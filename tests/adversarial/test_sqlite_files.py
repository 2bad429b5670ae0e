"""The SQLite store against what happens to its files and to the text it is handed.

* Its ``-wal``/``-shm`` files deleted (or the database replaced) while a
  long-lived process has them open: that process must notice and reopen, so
  that every process keeps counting one state and no call made afterwards is
  lost (issue 24, item 10).
* Text that UTF-8 cannot encode (lone surrogates) in tool names, run ids, call
  ids and results: counted exactly as the memory store counts it (issue 24,
  item 13).

Driven through public entry points only: ``LoopGuard`` with a ``sqlite://``
store, in separate processes.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from tests.adversarial._procs import kill_group, run_bounded

pytestmark = pytest.mark.timeout(300)

# One process's guard on the shared run: "calls N" makes N distinct guarded calls and
# answers with the number of calls the run holds; "quit" closes the guard.
WORKER = r"""
import logging, sys
import loopwarden as lw
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
url, worker = sys.argv[1], sys.argv[2]
guard = lw.LoopGuard(
    {"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}}, store=url
)
run = guard.run("shared", session_id="s")
n = 0
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "quit":
        break
    for _ in range(int(arg)):
        n += 1
        params = {"worker": worker, "n": n}
        run.before_call("fetch", params, call_id=f"{worker}-{n}")
        run.after_call("fetch", params, call_id=f"{worker}-{n}", result={"ok": n})
    print(len(run.snapshot()["records"]), flush=True)
guard.close()
"""


class LongLived:
    """A worker process that keeps its guard (and its connection to the file) open."""

    def __init__(self, url: str, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def calls(self, n: int) -> int:
        """Make ``n`` calls; the number of calls the run holds as this process sees it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"calls {n}\n")
        self.proc.stdin.flush()
        try:
            return int(self.lines.get(timeout=120))
        except queue.Empty:
            raise AssertionError(f"no answer; stderr: {self.stop()}") from None

    def stop(self) -> str:
        """Close the guard and exit; its stderr."""
        try:
            _, err = self.proc.communicate("quit\n", timeout=60)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            _, err = self.proc.communicate()
        return err


def one_shot(url: str, name: str, n: int) -> int | None:
    """A process that makes ``n`` calls and exits; the number of calls it saw (``None``
    when it could not read the file: its calls were allowed, the error logged)."""
    ran = run_bounded(
        [sys.executable, "-c", WORKER, url, name], stdin=f"calls {n}\nquit\n".encode()
    )
    if ran.code != 0:  # its guard failed open, logged; reading the count then raised
        assert "could not open the file" in ran.err, ran.err
        return None
    return int(ran.out.strip())


@pytest.mark.parametrize("deleted", [("-wal", "-shm"), ("-wal",), ("-shm",)])
def test_files_deleted_under_a_long_lived_process(tmp_path: Path, deleted: tuple[str]) -> None:
    """After the database's -wal/-shm files are deleted under a long-lived process, every
    process counts the same run and no call made afterwards is lost; the old one says so."""
    db = tmp_path / "state.db"
    url = f"sqlite://{db}"
    holder = LongLived(url, "holder")
    try:
        assert holder.calls(10) == 10
        for suffix in deleted:
            os.unlink(f"{db}{suffix}")
        # What went with the deleted files (the calls not yet copied into the database
        # file) is gone for everyone; from here on, each process adds to the same count.
        # With the -shm file left alone, other processes cannot read the file until the
        # holder lets go of it (SQLite reports an I/O error; the calls fail open).
        first = one_shot(url, "first", 5)
        if first is None:
            assert deleted == ("-wal",)
        else:
            assert first in (5, 15)
        seen = holder.calls(5)
        assert seen == (first + 5 if first is not None else 5)
        assert one_shot(url, "second", 3) == seen + 3
        assert holder.calls(2) == seen + 5
    finally:
        err = holder.stop()
    assert "replaced or deleted" in err
    assert one_shot(url, "after", 0) == seen + 5


def test_many_processes_on_one_run_count_every_call_once(tmp_path: Path) -> None:
    """Long-lived and one-shot processes interleaving on one run: each call counted once."""
    url = f"sqlite://{tmp_path / 'state.db'}"
    workers = [LongLived(url, f"w{i}") for i in range(3)]
    try:
        total = 0
        for round_ in range(4):
            for worker in workers:
                total += 3
                assert worker.calls(3) == total
            total += 2
            assert one_shot(url, f"once{round_}", 2) == total
    finally:
        errors = [worker.stop() for worker in workers]
    assert not any("replaced or deleted" in err for err in errors)


SURROGATES: dict[str, Any] = {
    "tools": {"loopDetection": {"enabled": True, "historySize": 50}},
}


def drive(store: str) -> list[Any]:
    """A run whose tool names, ids, params and results hold lone surrogates, to its stop."""
    guard = lw.LoopGuard(SURROGATES, store=store)
    run = guard.run("run-\ud800", session_id="session-\udfff", agent_id="agent-\udc80")
    seen: list[Any] = []
    for i in range(16):
        # Two distinct calls first, then one call repeated with the same result.
        tool = "tool-\udbff" if i < 2 else "\ud800"
        params = {"q": "\udfff", "i": i if i < 2 else -1}
        try:
            decision = run.before_call(tool, params, call_id=f"call-\ud801-{i}")
            note = run.after_call(
                tool, params, call_id=f"call-\ud801-{i}", result="same \ud800 result"
            )
            seen.append((decision.action, decision.message, note))
        except lw.LoopAbort as stop:
            seen.append(("stop", str(stop)))
    records = run.snapshot()["records"]
    seen.append([(r["tool_name"], r["call_id"], r["result_hash"]) for r in records])
    guard.close()
    return seen


def test_lone_surrogates_are_counted_as_in_memory(tmp_path: Path) -> None:
    """Text with lone surrogates is stored and counted on SQLite exactly as in memory."""
    in_memory = drive("memory://")
    assert any(step[0] == "stop" for step in in_memory[:-1])  # the loop is caught
    assert drive(f"sqlite://{tmp_path / 'state.db'}") == in_memory
    # And by another store object, from the file.
    assert drive(f"sqlite://{tmp_path / 'state.db'}")[-1] == in_memory[-1]
