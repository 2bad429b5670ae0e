"""``loopwarden mcp-proxy``: serve an MCP proxy that guards ``tools/call`` of upstream servers.

::

    loopwarden mcp-proxy [--config FILE] -- npx -y @modelcontextprotocol/server-github
    loopwarden mcp-proxy --upstream http://127.0.0.1:8000/mcp
    loopwarden mcp-proxy --http --port 8765 -- python my_server.py
    loopwarden mcp-proxy --metrics 127.0.0.1:9464 -- python my_server.py

stdout is the MCP channel in stdio mode, so everything this command says goes
to stderr. The MCP SDK is imported only after the arguments are parsed.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any, NamedTuple

import click

from ._clickutil import (
    CONTEXT,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    CommandFailure,
    UsageFailure,
    echo_error,
    run_command,
)

__all__ = ["main"]

_PROG = "loopwarden mcp-proxy"
_DEFAULT_CONFIG: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}


class _ProxyCommand(click.Command):
    """Says in the usage line that an upstream is given after the options."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return ["[OPTIONS]", "(--upstream [NAME=]URL ... | -- COMMAND [ARGS...])"]


@click.command(
    name="mcp-proxy",
    cls=_ProxyCommand,
    help=(
        "Serve an MCP server that fronts upstream MCP servers and runs every tools/call "
        "through loopwarden's loop guard: warnings are appended to results, looping calls "
        "are answered with an error instead of being run, and a run that reaches the "
        "circuit breaker is stopped. Everything else passes through."
    ),
    epilog=(
        "Without --config, loop detection is enabled with OpenClaw's default thresholds. "
        "A stdio upstream inherits this process's environment; its stderr goes to ours."
    ),
    context_settings=CONTEXT,
)
@click.option("--config", metavar="FILE", help="loopwarden/OpenClaw config (JSON5/JSON).")
@click.option("--agent", metavar="ID", help="Agent id whose per-agent block applies.")
@click.option(
    "--name",
    default="loopwarden",
    metavar="NAME",
    help="Server name shown to the client (default: loopwarden).",
)
@click.option(
    "--upstream",
    "upstream_specs",
    multiple=True,
    metavar="[NAME=]URL",
    help="Streamable-HTTP upstream server (repeatable).",
)
@click.option(
    "--prefix",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    help="Prefix tool and prompt names with '<upstream>__' (auto: with several upstreams).",
)
@click.option(
    "--run-idle",
    type=float,
    default=300.0,
    metavar="SECONDS",
    help="A call after this much idle time starts a new agent run; 0: one run per "
    "session (default: 300).",
)
@click.option(
    "--connect-timeout",
    type=float,
    default=30.0,
    metavar="SECONDS",
    help="Time allowed for each upstream to start (default: 30).",
)
@click.option(
    "--max-message-bytes",
    type=int,
    default=None,
    metavar="BYTES",
    help="Longest message accepted from the client; a longer one is refused with an error "
    "(default: 268435456, 256 MiB, for a stdin line; 4194304, 4 MiB, for an HTTP body).",
)
@click.option(
    "--on-stop",
    type=click.Choice(["answer", "raise", "ask"]),
    default=None,
    help="What a stop does: answer (a last result telling the model to write its final "
    "answer), raise (a JSON-RPC error), ask (ask the person through MCP elicitation). "
    "Default: the config's loopwarden.onStop, else ask for a client that declared "
    "elicitation and answer for one that did not.",
)
@click.option(
    "--ask-timeout",
    type=float,
    default=600.0,
    metavar="SECONDS",
    help="Time a person has to answer a stop (--on-stop ask); no answer ends the run "
    "(default: 600).",
)
@click.option("--http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option(
    "--host", default="127.0.0.1", metavar="HOST", help="HTTP address (default: 127.0.0.1)."
)
@click.option(
    "--port",
    type=int,
    default=8765,
    metavar="PORT",
    help="HTTP port, 0 for any free one (default: 8765).",
)
@click.option("--path", default="/mcp", metavar="PATH", help="HTTP endpoint path (default: /mcp).")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow --host to be a non-loopback address (the proxy has no authentication).",
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs loopwarden[prometheus]; "
    "a non-loopback HOST needs --allow-remote).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    help="stderr log level (default: warning).",
)
@click.pass_obj
def mcp_proxy_command(command: list[str], /, **options: Any) -> int:
    args = _Options(**options)
    if not command and not args.upstream_specs:
        raise click.UsageError(
            "give an upstream: --upstream URL, or -- COMMAND [ARGS...]", click.get_current_context()
        )
    if args.http and not args.allow_remote and not _is_loopback(args.host):
        raise UsageFailure(
            f"--host {args.host} is not a loopback address; the proxy has no authentication. "
            "Pass --allow-remote to serve it anyway."
        )
    if args.connect_timeout <= 0:
        raise UsageFailure(f"--connect-timeout must be positive, got {args.connect_timeout:g}")
    if not args.ask_timeout > 0:
        raise UsageFailure(f"--ask-timeout must be positive, got {args.ask_timeout:g}")
    if args.max_message_bytes is not None and args.max_message_bytes <= 0:
        raise UsageFailure(f"--max-message-bytes must be positive, got {args.max_message_bytes}")
    if not 0 <= args.port <= 65535:
        raise UsageFailure(f"--port {args.port} is not a port number")
    metrics_address = _metrics_address(args)
    _setup_logging(args.log_level)

    from ..config import load_config
    from ..errors import ConfigError
    from ..guard import LoopGuard

    try:
        config = load_config(args.config if args.config is not None else _DEFAULT_CONFIG)
    except ConfigError as exc:
        raise UsageFailure(str(exc)) from None
    except OSError as exc:
        raise UsageFailure(f"cannot read config {args.config}: {exc.strerror or exc}") from None
    server = _serve_metrics(metrics_address) if metrics_address is not None else None
    try:
        telemetry = None
        if server is not None:
            from ..telemetry import resolve_telemetry

            # The config's telemetry setting still decides about OpenTelemetry.
            telemetry = resolve_telemetry(
                None, config.settings.telemetry, prometheus=server.metrics
            )
        try:
            guard = LoopGuard(config, agent_id=args.agent, telemetry=telemetry)
        except ConfigError as exc:  # e.g. a malformed store URL
            raise UsageFailure(str(exc)) from None
        except Exception as exc:  # e.g. a state store that cannot be opened
            raise CommandFailure(
                f"cannot set up the loop guard: {type(exc).__name__}: {exc}"
            ) from None
        try:
            return _run(args, command, guard)
        finally:
            guard.close()
    finally:
        if server is not None:
            server.close()


