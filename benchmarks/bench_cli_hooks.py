"""Per-tool-call cost of loopwarden's hook, measured from each real coding-agent CLI.

Part 1 runs the same scripted session (``--calls`` shell calls whose output
changes every time, so loopwarden allows them all) in each CLI installed by
``scripts/e2e-cli-setup``, inside the e2e sandbox (network namespace, fake model
API on loopback), in three set-ups, interleaved round by round:

* ``bare``: no hook at all;
* ``no-op hook``: loopwarden's hook entries with the command replaced by
  ``cat >/dev/null`` (what the CLI itself spends per command hook);
* ``python -c pass``: the same with a bare Python start (the floor of any Python hook);
* ``loopwarden``: ``loopwarden install AGENT`` as is (helper already running);
* ``--compare PATH``: the same with another installation's ``loopwarden`` (e.g. a
  virtualenv with the previous release: its own install, events and command);
* a counting pass: each command prefixed by an append to a file, to count hook
  invocations per tool call (for each loopwarden).

The time of one tool call is read at the fake API: the gap between the model
request that made the call and the next one (tool run + hooks + CLI overhead).
The cost of the hooks is the difference of the medians (bare vs loopwarden).
CPU time per call (the CLI with every process it waited for, plus the hook
helper) is printed too: on a busy machine it is much steadier than wall time.

Part 2 splits one hook call (a Claude Code event): interpreter start
(``python -c pass`` and ``python -S -c pass``), the command ``install`` writes
(``python -S -c ...``) with the helper running, the console script
``loopwarden hook`` (PreToolUse, PostToolUse), the socket round trip to the
helper measured inside one process, and ``--no-daemon``.

Run: ``python benchmarks/bench_cli_hooks.py [--calls 30] [--rounds 3] [--agents ...]
[--compare /path/to/other/venv/bin/loopwarden]`` (a benchmark, not a test;
wall-clock figures, so run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import itertools
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import (  # noqa: E402
    AGENTS,
    LOOPWARDEN,
    Workspace,
    cli_path,
    netns_prefix,
)

from loopwarden.hooks.settings import hook_command  # noqa: E402

PYTHON = sys.executable
BARE_SETTINGS = {
    "claude-code": "{}",
    "codex": "{}",
    "gemini": json.dumps(
        {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "model": {"disableLoopDetection": True},
        }
    ),
}


def helpers_cpu(runtime: Path) -> float:
    """CPU seconds used so far by the hook helpers of ``runtime`` (their pid files)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid_file in runtime.glob("*.pid"):
        try:
            fields = Path(f"/proc/{int(pid_file.read_text())}/stat").read_text().split(")")[-1]
        except (OSError, ValueError):
            continue
        utime, stime = fields.split()[11:13]
        total += (int(utime) + int(stime)) / ticks
    return total


def session(ws: Workspace, calls: int) -> tuple[list[float], float]:
    """One scripted session: the gaps between model requests (one per call), and the CPU
    seconds per call of the CLI, its hook processes and the hook helper together."""
    before = helpers_cpu(ws.runtime)
    outcome = ws.run([ws.progress(calls)])
    helper = helpers_cpu(ws.runtime) - before
    times = [r["t"] for r in outcome.main]
    return [b - a for a, b in itertools.pairwise(times)], (outcome.runs[-1].cpu + helper) / calls


def replace_hooks(ws: Workspace, command: str) -> None:
    """Rewrite every loopwarden hook command; ``{}`` in ``command`` is the original."""
    data = json.loads(ws.settings.read_text())
    for groups in data.get("hooks", {}).values():
        for group in groups:
            for handler in group.get("hooks", []):
                if "loopwarden" in handler.get("command", ""):
                    handler["command"] = command.replace("{}", handler["command"])
    ws.settings.write_text(json.dumps(data))


MODES = {
    "bare": None,  # no hooks
    "no-op hook": "cat >/dev/null",  # the CLI's own cost of running a command hook
    "python -c pass": f"{PYTHON} -c pass",  # the floor of any Python hook
    "loopwarden": "{}",
}


