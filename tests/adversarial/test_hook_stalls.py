"""Hooks that must not stall the machine: blocking transcripts, replaced state, helper storms.

Issue 11, defects 1, 17, 18 and 19; issue 24, items 3 (a frozen helper) and 4 (a
write-locked state file). Every hook runs as the real console
script; "blocked" is read from the kernel (the thread waits for the other end
of a FIFO), never guessed from elapsed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests._wait import wait_until
from tests.adversarial._procs import (
    LOOPWARDEN,
    blocked_on_fifo,
    kill_group,
    processes_mentioning,
    run_bounded,
    settled,
)
from tests.adversarial.conftest import (
    SMALL,
    claude_event,
    codex_event,
    gemini_event,
    hook,
    short_dir,
    state_dir,
    stop_helpers,
    write_config,
)
from tests.hooks import payloads

pytestmark = pytest.mark.timeout(120)


def release_fifo(path: Path) -> None:
    """Give a reader blocked on ``path`` its writer (and at once EOF), so it can go on."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def start_hook(
    env: dict[str, str], event: dict[str, object], *, daemon: bool, agent: str = "claude-code"
) -> subprocess.Popen:
    argv = [LOOPWARDEN, "hook", agent] + ([] if daemon else ["--no-daemon"])
    with tempfile.TemporaryFile() as payload:
        payload.write(orjson.dumps(event))
        payload.seek(0)
        return subprocess.Popen(
            argv,
            stdin=payload,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )


def finish(proc: subprocess.Popen) -> None:
    kill_group(proc.pid)
    proc.communicate(timeout=30)


def helper_pid(env: dict[str, str]) -> int:
    """Wait for the helper of this env's runtime dir to listen; its pid."""
    runtime = Path(env["LOOPWARDEN_RUNTIME_DIR"])
    pid_file = wait_until(lambda: next(runtime.glob("*.pid"), None), what="the hook helper")
    return int(wait_until(lambda: pid_file.read_text().strip(), what="the helper's pid"))


def transcript(tmp_path: Path, lines: list[dict[str, object]] | None = None) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines or []))
    return path


# -- defect 1: a transcript that blocks ------------------------------------------------
def test_fifo_transcript_never_blocks_the_hook(hook_env: dict[str, str], tmp_path: Path) -> None:
    """A transcript path that is a FIFO is skipped: the hook never waits for a writer."""
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    # Codex's hooks read its rollout (Claude Code's transcript is not read any more).
    event = codex_event("PreToolUse", 1, transcript=str(fifo))
    proc = start_hook(hook_env, event, daemon=False, agent="codex")
    try:
        settled(proc)
        stuck = proc.poll() is None
    finally:
        release_fifo(fifo)
        out, _ = proc.communicate(timeout=60)
    assert not stuck, "the hook waited for a writer on the FIFO transcript"
    assert proc.returncode == 0 and orjson.loads(out) == {}


