"""Per-tool-call cost of loopwarden's hooks, measured from each real coding-agent CLI.

Part 1 runs the same scripted session (``--calls`` shell calls whose output
changes every time, so loopwarden allows them all) in each CLI installed by
``scripts/e2e-cli-setup``, inside the e2e sandbox (network namespace, fake model
API on loopback), in these set-ups, interleaved round by round:

* ``no hook``: no hook at all;
* ``no-op hook``: loopwarden's command hooks with the command replaced by
  ``cat >/dev/null`` (what the CLI itself spends per command hook);
* ``command hook``: loopwarden's hook command, the Python process per event
  (Claude Code: ``install --command``; Codex CLI, Gemini CLI: the Python hook
  command the shell hook stands in for);
* ``no-op HTTP hook`` (Claude Code): its HTTP hooks pointed at an endpoint of the
  fake API that answers ``{}`` at once (what Claude Code itself spends per HTTP hook);
* ``HTTP hook`` (Claude Code: ``install``, its HTTP hooks) and ``shell hook``
  (Codex CLI, Gemini CLI: ``install``, the bash command that talks to the
  helper's HTTP port): what ``loopwarden install AGENT`` writes;
* ``--compare PATH``: the same with another installation's ``loopwarden``.

The time of one tool call is read at the fake API: the gap between the model
request that made the call and the next one (tool run + hooks + CLI overhead).
Each set-up's figure is its median (and lower quartile) minus that without
hooks, printed beside its target: Claude Code's HTTP hooks add at most 5 ms per tool call;
the shell hook cuts at least half of what the Python command hook adds above
a no-op hook. CPU time per call (the CLI with every process it waited for,
plus the hook helper) is printed too: on a busy machine it is much steadier
than wall time. A counting pass counts hook processes per tool call.

Part 2 splits one hook event (a Codex ``PreToolUse``): a no-op command, bash
and Python start-up, loopwarden's imports, each whole hook command with the
helper running, and the helper round trip measured inside one process (Unix
socket, HTTP).

Part 3 runs one session per CLI against a helper started by this script with
its event handler timed: the helper's work per event, and how much of it is
the state store (SQLite) and the transcript reads.

Run: ``python benchmarks/bench_cli_hooks.py [--calls 30] [--rounds 3] [--agents ...]
[--part 1|2|3|all] [--compare /path/to/other/venv/bin/loopwarden]`` (a benchmark,
not a test; wall-clock figures, so run it on a quiet machine).
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import (  # noqa: E402
    AGENTS,
    LOOPWARDEN,
    Workspace,
    cli_path,
    netns_prefix,
)

from loopwarden.hooks import shellhook  # noqa: E402
from loopwarden.hooks.settings import hook_command, split_hook_command  # noqa: E402

PYTHON = sys.executable
CLIS = ("claude-code", "codex", "gemini")
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
HTTP_TARGET_MS = 5.0
"""Claude Code's HTTP hooks: at most this much added per tool call (wall)."""
SHELL_TARGET = 0.5
"""The shell hook: at most this share of what the Python command hook adds above a no-op."""


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
    assert outcome.executions == calls, f"{ws.agent}: {outcome.executions} of {calls} calls ran"
    return [b - a for a, b in itertools.pairwise(times)], (outcome.runs[-1].cpu + helper) / calls


def rewrite(ws: Workspace, change: Callable[[str], str]) -> None:
    """Rewrite every loopwarden command hook's command."""
    data = json.loads(ws.settings.read_text())
    for groups in data.get("hooks", {}).values():
        for group in groups:
            for handler in group.get("hooks", []):
                command = handler.get("command", "")
                if handler.get("type") == "command" and "loopwarden" in command:
                    handler["command"] = change(command)
    ws.settings.write_text(json.dumps(data))


def python_command(command: str) -> str:
    """The Python hook command a shell hook command stands in for."""
    found = split_hook_command(command)
    if found is None or shellhook.SCRIPT.name not in command:
        return command
    launcher, hook = found
    return shlex.join([*launcher[3:], *hook])


def modes(agent: str, other: str | None) -> list[str]:
    if agent == "claude-code":
        own = ["no-op hook", "no-op HTTP hook", "command hook", "HTTP hook"]
    else:
        own = ["no-op hook", "command hook", "shell hook"]
    return ["no hook", *own, *(["compared"] if other else [])]