def workspace(
    agent: str, root: Path, runtime: Path, netns: list[str], mode: str, other: str | None
) -> Workspace:
    ws = Workspace(agent, root / f"{agent}-{time.monotonic_ns()}", runtime, netns)
    ws.settings.write_text(BARE_SETTINGS[agent])  # no user hook: only the hooks measured
    if mode == "compared":
        done = subprocess.run(
            [str(other), "install", agent], env=ws.env(), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return ws
    command = MODES.get(mode, "{}")
    if command is not None:
        ws.install()
        replace_hooks(ws, command)
    return ws


def count_hooks(ws: Workspace, calls: int) -> float:
    """Hook invocations per tool call of one session."""
    counter = ws.root / "hook-calls"
    replace_hooks(ws, f"echo . >> {counter}; {{}}")
    ws.run([ws.progress(calls)])
    return len(counter.read_text().splitlines()) / calls


def part1(
    agents: list[str], calls: int, rounds: int, root: Path, runtime: Path, other: str | None
) -> None:
    netns = netns_prefix()
    if netns is None:
        print("part 1 skipped: no network namespaces here")
        return
    modes = [*MODES, *(["compared"] if other else [])]
    counted = ["loopwarden", *(["compared"] if other else [])]
    print(f"Part 1: one tool call as seen by the CLI ({calls} calls x {rounds} rounds, medians)")
    if other:
        print(f"  compared: {other}")
    heads = "".join(f"{m:>16}" for m in modes) + "".join(f"{'hooks/call':>12}" for _ in counted)
    print(f"{'agent':16}{heads}")
    for agent in agents:
        if not cli_path(agent).exists():
            print(f"{agent:12} not installed (scripts/e2e-cli-setup)")
            continue
        for mode in counted:  # start each installation's helper
            workspace(agent, root, runtime, netns, mode, other).run([AGENTS[agent].shell("true")])
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        cpu: dict[str, list[float]] = {mode: [] for mode in modes}
        invocations: dict[str, list[float]] = {mode: [] for mode in counted}
        for _ in range(rounds):
            for mode in modes:
                ws = workspace(agent, root, runtime, netns, mode, other)
                wall, per_call = session(ws, calls)
                samples[mode] += wall
                cpu[mode].append(per_call)
            for mode in counted:
                ws = workspace(agent, root, runtime, netns, mode, other)
                invocations[mode].append(count_hooks(ws, calls))
        for label, data in (("wall", samples), ("cpu", cpu)):
            bare = statistics.median(data["bare"])
            cells = [f"{bare * 1000:13.0f} ms"]
            for mode in modes[1:]:
                cells.append(f"{(statistics.median(data[mode]) - bare) * 1000:+13.0f} ms")
            cells += [f"{statistics.median(invocations[mode]):9.2f}" for mode in counted]
            name = f"{agent} {label}"
            print(f"{name:16}" + "".join(f"{c:>16}" for c in cells[: len(modes)]), end="")
            print("".join(f"{c:>12}" for c in cells[len(modes) :]))
    print(
        "(bare: one call without hooks; the other columns: added per call. wall: gap between\n"
        " model requests; cpu: CPU of the CLI, its hook processes and the helper, per call)"
    )


def run_timed(argv: list[str], env: dict[str, str], stdin: bytes) -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    return time.perf_counter() - start


def event(kind: str, n: int) -> bytes:
    base: dict[str, Any] = {
        "session_id": "bench",
        "transcript_path": "",
        "cwd": "/work/project",
        "prompt_id": "bench-prompt",
        "permission_mode": "default",
        "hook_event_name": kind,
        "tool_name": "Bash",
        "tool_input": {"command": f"ls src/{n}", "description": "list"},
        "tool_use_id": f"toolu_{n:06d}",
    }
    if kind == "PostToolUse":
        base["tool_response"] = {"stdout": f"file{n}", "stderr": "", "interrupted": False}
    return json.dumps(base).encode()


ROUND_TRIP = """
import sys, time, json
from loopwarden.cli import hook
payloads = [p.encode() for p in json.loads(sys.stdin.read())]
start = time.perf_counter()
for p in payloads:
    assert hook._forward(["claude-code"], p) is not None, "no helper"
print((time.perf_counter() - start) / len(payloads))
"""


def part2(samples: int, root: Path, runtime: Path) -> None:
    home = root / "home2"
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOOPWARDEN_")},
        "HOME": str(home),
        "LOOPWARDEN_RUNTIME_DIR": str(runtime),
    }
    hook = [str(LOOPWARDEN), "hook", "claude-code"]
    installed = shlex.split(hook_command("claude-code"))
    run_timed(hook, env, event("PreToolUse", 0))  # starts the helper
    for _ in range(100):
        if run_timed(hook, env, event("PreToolUse", 0)) < 5:
            break
    cases: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        cases.setdefault(name, []).append(seconds)

    for n in range(1, samples + 1):
        add("python -c pass", run_timed([PYTHON, "-c", "pass"], env, b""))
        add("python -S -c pass", run_timed([PYTHON, "-S", "-c", "pass"], env, b""))
        add("installed command (helper)", run_timed(installed, env, event("PreToolUse", n)))
        add("loopwarden hook Pre (helper)", run_timed(hook, env, event("PreToolUse", n)))
        add("loopwarden hook Post (helper)", run_timed(hook, env, event("PostToolUse", n)))
        if n % 5 == 0:
            add(
                "hook PreToolUse --no-daemon",
                run_timed([*hook, "--no-daemon"], env, event("PreToolUse", n)),
            )
    payloads = json.dumps([event("PostToolUse", 10_000 + i).decode() for i in range(samples)])
    done = subprocess.run(
        [PYTHON, "-c", ROUND_TRIP], input=payloads.encode(), env=env, capture_output=True
    )
    print(f"\nPart 2: one hook call, Claude Code event ({samples} samples, medians)")
    base = statistics.median(cases["python -c pass"])
    for name, values in cases.items():
        median = statistics.median(values)
        print(f"  {name:30} {median * 1000:7.1f} ms  {median / base:5.2f}x")
    if done.returncode == 0:
        trip = float(done.stdout) * 1000
        print(f"  {'socket round trip + helper':30} {trip:7.1f} ms  (in one process)")
    else:
        print(f"  round trip not measured: {done.stderr.strip().splitlines()[-1:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--part", choices=["1", "2", "both"], default="both")
    parser.add_argument(
        "--compare", metavar="LOOPWARDEN", help="another installation's loopwarden executable"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    try:
        if args.part in ("1", "both"):
            part1(args.agents.split(","), args.calls, args.rounds, root, runtime, args.compare)
        if args.part in ("2", "both"):
            part2(args.samples, root, runtime)
    finally:
        env = {**os.environ, "LOOPWARDEN_RUNTIME_DIR": str(runtime)}
        subprocess.run([str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