def _metrics_address(args: _Options) -> tuple[str, int] | None:
    """``--metrics`` checked before anything starts; ``None`` when not given."""
    if args.metrics is None:
        return None
    from ..telemetry.prometheus import parse_address

    try:
        host, port = parse_address(args.metrics)
    except ValueError as exc:
        raise UsageFailure(f"--metrics: {exc}") from None
    if not args.allow_remote and not _is_loopback(host):
        raise UsageFailure(
            f"--metrics {args.metrics}: {host} is not a loopback address. "
            "Pass --allow-remote to serve metrics on it anyway."
        )
    return host, port


def _serve_metrics(address: tuple[str, int]) -> Any:
    from ..telemetry import serve_metrics

    try:
        server = serve_metrics(address)
    except ImportError as exc:
        raise CommandFailure(str(exc)) from None
    except OSError as exc:
        host, port = address
        raise CommandFailure(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from None
    print(f"{_PROG}: serving metrics at {server.url}", file=sys.stderr, flush=True)
    return server


class _Options(NamedTuple):
    config: str | None
    agent: str | None
    name: str
    upstream_specs: tuple[str, ...]
    prefix: str
    run_idle: float
    connect_timeout: float
    max_message_bytes: int | None
    on_stop: str | None
    ask_timeout: float
    http: bool
    host: str
    port: int
    path: str
    allow_remote: bool
    metrics: str | None
    log_level: str


def _run(args: _Options, command: list[str], guard: Any) -> int:
    try:
        from ..integrations.mcp import GuardedProxy, Upstream, UpstreamError
        from ..integrations.mcp._upstream import innermost, reason
    except ImportError as exc:
        raise CommandFailure(str(exc)) from None

    upstreams = []
    try:
        for spec in args.upstream_specs:
            name, sep, url = spec.partition("=")
            if not sep or "://" in name:
                name, url = "", spec
            upstreams.append(Upstream.http(url, name=name or None))
    except ValueError as exc:
        raise UsageFailure(f"--upstream: {exc}") from None
    if command:
        upstreams.append(Upstream.stdio(command[0], command[1:]))

    import anyio

    try:
        code: int = anyio.run(_serve, GuardedProxy, args, upstreams, guard)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as exc:  # never a traceback into the client's log unless asked
        logging.getLogger("loopwarden").debug("mcp-proxy failed", exc_info=exc)
        inner = innermost(exc)
        message = str(inner) if isinstance(inner, UpstreamError) else reason(inner)
        raise CommandFailure(message) from None
    return code


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _NoRawData(logging.Filter):
    """Keep tool arguments and results, which MCP messages carry, out of the log.

    pydantic validation errors print the values that failed (an upstream's
    invalid result, say): such a record keeps its message plus where and how
    the data is invalid. Below debug level the MCP SDK's tracebacks for
    upstream noise (e.g. a print on stdout) become one line too.
    """

    def __init__(self, tracebacks: bool) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        if type(exc).__module__.startswith("pydantic"):
            from ..integrations.mcp._upstream import reason

            self._one_line(record, reason(exc))
        elif not self.tracebacks and not record.name.startswith("loopwarden"):
            first = (str(exc).strip().splitlines() or [""])[0]
            self._one_line(record, f"{type(exc).__name__}: {first}")
        return True

    @staticmethod
    def _one_line(record: logging.LogRecord, cause: str) -> None:
        record.msg = f"{record.getMessage()} ({cause})"
        record.args = None
        record.exc_info = None
        record.exc_text = None


def _setup_logging(level: str) -> None:
    """Everything to stderr: in stdio mode stdout carries the MCP messages.

    At debug level only loopwarden's own debug messages are shown: the MCP
    SDK's print whole messages (arguments and results) at debug.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_NoRawData(tracebacks=level == "debug"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING if level != "debug" else logging.INFO)
    logging.getLogger("loopwarden").setLevel(level.upper())


async def _serve(proxy_class: Any, args: _Options, upstreams: list[Any], guard: Any) -> int:
    import signal

    import anyio

    prefix = {"auto": None, "always": True, "never": False}[args.prefix]
    proxy = proxy_class(
        upstreams,
        guard,
        name=args.name,
        run_idle_seconds=args.run_idle or None,
        prefix_tools=prefix,
        connect_timeout=args.connect_timeout,
        max_message_bytes=args.max_message_bytes,
        on_stop=args.on_stop,
        ask_timeout=args.ask_timeout,
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
                    reason = exc.strerror or exc
                    echo_error(_PROG, f"cannot listen on {args.host}:{args.port}: {reason}")
                    code = EXIT_FAIL
            else:
                await proxy.serve_stdio()
        tg.cancel_scope.cancel()
    return code


def main(argv: list[str]) -> int:
    """Run the proxy until the client disconnects or a signal arrives; returns the exit code."""
    # Everything after "--" is the upstream's command line, never our options.
    if "--" in argv:
        cut = argv.index("--")
        options, command = argv[:cut], argv[cut + 1 :]
    else:
        options, command = argv, []
    return run_command(mcp_proxy_command, options, _PROG, obj=command)