def noop_http(ws: Workspace) -> None:
    """Claude Code's HTTP hooks pointed at the fake API's do-nothing endpoint."""
    from tests.e2e.fakeapi import NOOP_HOOK_PATH

    from loopwarden.hooks.httpkeys import free_port

    ws.api_port = free_port()
    data = json.loads(ws.settings.read_text())
    for groups in data.get("hooks", {}).values():
        for group in groups:
            for handler in group.get("hooks", []):
                if handler.get("type") == "http":
                    handler["url"] = f"http://127.0.0.1:{ws.api_port}{NOOP_HOOK_PATH}"
                elif "loopwarden" in handler.get("command", ""):
                    handler["command"] = "cat >/dev/null"
    ws.settings.write_text(json.dumps(data))


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
    elif mode == "no-op hook":
        ws.install(*(["--command"] if agent == "claude-code" else []))
        rewrite(ws, lambda _: "cat >/dev/null")
    elif mode == "command hook":
        ws.install(*(["--command"] if agent == "claude-code" else []))
        rewrite(ws, python_command)
    elif mode in ("HTTP hook", "shell hook"):
        ws.install()
    elif mode == "no-op HTTP hook":
        ws.install()
        noop_http(ws)
    return ws


def count_hooks(ws: Workspace, calls: int) -> float:
    """Hook processes per tool call of one session (HTTP hooks start none)."""
    counter = ws.root / "hook-calls"
    rewrite(ws, lambda command: f"echo . >> {counter}; {command}")
    ws.run([ws.progress(calls)])
    return len(counter.read_text().splitlines()) / calls if counter.exists() else 0.0


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds), in ms. The lower quartile is less moved
    by other work on the machine, which only ever adds time."""
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] * 1000


def verdict(label: str, added: float, target: float) -> str:
    return (
        f"{added:+.1f} ms (target {label}{target:.1f} ms: {'met' if added <= target else 'MISSED'})"
    )


def part1(
    agents: list[str], calls: int, rounds: int, root: Path, runtime: Path, other: str | None
) -> None:
    netns = netns_prefix()
    if netns is None:
        print("part 1 skipped: no network namespaces here")
        return
    print(f"Part 1: one tool call as seen by the CLI ({calls} calls x {rounds} rounds, medians)")
    if other:
        print(f"  compared: {other}")
    for agent in agents:
        if not cli_path(agent).exists():
            print(f"{agent:12} not installed (scripts/e2e-cli-setup)")
            continue
        names = modes(agent, other)
        hooked = [m for m in names if m not in ("no hook", "no-op hook", "no-op HTTP hook")]
        for mode in hooked:  # start the helper, hand it the port
            workspace(agent, root, runtime, netns, mode, other).run([AGENTS[agent].shell("true")])
        wall: dict[str, list[float]] = {mode: [] for mode in names}
        cpu: dict[str, list[float]] = {mode: [] for mode in names}
        processes: dict[str, list[float]] = {mode: [] for mode in hooked}
        for _ in range(rounds):
            for mode in names:
                gaps, per_call = session(workspace(agent, root, runtime, netns, mode, other), calls)
                wall[mode] += gaps
                cpu[mode].append(per_call)
            for mode in hooked:
                ws = workspace(agent, root, runtime, netns, mode, other)
                processes[mode].append(count_hooks(ws, calls))
        bare = {q: quantile(wall["no hook"], q) for q in (0.25, 0.5)}
        bare_cpu = statistics.median(cpu["no hook"]) * 1000
        print(
            f"\n{agent}: no hook {bare[0.5]:.0f} ms per call (quartile {bare[0.25]:.0f} ms; "
            f"CPU {bare_cpu:.0f} ms)"
        )
        added: dict[str, dict[float, float]] = {}
        for mode in names[1:]:
            added[mode] = {q: quantile(wall[mode], q) - bare[q] for q in (0.25, 0.5)}
            more_cpu = statistics.median(cpu[mode]) * 1000 - bare_cpu
            count = statistics.median(processes[mode]) if mode in processes else None
            per = f", {count:.2f} hook processes per call" if count is not None else ""
            print(
                f"  {mode:16} {added[mode][0.5]:+7.1f} ms (quartile {added[mode][0.25]:+.1f}; "
                f"CPU {more_cpu:+.1f} ms){per}"
            )
        for q, label in ((0.5, "median"), (0.25, "quartile")):
            if agent == "claude-code":
                fast = added["HTTP hook"][q]
                own = added["no-op HTTP hook"][q]
                print(
                    f"  {label}: HTTP hook {verdict('<= ', fast, HTTP_TARGET_MS)}; Claude Code's "
                    f"own no-op HTTP hooks {own:+.1f} ms, loopwarden above: {fast - own:+.1f} ms"
                )
            else:
                above_python = added["command hook"][q] - added["no-op hook"][q]
                above_shell = added["shell hook"][q] - added["no-op hook"][q]
                print(
                    f"  {label}: above the no-op hook, command hook {above_python:+.1f} ms, shell "
                    + verdict("<= half of that, ", above_shell, SHELL_TARGET * above_python)
                )
    print(
        "\n(no hook: one call without hooks; the others: added per call. wall: gap between\n"
        " model requests; CPU: the CLI, its hook processes and the helper, per call)"
    )


def run_timed(argv: list[str] | str, env: dict[str, str], stdin: bytes) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, input=stdin, env=env, capture_output=True, check=False, shell=isinstance(argv, str)
    )
    return time.perf_counter() - start


def codex_event(n: int) -> bytes:
    return json.dumps(
        {
            "session_id": "bench",
            "turn_id": "bench-turn",
            "transcript_path": "",
            "cwd": "/work/project",
            "hook_event_name": "PreToolUse",
            "model": "gpt-5.1-codex",
            "permission_mode": "default",
            "tool_name": "Bash",
            "tool_input": {"command": f"ls src/{n}"},
            "tool_use_id": f"call_{n}",
        }
    ).encode()


ROUND_TRIPS = """
import json, os, socket, sys, time
from loopwarden.hooks._protocol import forward
from loopwarden.hooks.httpkeys import env_header, load_keys
payloads = [p.encode() for p in json.loads(sys.stdin.read())]
start = time.perf_counter()
for p in payloads:
    assert forward(["codex"], p) is not None, "no helper"
