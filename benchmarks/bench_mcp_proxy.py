"""Latency a ``loopwarden mcp-proxy`` hop adds to each ``tools/call``.

The same ``mcp.Client`` calls the same tool of the same upstream server (the
test upstream, ``tests/mcp/upstream_server.py``, on the MCP SDK) three ways,
over stdio and over streamable HTTP:

* ``direct``: the client talks to the upstream itself (launches it over stdio,
  or connects to its URL);
* ``proxy, guard off``: through ``loopwarden mcp-proxy`` with
  ``enabled: false`` (the hop alone: one more process and JSON-RPC round trip);
* ``proxy, guard on``: through ``loopwarden mcp-proxy`` with loop detection on.

Over HTTP the upstream is served by the MCP SDK (uvicorn) and the proxy runs
``--http --upstream URL``: client -> proxy and proxy -> upstream are both
HTTP on loopback. A further table does the same in one process
(``mcp.Client`` connected to the server objects directly), without pipes,
sockets and process switches; the last times only the proxy's own per-call
work (run lookup, guard check, outcome view, outcome record) without any MCP
traffic.

Each call is ``poll_status(job=<n>)`` with a new ``n``, so the guard allows every
call (the common case) and checks and records each one. The cases alternate
within every round; the figure is the median of all calls of a case (the
machine is shared and noisy), and "added" is that median minus the direct
call's.

Run: ``python benchmarks/bench_mcp_proxy.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "mcp" / "upstream_server.py"
sys.path.insert(0, str(ROOT))  # the test upstream lives in tests/mcp

ON = {"tools": {"loopDetection": {"enabled": True}}}
OFF = {"tools": {"loopDetection": {"enabled": False}}}

# (first job number, calls) -> seconds of each call
Case = Callable[[int, int], Awaitable[list[float]]]


def loopwarden_script() -> str:
    script = Path(sys.executable).with_name("loopwarden")
    return str(script) if script.exists() else "loopwarden"


def caller(client: Client) -> Case:
    async def run(start: int, calls: int) -> list[float]:
        times = []
        for n in range(start, start + calls):
            begin = time.perf_counter()
            result = await client.call_tool("poll_status", {"job": str(n)})
            times.append(time.perf_counter() - begin)
            if result.is_error:
                raise RuntimeError(f"unexpected error result: {result.content}")
        return times

    return run


async def measure(cases: dict[str, Case], calls: int, rounds: int) -> dict[str, float]:
    """Median microseconds per call of each case over interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    start = 0
    for run in cases.values():  # warm up: first calls compile schemas, fill caches
        await run(-50, 50)
    for _ in range(rounds):
        for name, run in cases.items():
            gc.collect()
            gc.disable()
            try:
                times[name] += await run(start, calls)
            finally:
                gc.enable()
            start += calls
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


def report(title: str, results: dict[str, float]) -> None:
    direct = results["direct"]
    print(f"\n{title}")
    print(f"{'case':24} {'us/call':>10} {'added':>10}")
    for name, value in results.items():
        added = "" if name == "direct" else f"{value - direct:+10.0f}"
        print(f"{name:24} {value:10.0f} {added:>10}")


def write_configs(config_dir: Path) -> dict[str, Path]:
    configs = {}
    for name, config in (("on", ON), ("off", OFF)):
        configs[name] = config_dir / f"{name}.json"
        configs[name].write_text(json.dumps(config), encoding="utf-8")
    return configs


