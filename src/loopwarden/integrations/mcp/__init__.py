"""MCP: a proxy that guards ``tools/call`` of upstream MCP servers, and a server middleware.

Requires the official ``mcp`` SDK 2.x (``pip install 'loopwarden[mcp]'``).

:class:`GuardedProxy` is an MCP server that fronts one or more upstream MCP
servers (stdio subprocesses, streamable-HTTP URLs or in-process servers). It
passes tools, resources and prompts through and runs every ``tools/call``
through the runtime guard first::

    async with GuardedProxy([Upstream.stdio("npx", ["-y", "some-mcp-server"])], config) as proxy:
        await proxy.serve_stdio()

:class:`MCPLoopGuardMiddleware` does the same inside your own ``MCPServer``.

What the model sees: a warning is appended to the tool result as an extra text
block; a blocked call is not forwarded and is answered with an ``isError``
result that says why; when the circuit breaker stops the run, the call (and
every later call of that run) gets what ``on_stop`` says: a last result telling
the model to write its final answer (``answer``), a JSON-RPC error (``raise``),
or a question to the person through MCP elicitation (``ask``).

Layout (all private but this module):

* ``_proxy``: :class:`GuardedProxy`: lifecycle, tools and the guarded ``tools/call``;
* ``_passthrough``: the upstreams' resources and prompts;
* ``_upstream``: :class:`Upstream`, connecting to one, describing its failures;
* ``_changes``: forwarding the upstreams' list-changed notifications;
* ``_guarding``: the guard around one ``tools/call``, shared by proxy and middleware;
* ``_onstop``: what a stop answers (``onStop``), and the question put to a person;
* ``_middleware``: :class:`MCPLoopGuardMiddleware` for your own ``MCPServer``;
* ``_runs``: which session a request belongs to, and each session's current run;
* ``_stdio`` (with ``_lines``, the bound on a message line), ``_http``: serving
  over stdin/stdout and over streamable HTTP.
"""

from __future__ import annotations

from .._base import require

require("mcp", "mcp")

from ._middleware import MCPLoopGuardMiddleware  # noqa: E402
from ._onstop import DEFAULT_ASK_TIMEOUT_SECONDS, stop_text  # noqa: E402
from ._proxy import GuardedProxy  # noqa: E402
from ._runs import DEFAULT_RUN_IDLE_SECONDS  # noqa: E402
from ._stdio import DEFAULT_MAX_MESSAGE_BYTES  # noqa: E402
from ._upstream import Upstream, UpstreamError  # noqa: E402

__all__ = [
    "DEFAULT_ASK_TIMEOUT_SECONDS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_RUN_IDLE_SECONDS",
    "GuardedProxy",
    "MCPLoopGuardMiddleware",
    "Upstream",
    "UpstreamError",
    "stop_text",
]
