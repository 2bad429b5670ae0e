"""Per-tool-call cost of loopwarden in OpenCode (plugin) and Cline CLI (hook files).

Runs the same scripted session (``--calls`` shell calls whose command and output
change every time, so nothing is warned: Cline's own rule would stop identical
calls) in each CLI, inside the e2e sandbox (network namespace, fake Anthropic API
on loopback), in three set-ups, interleaved round by round:

* ``bare``: nothing of loopwarden's;
* ``no-op``: loopwarden's files with their work taken out (OpenCode: a plugin with
  the same hooks doing nothing; Cline: the two hook files running ``cat >/dev/null``),
  what the CLI itself spends on a plugin or a hook file;
* ``loopwarden``: ``loopwarden install AGENT`` as is (hook helper already running).

The time of one call is the gap between the model requests before and after it,
as the fake API saw them; CPU is the CLI's, with every process it waited for and
the hook helper. Medians over all calls of all rounds.

Run: ``python benchmarks/bench_file_agents.py [--calls 20] [--rounds 3] [--agents
opencode cline]`` (wall-clock figures: run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_cli_hooks import helpers_cpu

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import AGENTS, LOOPWARDEN, Workspace, cli_path, netns_prefix  # noqa: E402

from loopwarden.hooks import fileinstall  # noqa: E402

NOOP_PLUGIN = """\
export default async () => ({
  "tool.execute.before": async () => {},
  "tool.execute.after": async () => {},
  "chat.params": async () => {},
  "chat.message": async () => {},
  event: async () => {},
});
"""
NOOP_HOOK = "#!/bin/sh\ncat >/dev/null\n"


def workspace(agent: str, root: Path, runtime: Path, netns: list[str], setup: str) -> Workspace:
    ws = Workspace(agent, root, runtime, netns)
    # The user's own plugin/hook would count for every set-up: take it out.
    for own in (ws.home / ".config/opencode/plugins/audit.js", ws.home / ".cline/hooks/PreToolUse"):
        own.unlink(missing_ok=True)
    if setup == "bare":
        return ws
    ws.install()
    if setup == "no-op":
        directory = fileinstall.target_dir(agent, "user", ws.env(), ws.work)
        for path in fileinstall.find_own(directory):
            path.write_text(NOOP_PLUGIN if agent == "opencode" else NOOP_HOOK)
    return ws


def session(ws: Workspace, calls: int) -> tuple[list[float], float]:
    before = helpers_cpu(ws.runtime)
    steps = [
        AGENTS[ws.agent].shell(f"echo run >> {ws.count_file}; echo step {i}") for i in range(calls)
    ]
    outcome = ws.run(steps)
    assert outcome.executions == calls, f"{ws.agent}: {outcome.executions} of {calls} calls ran"
    helper = helpers_cpu(ws.runtime) - before
    times = [r["t"] for r in outcome.main]
    return [b - a for a, b in itertools.pairwise(times)], (outcome.runs[-1].cpu + helper) / calls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", nargs="*", default=["opencode", "cline"])
    args = parser.parse_args()
    netns = netns_prefix()
    if netns is None:
        print("no network namespaces here (unshare -n)", file=sys.stderr)
        return 1
    setups = ["bare", "no-op", "loopwarden"]
    base = Path(tempfile.mkdtemp(prefix="lw-bench-files-"))
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    try:
        for agent in args.agents:
            if not cli_path(agent).exists():
                print(f"{agent}: not installed (scripts/e2e-cli-setup)", file=sys.stderr)
                continue
            gaps: dict[str, list[float]] = {s: [] for s in setups}
            cpus: dict[str, list[float]] = {s: [] for s in setups}
            count = itertools.count()
            warm = workspace(agent, base / f"warm-{agent}", runtime, netns, "loopwarden")
            session(warm, 2)  # starts the helper: every measured round finds it running
            for _ in range(args.rounds):
                for setup in setups:
                    root = base / f"{agent}-{setup}-{next(count)}"
                    found, cpu = session(workspace(agent, root, runtime, netns, setup), args.calls)
                    gaps[setup] += found
                    cpus[setup].append(cpu)
            report(agent, args, gaps, cpus)
    finally:
        env = {"LOOPWARDEN_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}
        subprocess.run([str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, check=False)
        shutil.rmtree(base, ignore_errors=True)
    return 0


def report(
    agent: str, args: Any, gaps: dict[str, list[float]], cpus: dict[str, list[float]]
) -> None:
    bare = statistics.median(gaps["bare"])
    bare_cpu = statistics.median(cpus["bare"])
    print(f"{agent}: {args.calls} calls x {args.rounds} rounds, medians per call")
    for setup in gaps:
        wall = statistics.median(gaps[setup])
        cpu = statistics.median(cpus[setup])
        extra = (
            ""
            if setup == "bare"
            else f"  (+{(wall - bare) * 1000:.0f} ms, CPU +{(cpu - bare_cpu) * 1000:.0f} ms)"
        )
        print(f"  {setup:<11} {wall * 1000:6.0f} ms  CPU {cpu * 1000:5.0f} ms{extra}")


if __name__ == "__main__":
    sys.exit(main())
