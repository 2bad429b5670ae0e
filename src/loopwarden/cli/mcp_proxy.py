"""``loopwarden mcp-proxy``: serve an MCP proxy that guards ``tools/call`` of upstream servers.

::

    loopwarden mcp-proxy [--config FILE] -- npx -y @modelcontextprotocol/server-github
    loopwarden mcp-proxy --upstream http://127.0.0.1:8000/mcp
    loopwarden mcp-proxy --http --port 8765 -- python my_server.py

stdout is the MCP channel in stdio mode, so everything this command says goes
to stderr. The MCP SDK is imported only after the arguments are parsed.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from typing import Any

__all__ = ["main"]

_PROG = "loopwarden mcp-proxy"
_DEFAULT_CONFIG: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        usage=(f"{_PROG} [options] (--upstream [NAME=]URL ... | -- COMMAND [ARGS...])"),
        description=(
            "Serve an MCP server that fronts upstream MCP servers and runs every tools/call "
            "through loopwarden's loop guard: warnings are appended to results, looping calls "
            "are answered with an error instead of being run, and a run that reaches the "
            "circuit breaker is stopped. Everything else passes through."
        ),
        epilog=(
            "Without --config, loop detection is enabled with OpenClaw's default thresholds. "
            "A stdio upstream inherits this process's environment; its stderr goes to ours."
        ),
    )
    parser.add_argument("--config", metavar="FILE", help="loopwarden/OpenClaw config (JSON5/JSON)")
    parser.add_argument("--agent", metavar="ID", help="agent id whose per-agent block applies")
    parser.add_argument(
        "--name",
        default="loopwarden",
        help="server name shown to the client (default: %(default)s)",
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="[NAME=]URL",
        help="streamable-HTTP upstream server (repeatable)",
    )
    parser.add_argument(
        "--prefix",
        choices=("auto", "always", "never"),
        default="auto",
        help="prefix tool and prompt names with '<upstream>__' (auto: with several upstreams)",
    )
    parser.add_argument(
        "--run-idle",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a call after this much idle time starts a new agent run; 0: one run per "
        "session (default: %(default)g)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="time allowed for each upstream to start (default: %(default)g)",
    )
    parser.add_argument(
        "--http", action="store_true", help="serve streamable HTTP instead of stdio"
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (default: %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=8765,
        help="HTTP port, 0 for any free one (default: %(default)s)",
    )
    parser.add_argument("--path", default="/mcp", help="HTTP endpoint path (default: %(default)s)")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --host to be a non-loopback address (the proxy has no authentication)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="stderr log level (default: %(default)s)",
    )
    return parser


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _NoSdkTracebacks(logging.Filter):
    """The MCP SDK logs tracebacks for upstream noise (e.g. a print on stdout); keep the line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not record.name.startswith("loopwarden"):
            first = (str(exc).strip().splitlines() or [""])[0]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {first})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def _setup_logging(level: str) -> None:
    """Everything to stderr: in stdio mode stdout carries the MCP messages."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if level != "debug":
        handler.addFilter(_NoSdkTracebacks())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING if level != "debug" else logging.DEBUG)
    logging.getLogger("loopwarden").setLevel(level.upper())


def _fail(message: str, code: int = 1) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    """Run the proxy until the client disconnects or a signal arrives; returns the exit code."""
    if "--" in argv:
        cut = argv.index("--")
        options, command = argv[:cut], argv[cut + 1 :]
    else:
        options, command = argv, []
    parser = _parser()
    args = parser.parse_args(options)
    if not command and not args.upstream:
        parser.print_usage(sys.stderr)
        return _fail("give an upstream: --upstream URL, or -- COMMAND [ARGS...]", 2)
    if args.http and not args.allow_remote and not _is_loopback(args.host):
        return _fail(
            f"--host {args.host} is not a loopback address; the proxy has no authentication. "
            "Pass --allow-remote to serve it anyway.",
            2,
        )
    if args.connect_timeout <= 0:
        return _fail(f"--connect-timeout must be positive, got {args.connect_timeout:g}", 2)
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port} is not a port number", 2)
    _setup_logging(args.log_level)

    from ..errors import ConfigError

    try:
        from ..guard import LoopGuard

        guard = LoopGuard(
            args.config if args.config is not None else _DEFAULT_CONFIG, agent_id=args.agent
        )
    except ConfigError as exc:
        return _fail(str(exc), 2)
    except OSError as exc:
        return _fail(f"cannot read config {args.config}: {exc.strerror or exc}", 2)
    except Exception as exc:  # e.g. a state store that cannot be opened
        return _fail(f"cannot set up the loop guard: {type(exc).__name__}: {exc}")

    try:
        from ..integrations import mcp as lw_mcp
    except ImportError as exc:
        return _fail(str(exc))

    upstreams = []
    try:
        for spec in args.upstream:
            name, sep, url = spec.partition("=")
            if not sep or "://" in name:
                name, url = "", spec
            upstreams.append(lw_mcp.Upstream.http(url, name=name or None))
    except ValueError as exc:
        return _fail(f"--upstream: {exc}", 2)
    if command:
        upstreams.append(lw_mcp.Upstream.stdio(command[0], command[1:]))

    import anyio

    try:
        code: int = anyio.run(_serve, lw_mcp, args, upstreams, guard)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # never a traceback into the client's log unless asked
        logging.getLogger("loopwarden").debug("mcp-proxy failed", exc_info=exc)
        inner = lw_mcp._innermost(exc)
        known = isinstance(inner, lw_mcp.UpstreamError)
        code = _fail(str(inner) if known else lw_mcp._reason(inner))
    finally:
        guard.close()
    return code


async def _serve(lw_mcp: Any, args: argparse.Namespace, upstreams: list[Any], guard: Any) -> int:
    import signal

    import anyio

    prefix = {"auto": None, "always": True, "never": False}[args.prefix]
    proxy = lw_mcp.GuardedProxy(
        upstreams,
        guard,
        name=args.name,
        run_idle_seconds=args.run_idle or None,
        prefix_tools=prefix,
        connect_timeout=args.connect_timeout,
    )
    log = logging.getLogger("loopwarden")
    stop = anyio.Event()
    code = 0
    async with anyio.create_task_group() as tg:

        async def watch_signals(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                task_status.started()
                async for _ in signals:
                    if stop.is_set() or not args.http:
                        tg.cancel_scope.cancel()
                        return
                    stop.set()  # graceful: uvicorn finishes open requests first

        # Before connecting upstreams: a SIGTERM during start-up still cleans up.
        await tg.start(watch_signals)
        async with proxy:
            log.info(
                "%s: guarding %d tools from %s",
                _PROG,
                len(proxy.tool_names),
                ", ".join(u.describe() for u in proxy.upstreams),
            )
            if args.http:

                def ready(url: str) -> None:
                    print(f"{_PROG}: serving MCP at {url}", file=sys.stderr, flush=True)

                try:
                    await proxy.serve_http(
                        args.host, args.port, path=args.path, on_ready=ready, should_exit=stop
                    )
                except OSError as exc:
                    code = _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
            else:
                await proxy.serve_stdio()
        tg.cancel_scope.cancel()
    return code