def test_blocked_transcript_does_not_stall_other_sessions(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """While one session's transcript blocks, another session's hook is answered and counted.

    Fail-closed makes the stall visible: a hook that cannot get at the store denies.
    """
    db = state_dir(hook_env) / "state.db"
    write_config(
        hook_env,
        {**SMALL, "loopwarden": {"failMode": "closed", "store": f"sqlite://{db}?busy_timeout=1"}},
    )
    fifo = tmp_path / "blocked.jsonl"
    os.mkfifo(fifo)
    stuck = start_hook(
        hook_env,
        codex_event("PreToolUse", 1, session="stuck", transcript=str(fifo)),
        daemon=False,
        agent="codex",
    )
    try:
        settled(stuck)
        other = hook(
            hook_env,
            "codex",
            codex_event("PreToolUse", 2, session="other", transcript=str(transcript(tmp_path))),
        )
    finally:
        release_fifo(fifo)
        finish(stuck)
    assert other.code == 0
    assert not other.denied, other.json
    assert "could not" not in other.stderr, other.stderr


def test_helper_stops_after_a_blocking_transcript(hook_env: dict[str, str], tmp_path: Path) -> None:
    """``--stop-daemon`` really stops a helper that was handed a FIFO transcript."""
    write_config(hook_env, SMALL)
    hook(hook_env, "claude-code", claude_event("PreToolUse", 1), daemon=True)
    pid = helper_pid(hook_env)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    event = codex_event("PreToolUse", 2, transcript=str(fifo))
    client = start_hook(hook_env, event, daemon=True, agent="codex")
    try:
        settled(client, pid=pid)
    finally:
        finish(client)  # the agent gave up on this hook call
    stopped = subprocess.run(
        [LOOPWARDEN, "hook", "--stop-daemon"], env=hook_env, capture_output=True, timeout=60
    )
    try:
        assert stopped.returncode == 0
        runtime = Path(hook_env["LOOPWARDEN_RUNTIME_DIR"])
        assert not list(runtime.glob("*.sock")), "the socket outlived --stop-daemon"
    finally:
        release_fifo(fifo)


def test_stop_daemon_stops_a_helper_with_a_stuck_worker(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """A helper whose worker waits forever (here on a config path that is a FIFO nobody
    writes) still exits on ``--stop-daemon``: its process is gone and so is its socket."""
    write_config(hook_env, SMALL)
    hook(hook_env, "claude-code", claude_event("PreToolUse", 1), daemon=True)
    pid = helper_pid(hook_env)
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    stuck_env = {**hook_env, "LOOPWARDEN_CONFIG": str(fifo)}
    client = start_hook(stuck_env, claude_event("PreToolUse", 2), daemon=True)
    try:
        settled(client, pid=pid)
        assert blocked_on_fifo(pid), "the helper's worker is not waiting on the FIFO"
        stopped = subprocess.run(
            [LOOPWARDEN, "hook", "--stop-daemon"], env=hook_env, capture_output=True, timeout=60
        )
        assert stopped.returncode == 0
        assert b"stopped" in stopped.stdout
        runtime = Path(hook_env["LOOPWARDEN_RUNTIME_DIR"])
        assert not list(runtime.glob("*.sock")), "the socket outlived --stop-daemon"
        assert not Path(f"/proc/{pid}").exists() or b"zombie" in _status(pid), "helper alive"
    finally:
        release_fifo(fifo)
        finish(client)


def _status(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return b"zombie"


# -- defect 17: state.db deleted while the helper runs -----------------------------------
def pair(env: dict[str, str], n: int, *, session: str, daemon: bool) -> bool:
    """One identical Bash call (Pre and Post); True when the Pre was denied."""
    pre = hook(env, "claude-code", claude_event("PreToolUse", n, session=session), daemon=daemon)
    post_event = claude_event(
        "PostToolUse", n, session=session, tool_response={"stdout": "pending", "stderr": ""}
    )
    hook(env, "claude-code", post_event, daemon=daemon)
    return pre.denied


def test_deleted_state_db_is_not_split_between_helper_and_hooks(hook_env: dict[str, str]) -> None:
    """After ``state.db`` is deleted (the documented fix for a bad file), the helper and a
    hook process share the new file: calls the helper counted are seen by the hook."""
    write_config(hook_env, SMALL)
    pair(hook_env, 1, session="warmup", daemon=True)  # starts the helper
    helper_pid(hook_env)
    pair(hook_env, 2, session="split", daemon=True)
    db = state_dir(hook_env) / "state.db"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{db}{suffix}").unlink()
    # Helper, hook process, helper: each sees the calls of the others in the new file.
    assert not pair(hook_env, 3, session="split", daemon=True)
    assert db.exists(), "the helper wrote its calls to the deleted file"
    assert not pair(hook_env, 4, session="split", daemon=False)
    assert not pair(hook_env, 5, session="split", daemon=True)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] >= 1
    # Three identical no-progress calls are in the new file (blocked at 3 repeats):
    # the fourth is denied, by a hook process as by the helper.
    fourth = hook(hook_env, "claude-code", claude_event("PreToolUse", 6, session="split"))
    assert fourth.denied, fourth.json


# -- defect 18: a symlinked runtime dir ---------------------------------------------------
@pytest.mark.parametrize("variable", ["LOOPWARDEN_RUNTIME_DIR", "XDG_RUNTIME_DIR"])
def test_symlinked_runtime_dir_is_refused(hook_env: dict[str, str], variable: str) -> None:
    """A runtime dir that is a symlink is not used: its target is not chmod'ed and no
    helper is started with a socket inside it."""
    target = short_dir("lwadv-target-")
    target.chmod(0o755)
    holder = short_dir("lwadv-link-")
    env = dict(hook_env)
    if variable == "XDG_RUNTIME_DIR":
        env.pop("LOOPWARDEN_RUNTIME_DIR")
        env["XDG_RUNTIME_DIR"] = str(holder)
        link = holder / "loopwarden"
    else:
        link = holder / "run"
        env["LOOPWARDEN_RUNTIME_DIR"] = str(link)
    link.symlink_to(target)
    try:
        answer = hook(env, "claude-code", claude_event("PreToolUse", 1), daemon=True)
        assert answer.code == 0 and answer.json == {}
        started = processes_mentioning(str(holder))
        assert target.stat().st_mode & 0o777 == 0o755, "the symlink's target was chmod'ed"
        assert not started, "a helper was started with its socket behind the symlink"
    finally:
        stop_helpers({**env, "LOOPWARDEN_RUNTIME_DIR": str(link)})
        link.unlink()
        holder.rmdir()
        for leftover in target.iterdir():
            leftover.unlink()
        target.rmdir()


# -- defect 19: a burst of hook calls with no helper ------------------------------------------
@pytest.mark.slow
def test_burst_of_hooks_starts_one_helper(hook_env: dict[str, str]) -> None:
    """30 hook calls at once with no helper running start exactly one helper, and all answer."""
    write_config(hook_env, SMALL)
    runtime = hook_env["LOOPWARDEN_RUNTIME_DIR"]
    seen: set[int] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(pid for pid in processes_mentioning(runtime) if is_helper(pid))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    procs = [
        start_hook(hook_env, claude_event("PreToolUse", n, session=f"burst-{n}"), daemon=True)
        for n in range(30)
    ]
    try:
        outputs = [proc.communicate(timeout=90) for proc in procs]
        helper_pid(hook_env)
        # Losers of the helper lock give up within seconds; the sampler has seen them by
        # then, so wait until only the winner is left (or none, if it was the only one).
        wait_until(
            lambda: len([p for p in processes_mentioning(runtime) if is_helper(p)]) <= 1,
            timeout=60,
        )
    finally:
        done.set()
        sampler.join()
        for proc in procs:
            if proc.poll() is None:
                finish(proc)
    assert [proc.returncode for proc in procs] == [0] * 30
    assert all(orjson.loads(out) == {} for out, _ in outputs)
    assert len(seen) == 1, f"{len(seen)} helper processes were started"


def is_helper(pid: int) -> bool:
    try:
        return b"--socket" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# -- issue 24 item 3: a frozen helper ---------------------------------------------------
def test_frozen_helper_is_passed_over_and_calls_are_counted(hook_env: dict[str, str]) -> None:
    """With the helper stopped (SIGSTOP), hooks do not wait out the socket timeout and
    allow uncounted: they handle their events in process, so the loop is still blocked."""
    write_config(hook_env, SMALL)
    pair(hook_env, 0, session="warmup", daemon=True)
    pid = helper_pid(hook_env)
    os.kill(pid, signal.SIGSTOP)
    try:
        first = hook(
            hook_env, "claude-code", claude_event("PreToolUse", 1, session="frozen"), daemon=True
        )
        assert "hook helper failed" not in first.stderr, first.stderr
        post = claude_event(
            "PostToolUse", 1, session="frozen", tool_response={"stdout": "pending", "stderr": ""}
        )
        hook(hook_env, "claude-code", post, daemon=True)
        assert not pair(hook_env, 2, session="frozen", daemon=True)
        assert not pair(hook_env, 3, session="frozen", daemon=True)
        assert pair(hook_env, 4, session="frozen", daemon=True), "the frozen loop was not counted"
        stopped = run_bounded([LOOPWARDEN, "hook", "--stop-daemon"], env=hook_env, timeout=60)
        assert stopped.code == 0 and "stopped" in stopped.out, stopped.out
        wait_until(lambda: not Path(f"/proc/{pid}").exists() or b"zombie" in _status(pid))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


# -- issue 24 item 4: a write-locked state file ----------------------------------------------
LOCK_WAIT = "held a write lock for more than"


@contextlib.contextmanager
def write_locked(db: Path) -> Iterator[None]:
    """Another process's write transaction on ``db``, held until the block ends."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


@pytest.mark.parametrize("event", ["batch", "pre", "pre-closed"])
def test_locked_state_costs_one_wait_per_hook_call(hook_env: dict[str, str], event: str) -> None:
    """With the state file write-locked by another process, a PostToolBatch of six calls
    and a PreToolUse each wait for the lock once (one timeout reported), then answer
    as for any store failure: the calls are allowed (denied with failMode closed)."""
    db = state_dir(hook_env) / "state.db"
    settings: dict[str, str] = {"store": f"sqlite://{db}?busy_timeout=1"}
    if event == "pre-closed":
        settings["failMode"] = "closed"
    write_config(hook_env, {**SMALL, "loopwarden": settings})
    pair(hook_env, 0, session="locked", daemon=False)  # creates the file and its schema
    if event == "batch":
        payload = payloads.claude_batch([(n, "Bash", "pending") for n in range(1, 7)])
    else:
        payload = claude_event("PreToolUse", 1, session="locked")
    with write_locked(db):
        answer = hook(hook_env, "claude-code", payload)
    assert answer.code == 0
    assert answer.denied is (event == "pre-closed"), answer.json
    log = (state_dir(hook_env) / "hook.log").read_text()
    assert log.count(LOCK_WAIT) == 1, log


# -- issue 24 item 5: Gemini results larger than a transcript read -------------------------
def gemini_loop_refused_at(
    env: dict[str, str], path: Path, session: str, result_size: int, per_request: int
) -> int | None:
    """Repeat one Gemini shell call with an identical result of ``result_size`` bytes,
    ``per_request`` calls between model requests; the call refused first (None: none)."""
    path.write_bytes(b'{"sessionId": "%s", "startTime": "t"}\n' % session.encode())
    output = orjson.dumps("pending " + "x" * result_size)
    event = {"transcript_path": str(path), "tool_input": {"command": "poll"}, "session": session}
    hook(env, "gemini", gemini_event("BeforeAgent", **event))
    model = gemini_event("BeforeModel", llm_request={"messages": []}, **event)
    hook(env, "gemini", model)
    for n in range(1, 13):
        if hook(env, "gemini", gemini_event("BeforeTool", **event)).denied:
            return n
        records = payloads.gemini_transcript_calls([(f"call_{n}", "run_shell_command", None)])
        with path.open("ab") as fh:
            for record in records:
                fh.write(orjson.dumps(record).replace(b'"pending"', output) + b"\n")
        if n % per_request == 0:
            hook(env, "gemini", model)
    return None


def test_gemini_result_cut_by_a_read_is_read_whole(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """Two calls with 9 MiB results between model requests append 36 MiB, more than one
    read of 32 MiB: the record cut by the read's start is read whole, so every outcome
    is recorded and the loop is refused at the same call as one with small results."""
    write_config(hook_env, SMALL)
    small = gemini_loop_refused_at(hook_env, tmp_path / "a.jsonl", "small", 1024, 2)
    large = gemini_loop_refused_at(hook_env, tmp_path / "b.jsonl", "large", 9 * 1024 * 1024, 2)
    assert small is not None
    assert large == small, f"refused at call {large}, with small results at call {small}"


@pytest.mark.parametrize("size", [600 * 1024, 3 * 1024 * 1024])
def test_gemini_loop_with_large_results_is_refused(
    hook_env: dict[str, str], tmp_path: Path, size: int
) -> None:
    """A Gemini loop whose identical result is large (each call appends twice its size to
    the transcript: beyond the 1 MiB one read took before) is refused at the same call
    as one with small results."""
    write_config(hook_env, SMALL)
    small = gemini_loop_refused_at(hook_env, tmp_path / "a.jsonl", "small", 10 * 1024, 1)
    large = gemini_loop_refused_at(hook_env, tmp_path / "b.jsonl", "large", size, 1)
    assert small is not None
    assert large == small, f"refused at call {large}, with small results at call {small}"