unix = (time.perf_counter() - start) / len(payloads)
keys = load_keys(os.environ)
sock = socket.create_connection(("127.0.0.1", keys.port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
head = (
    f"POST /loopwarden/v1/run/codex HTTP/1.1\\r\\nHost: 127.0.0.1:{keys.port}\\r\\n"
    f"X-Loopwarden-Token: {keys.token}\\r\\n{env_header('HOME')}: {os.environ['HOME']}\\r\\n"
)
start = time.perf_counter()
for p in payloads:
    sock.sendall(f"{head}Content-Length: {len(p)}\\r\\n\\r\\n".encode() + p)
    data = b""
    while b"\\r\\n\\r\\n" not in data:
        data += sock.recv(65536)
    top, _, body = data.partition(b"\\r\\n\\r\\n")
    assert top.startswith(b"HTTP/1.1 200 "), top
    size = int(top.lower().split(b"content-length: ")[1].split(b"\\r\\n")[0])
    while len(body) < size:
        body += sock.recv(65536)
http = (time.perf_counter() - start) / len(payloads)
print(json.dumps([unix, http]))
"""


def part2(samples: int, root: Path, runtime: Path) -> None:
    home = root / "home2"
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_"))},
        "HOME": str(home),
        "LOOPWARDEN_RUNTIME_DIR": str(runtime),
    }
    done = subprocess.run([str(LOOPWARDEN), "install", "codex"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    shell = hook_command("codex")
    python = python_command(shell)
    found = split_hook_command(python)
    assert found is not None
    launcher = found[0]
    imports = [*launcher[:3], launcher[3].split("from ")[0] + "import loopwarden.hooks._protocol"]
    run_timed(shell, env, codex_event(0))  # starts the helper, hands it the port
    for _ in range(100):
        if run_timed(shell, env, codex_event(0)) < 1:
            break
    bash = shellhook.bash_path() or "bash"
    cases: dict[str, list[float]] = {}
    for n in range(1, samples + 1):
        event = codex_event(n)
        for name, argv in (
            ("no-op hook (sh -c 'cat >/dev/null')", "cat >/dev/null"),
            ("bash start", [bash, "-c", "true"]),
            ("python -S start", [PYTHON, "-S", "-c", "pass"]),
            ("python -S + loopwarden's imports", imports),
            ("command hook (Python, helper up)", python),
            ("shell hook (bash, helper up)", shell),
        ):
            cases.setdefault(name, []).append(run_timed(argv, env, event))
    payloads = json.dumps([codex_event(10_000 + i).decode() for i in range(samples)])
    trips = subprocess.run(
        [PYTHON, "-c", ROUND_TRIPS], input=payloads.encode(), env=env, capture_output=True
    )
    print(f"\nPart 2: one hook event, Codex PreToolUse ({samples} samples, medians)")
    for name, values in cases.items():
        print(f"  {name:38} {statistics.median(values) * 1000:7.2f} ms")
    if trips.returncode == 0:
        unix, http = json.loads(trips.stdout)
        print(f"  {'helper round trip, Unix socket':38} {unix * 1000:7.2f} ms  (in one process)")
        print(
            f"  {'helper round trip, HTTP (kept alive)':38} {http * 1000:7.2f} ms  (in one process)"
        )
    else:
        print(f"  round trips not measured: {trips.stderr.decode().strip().splitlines()[-1:]}")


TIMED_HELPER = """
import json, os, sys, threading, time, cProfile, pstats
from loopwarden.hooks import daemon
from loopwarden.hooks._protocol import socket_path
lock = threading.Lock()
profile = cProfile.Profile()
times = []
original = daemon.handle
def timed(ctx, argv, env, cwd, payload):
    with lock:
        start = time.perf_counter()
        profile.enable()
        try:
            return original(ctx, argv, env, cwd, payload)
        finally:
            profile.disable()
            try:
                name = json.loads(payload).get("hook_event_name", "?")
            except ValueError:
                name = "?"
            times.append((argv[0], name, time.perf_counter() - start))
daemon.handle = timed
daemon.serve(socket_path(os.environ), 600.0)
stats = pstats.Stats(profile).stats
store = sum(s[2] for (file, _, func), s in stats.items() if "sqlite3" in func)
transcript = sum(
    s[3] for (file, _, func), s in stats.items()
    if file.endswith("transcript.py") and func in ("read_window", "scan")
)
json.dump({"times": times, "store": store, "transcript": transcript}, sys.stdout)
"""


def part3(agents: list[str], calls: int, root: Path) -> None:
    netns = netns_prefix()
    if netns is None:
        print("part 3 skipped: no network namespaces here")
        return
    runtime = root / "run3"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "LOOPWARDEN_RUNTIME_DIR": str(runtime), "HOME": str(root)}
    helper = subprocess.Popen(
        [PYTHON, "-c", TIMED_HELPER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    from loopwarden.hooks.daemon import wait_for_start

    for _ in range(200):
        if wait_for_start(env, 0.1) is not None:
            break
        time.sleep(0.05)
    for agent in agents:
        if cli_path(agent).exists():
            ws = workspace(agent, root / "part3", runtime, netns, modes(agent, None)[3], None)
            ws.run([ws.progress(calls)])
    subprocess.run([str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True)
    out, err = helper.communicate(timeout=60)
    try:
        data = json.loads(out)
    except ValueError:
        print(f"part 3 failed: {err.decode()[-500:]}")
        return
    print(f"\nPart 3: the helper's work per event ({calls} calls per CLI; medians)")
    by_kind: dict[tuple[str, str], list[float]] = {}
    for agent, name, seconds in data["times"]:
        by_kind.setdefault((agent, name), []).append(seconds)
    for (agent, name), values in sorted(by_kind.items()):
        median = statistics.median(values) * 1000
        print(f"  {agent:12} {name:18} {median:6.2f} ms  ({len(values)} events)")
    total = sum(seconds for _, _, seconds in data["times"]) or 1.0
    print(
        f"  of all of it (profiled): state store (SQLite calls) {data['store'] / total:.0%}, "
        f"transcript reads {data['transcript'] / total:.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--agents", default=",".join(CLIS))
    parser.add_argument("--part", choices=["1", "2", "3", "all"], default="all")
    parser.add_argument(
        "--compare", metavar="LOOPWARDEN", help="another installation's loopwarden executable"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    agents = args.agents.split(",")
    try:
        if args.part in ("1", "all"):
            part1(agents, args.calls, args.rounds, root, runtime, args.compare)
        if args.part in ("2", "all"):
            part2(args.samples, root, runtime)
        if args.part in ("3", "all"):
            part3(agents, args.calls, root)
    finally:
        env = {**os.environ, "LOOPWARDEN_RUNTIME_DIR": str(runtime)}
        subprocess.run([str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