async def over_stdio(calls: int, rounds: int, config_dir: Path) -> dict[str, float]:
    env = dict(os.environ)
    upstream = [sys.executable, str(UPSTREAM)]
    configs = write_configs(config_dir)

    def proxied(config: Path) -> StdioServerParameters:
        args = ["mcp-proxy", "--config", str(config), "--run-idle", "0", "--", *upstream]
        return StdioServerParameters(command=loopwarden_script(), args=args, env=env)

    targets = {
        "direct": StdioServerParameters(command=upstream[0], args=upstream[1:], env=env),
        "proxy, guard off": proxied(configs["off"]),
        "proxy, guard on": proxied(configs["on"]),
    }
    async with AsyncExitStack() as stack:
        cases = {
            name: caller(await stack.enter_async_context(Client(target)))
            for name, target in targets.items()
        }
        return await measure(cases, calls, rounds)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _process(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def _upstream_url(port: int, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP upstream exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the HTTP upstream did not listen on port {port}")


def _proxy_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # the proxy prints its address once it listens
        if "serving MCP at " in line:
            return line.split("serving MCP at ", 1)[1].strip()
        said.append(line)
    raise RuntimeError(f"the proxy exited with code {proc.wait()}: {''.join(said)}")


async def over_http(calls: int, rounds: int, config_dir: Path) -> dict[str, float]:
    configs = write_configs(config_dir)
    port = _free_port()
    with _process([sys.executable, str(UPSTREAM), "--http", str(port)]) as upstream_proc:
        direct = _upstream_url(port, upstream_proc)  # listening before the proxies connect
        with (
            _process(_http_proxy(configs["off"], direct)) as off_proc,
            _process(_http_proxy(configs["on"], direct)) as on_proc,
        ):
            urls = {
                "direct": direct,
                "proxy, guard off": _proxy_url(off_proc),
                "proxy, guard on": _proxy_url(on_proc),
            }
            async with AsyncExitStack() as stack:
                cases = {
                    name: caller(await stack.enter_async_context(Client(url)))
                    for name, url in urls.items()
                }
                return await measure(cases, calls, rounds)


def _http_proxy(config: Path, upstream: str) -> list[str]:
    options = ["--config", str(config), "--run-idle", "0", "--http", "--port", "0"]
    return [loopwarden_script(), "mcp-proxy", *options, "--upstream", upstream]


async def in_process(calls: int, rounds: int) -> dict[str, float]:
    from tests.mcp.upstream_server import build

    from loopwarden.integrations.mcp import GuardedProxy, Upstream

    async with AsyncExitStack() as stack:
        off = await stack.enter_async_context(GuardedProxy([Upstream(build())], OFF))
        on = await stack.enter_async_context(GuardedProxy([Upstream(build())], ON))
        cases = {
            "direct": caller(await stack.enter_async_context(Client(build()))),
            "proxy, guard off": caller(await stack.enter_async_context(Client(off.server))),
            "proxy, guard on": caller(await stack.enter_async_context(Client(on.server))),
        }
        return await measure(cases, calls, rounds)


async def guard_work(calls: int, rounds: int) -> dict[str, float]:
    """The proxy's own per-call work (run lookup, check, outcome view, record), no MCP traffic."""
    import mcp_types as types

    import loopwarden as lw
    from loopwarden.integrations.mcp._guarding import Guarding, outcome_view

    text = "job 1: pending"
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content={"result": text}
    )
    tools = frozenset({"poll_status", "counter"})

    def case(config: dict[str, object]) -> Case:
        guarding = Guarding(lw.LoopGuard(config), None)
        ctx: Any = SimpleNamespace(request=None, request_id=0, session=None)

        async def run(start: int, n: int) -> list[float]:
            times = []
            for i in range(start, start + n):
                begin = time.perf_counter()
                ctx.request_id = i
                args = {"job": str(i)}
                run_, session, call_id, _ = await guarding.before(ctx, "poll_status", args, tools)
                view = outcome_view(result)
                await guarding.after(ctx, run_, session, "poll_status", args, call_id, result=view)
                times.append(time.perf_counter() - begin)
            return times

        return run

    cases = {"guard off": case(OFF), "guard on": case(ON)}
    return await measure(cases, calls, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per case and round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--transport",
        choices=["stdio", "http", "both"],
        default="both",
        help="which process-to-process tables to run (default: both)",
    )
    args = parser.parse_args()
    print(f"{args.calls} calls per case and round, {args.rounds} interleaved rounds, medians")
    with tempfile.TemporaryDirectory() as tmp:
        if args.transport in ("stdio", "both"):
            stdio = anyio.run(over_stdio, args.calls, args.rounds, Path(tmp))
            report("stdio: client -> [proxy ->] upstream, each a process", stdio)
        if args.transport in ("http", "both"):
            http = anyio.run(over_http, args.calls, args.rounds, Path(tmp))
            report("streamable HTTP on loopback: client -> [proxy ->] upstream", http)
    report(
        "in-process: no pipes, no process switches", anyio.run(in_process, args.calls, args.rounds)
    )
    work = anyio.run(guard_work, args.calls * 10, args.rounds)
    print("\nthe proxy's own work per tools/call, without MCP traffic")
    print(f"{'case':24} {'us/call':>10}")
    for name, value in work.items():
        print(f"{name:24} {value:10.1f}")


if __name__ == "__main__":
    main()
