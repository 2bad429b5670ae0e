"""Start-up cost of loopwarden's hook command against a bare interpreter.

A coding agent starts the hook command for every tool call, so its wall time
is added to every call. This measures, on the same interpreter:

* ``python -c pass``: the floor: starting Python and exiting;
* the command ``loopwarden install`` writes (``python -S -c ... claude-code``)
  answering a ``PreToolUse`` event through the running hook helper: the
  normal case;
* ``loopwarden hook claude-code`` (the console script), the same way;
* the same with ``--no-daemon``: the event handled in the hook process itself;
* the cold first call: no helper running (the event is handled in process and
  a helper is started for the next call).

Cases are interleaved round by round (the machine's noise hits all alike);
medians, minimums and the ratio to ``python -c pass`` are printed. Two
byte-code settings are measured: this environment as it is (here
``PYTHONDONTWRITEBYTECODE=1``, so modules without a ``.pyc`` are compiled on
every start), and byte code cached in a private ``PYTHONPYCACHEPREFIX`` as
after a normal ``pip install`` (which compiles ``.pyc`` files).

Run: ``python benchmarks/bench_hook.py [--rounds 300]`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
LOOPWARDEN = shutil.which("loopwarden", path=str(Path(sys.executable).parent)) or "loopwarden"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from loopwarden.hooks.settings import hook_command  # noqa: E402

INSTALLED = shlex.split(hook_command("claude-code"))


def event(n: int) -> bytes:
    """A Claude Code PreToolUse event as the CLI sends it (distinct commands: allow path)."""
    return json.dumps(
        {
            "session_id": "bench-session",
            "transcript_path": "",
            "cwd": "/work/project",
            "prompt_id": "bench-prompt",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": f"ls -la src/{n % 50}", "description": "list"},
            "tool_use_id": f"toolu_{n:06d}",
        }
    ).encode()


def timed(argv: list[str], env: dict[str, str], stdin: bytes) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or (stdin and done.stdout.strip() != b"{}"):
        raise SystemExit(f"unexpected answer from {argv}: {done.returncode} {done.stdout!r}")
    return elapsed


def helper_up(env: dict[str, str]) -> bool:
    from loopwarden.hooks.daemon import ping

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ping(env) is not None:
            return True
        time.sleep(0.05)
    return False


def stop_helper(env: dict[str, str]) -> None:
    subprocess.run([LOOPWARDEN, "hook", "--stop-daemon"], env=env, capture_output=True, check=False)


def measure(env: dict[str, str], rounds: int, local_every: int, label: str) -> None:
    hook = [LOOPWARDEN, "hook", "claude-code"]
    stop_helper(env)
    cold: list[float] = []
    for n in range(5):  # cold starts: no helper running
        cold.append(timed(hook, env, event(10_000 + n)))
        if not helper_up(env):
            raise SystemExit("the hook helper did not start")
        stop_helper(env)
    timed(hook, env, event(0))
    helper_up(env)
    for n in range(20):  # warm-up (and fill the run's window)
        timed(hook, env, event(n))
        timed([PYTHON, "-c", "pass"], env, b"")
    base: list[float] = []
    warm: list[float] = []
    installed: list[float] = []
    local: list[float] = []
    for n in range(rounds):
        base.append(timed([PYTHON, "-c", "pass"], env, b""))
        installed.append(timed(INSTALLED, env, event(200_000 + n)))
        warm.append(timed(hook, env, event(100 + n)))
        if n % local_every == 0:
            local.append(timed([*hook, "--no-daemon"], env, event(100_000 + n)))
    stop_helper(env)

    floor = statistics.median(base)

    def row(name: str, values: list[float]) -> str:
        med = statistics.median(values)
        return (
            f"  {name:<38} n={len(values):<4} median {med * 1e3:7.1f} ms   "
            f"min {min(values) * 1e3:7.1f} ms   ratio {med / floor:5.2f}x"
        )

    print(f"{label}:")
    print(row("python -c pass", base))
    print(row("installed command, python -S (helper)", installed))
    print(row("loopwarden hook claude-code (helper)", warm))
    print(row("loopwarden hook ... --no-daemon", local))
    print(row("cold first call (starts the helper)", cold))
    median = statistics.median(installed)
    print(
        f"  installed command vs python -c pass: median {median / floor:.2f}x, "
        f"min {min(installed) / min(base):.2f}x, {(median - floor) * 1e3:+.1f} ms per call"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--local-every", type=int, default=10, help="in-process run every N rounds")
    parser.add_argument("--only", choices=["env", "cached"], help="one byte-code setting only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lw-bench-hook-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "run").mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_"))}
        env.update(HOME=str(root / "home"), LOOPWARDEN_RUNTIME_DIR=str(root / "run"))
        print(f"interpreter: {PYTHON} (Python {sys.version.split()[0]})")
        print(f"hook command: {shlex.join(INSTALLED)}; {args.rounds} interleaved rounds")
        if args.only in (None, "env"):
            dont = env.get("PYTHONDONTWRITEBYTECODE", "")
            measure(
                env,
                args.rounds,
                args.local_every,
                f"as this environment runs (PYTHONDONTWRITEBYTECODE={dont!r})",
            )
        if args.only in (None, "cached"):
            cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            cached["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
            measure(
                cached, args.rounds, args.local_every, "byte code cached (as after pip install)"
            )


if __name__ == "__main__":
    main()
