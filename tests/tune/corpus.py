"""Small synthetic trace corpora with known answers, and a local Ray for the engine tests."""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_NOTE = "chromium is not installed (CI installs it from apt)"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def conversation(
    ident: str | None,
    calls: list[tuple[str, dict[str, Any], str]],
    *,
    usage: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions conversation: one assistant turn per call, then its tool result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]
    for n, (tool, args, result) in enumerate(calls, 1):
        turn: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{n}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)},
                }
            ],
        }
        if usage is not None:
            turn["usage"] = {"prompt_tokens": usage - 10, "completion_tokens": 10}
        messages.append(turn)
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
    out: dict[str, Any] = {"messages": messages}
    if ident is not None:
        out["id"] = ident
    out.update(extra or {})
    return out


def stuck_loop() -> list[tuple[str, dict[str, Any], str]]:
    """14 identical calls with identical results: a real short loop that ends with the budget."""
    return [("check_status", {"job": 1}, "pending")] * 14


def slow_progress() -> list[tuple[str, dict[str, Any], str]]:
    """8 identical polls with the same answer, then the job is done: a healthy run."""
    return [("check_status", {"job": 2}, "pending")] * 8 + [("deploy", {"job": 2}, "deployed")]


def plain() -> list[tuple[str, dict[str, Any], str]]:
    return [("read", {"path": f"/src/{n}.py"}, f"text {n}") for n in range(5)]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def known_corpus(folder: Path, *, usage: int | None = 110) -> Path:
    """One stuck run, one healthy slow-progress run, one plain healthy run."""
    write_jsonl(
        folder / "runs.jsonl",
        [
            conversation("bad-loop", stuck_loop(), usage=usage),
            conversation("good-progress", slow_progress(), usage=usage),
            conversation("good-plain", plain(), usage=usage),
        ],
    )
    return folder


def fleet_corpus(folder: Path) -> Path:
    """The shipped examples, a .gz copy of one, and a file of 60 conversations (split in ranges).

    Every third conversation is stuck, every other one has no id (labelled by
    its position), and every one records token usage.
    """
    shutil.copytree(EXAMPLES, folder / "examples")
    codex = next((folder / "examples" / "codex").glob("*.jsonl"))
    (folder / "examples" / "codex" / (codex.name + ".gz")).write_bytes(
        gzip.compress(codex.read_bytes())
    )
    runs = []
    for n in range(60):
        calls = [stuck_loop, slow_progress, plain][n % 3]()
        runs.append(conversation(None if n % 2 else f"conv-{n}", calls, usage=50 + n))
    write_jsonl(folder / "many.jsonl", runs)
    return folder


_RAY_TURN_HELD = False


@contextlib.contextmanager
def ray_turn() -> Iterator[None]:
    """Hold the machine's one Ray turn: at most one test Ray runs at a time.

    CI runs suites side by side on two cores; two or more local Rays starting
    at once can miss Ray's fixed 30-second raylet start-up limit. The lock file
    is shared by every suite on the machine; nesting in one process is a no-op.
    """
    global _RAY_TURN_HELD
    if _RAY_TURN_HELD:
        yield
        return
    path = Path(tempfile.gettempdir()) / "loopwarden-tests-ray.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _RAY_TURN_HELD = True
        try:
            yield
        finally:
            _RAY_TURN_HELD = False
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def local_ray() -> Any:
    """A local Ray with two CPUs for one test module (skipped without the ray extra).

    Module-scoped so that it is gone before a test that has a command start
    its own Ray; it holds the Ray turn while it runs.
    """
    try:
        import ray
    except ImportError:
        # The suites with every extra have Ray; the no-extras suite must skip.
        pytest.skip("ray is not installed (pip install 'loopwarden[ray]')")
    with ray_turn():
        if ray.is_initialized():
            yield ray
            return
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()
