"""Latency a ``loopwarden mcp-proxy`` hop adds to each ``tools/call``.

The same ``mcp.Client`` calls the same tool of the same upstream server (the
test upstream, ``tests/mcp/upstream_server.py``, on the MCP SDK) three ways,
all over stdio:

* ``direct``: the client launches the upstream itself;
* ``proxy, guard off``: through ``loopwarden mcp-proxy`` with
  ``enabled: false`` (the hop alone: one more process and JSON-RPC round trip);
* ``proxy, guard on``: through ``loopwarden mcp-proxy`` with loop detection on.

A second table does the same in one process (``mcp.Client`` connected to the
server objects directly), without pipes and process switches; a third times
only the proxy's own per-call work (run lookup, guard check, outcome view,
outcome record) without any MCP traffic.

Each call is ``poll_status(job=<n>)`` with a new ``n``, so the guard allows every
call (the common case) and checks and records each one. The cases alternate
within every round and the best round counts, as this runs on shared, noisy VMs.

Run: ``python benchmarks/bench_mcp_proxy.py`` (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
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

Case = Callable[[int, int], Awaitable[float]]


def loopwarden_script() -> str:
    script = Path(sys.executable).with_name("loopwarden")
    return str(script) if script.exists() else "loopwarden"


def caller(client: Client) -> Case:
    async def run(start: int, calls: int) -> float:
        begin = time.perf_counter()
        for n in range(start, start + calls):
            result = await client.call_tool("poll_status", {"job": str(n)})
            if result.is_error:
                raise RuntimeError(f"unexpected error result: {result.content}")
        return time.perf_counter() - begin

    return run


async def measure(cases: dict[str, Case], calls: int, rounds: int) -> dict[str, float]:
    """Best microseconds per call of each case over interleaved rounds."""
    best = {name: float("inf") for name in cases}
    start = 0
    for _ in range(rounds):
        for name, run in cases.items():
            gc.collect()
            gc.disable()
            try:
                seconds = await run(start, calls)
            finally:
                gc.enable()
            start += calls
            best[name] = min(best[name], seconds / calls * 1e6)
    return best


def report(title: str, results: dict[str, float]) -> None:
    direct = results["direct"]
    print(f"\n{title}")
    print(f"{'case':24} {'us/call':>10} {'added':>10}")
    for name, value in results.items():
        added = "" if name == "direct" else f"{value - direct:+10.0f}"
        print(f"{name:24} {value:10.0f} {added:>10}")


async def over_stdio(calls: int, rounds: int, config_dir: Path) -> dict[str, float]:
    env = dict(os.environ)
    upstream = [sys.executable, str(UPSTREAM)]
    configs = {}
    for name, config in (("on", ON), ("off", OFF)):
        configs[name] = config_dir / f"{name}.json"
        configs[name].write_text(json.dumps(config), encoding="utf-8")

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
        for run in cases.values():  # warm up: first calls compile schemas, fill caches
            await run(-50, 50)
        return await measure(cases, calls, rounds)


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
        for run in cases.values():
            await run(-50, 50)
        return await measure(cases, calls, rounds)


async def guard_work(calls: int, rounds: int) -> dict[str, float]:
    """The proxy's own per-call work (run lookup, check, outcome view, record), no MCP traffic."""
    import mcp_types as types

    import loopwarden as lw
    from loopwarden.integrations.mcp import _Guarding, _outcome_view

    text = "job 1: pending"
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content={"result": text}
    )
    tools = frozenset({"poll_status", "counter"})

    def case(config: dict[str, object]) -> Case:
        guarding = _Guarding(lw.LoopGuard(config), None)
        ctx: Any = SimpleNamespace(request=None, request_id=0, session=None)

        async def run(start: int, n: int) -> float:
            begin = time.perf_counter()
            for i in range(start, start + n):
                ctx.request_id = i
                args = {"job": str(i)}
                run_, session, call_id, _ = await guarding.before(ctx, "poll_status", args, tools)
                view = _outcome_view(result)
                await guarding.after(run_, session, "poll_status", args, call_id, result=view)
            return time.perf_counter() - begin

        return run

    cases = {"guard off": case(OFF), "guard on": case(ON)}
    return await measure(cases, calls, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per case and round")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"{args.calls} calls per case and round, best of {args.rounds} interleaved rounds")
    with tempfile.TemporaryDirectory() as tmp:
        stdio = anyio.run(over_stdio, args.calls, args.rounds, Path(tmp))
    report("stdio: client -> [proxy ->] upstream, each a process", stdio)
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
