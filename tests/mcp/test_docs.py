"""docs/mcp.md stays true: its examples run, its configs parse, its claims hold."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer

import loopwarden as lw
from loopwarden.cli.mcp_proxy import mcp_proxy_command
from loopwarden.integrations.mcp import GuardedProxy
from loopwarden.stopping import person_note
from tests._snippets import snippet

from .conftest import BLOCKED, STOPPED, texts

pytestmark = pytest.mark.timeout(60)


def _parse(options: list[str]) -> dict[str, Any]:
    """The proxy's options parsed by its click command (the upstream command is not needed)."""
    return mcp_proxy_command.make_context("mcp-proxy", list(options), obj=[]).params


def test_python_proxy_example_prints_what_the_docs_show():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(snippet("mcp-python-proxy"), {"__name__": "docs_example"})
    assert out.getvalue().strip() == snippet("mcp-python-proxy-output").strip()


async def test_middleware_example_guards_the_server():
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(snippet("mcp-middleware"), namespace)
    async with Client(namespace["server"]) as client:
        results = [await client.call_tool("poll_status", {"job": "42"}) for _ in range(31)]
        assert texts(results[0]) == ["job 42: pending"]
        assert texts(results[20])[0].startswith(BLOCKED)
        assert STOPPED in texts(results[30])[0]
    exec(snippet("mcp-middleware"), namespace)  # a fresh server, guard and run
    async with Client(namespace["server"]) as client:
        misses = [await client.call_tool("poll_statuss", {"job": "1"}) for _ in range(11)]
    assert "there is no tool named 'poll_statuss'" in texts(misses[10])[0]


async def test_what_the_model_sees_is_what_the_proxy_answers():
    jobs = MCPServer("jobs")

    @jobs.tool()
    def poll_status(job: str) -> str:
        return f"job {job}: pending"

    documented = json.loads(snippet("mcp-what-the-model-sees"))
    seen = {}
    config = {"tools": {"loopDetection": {"enabled": True}}}
    async with GuardedProxy([jobs], config) as proxy, Client(proxy.server) as client:
        for n in range(1, 32):
            result = await client.call_tool("poll_status", {"job": "42"})
            if str(n) in documented:
                seen[str(n)] = result.model_dump(
                    mode="json", by_alias=True, include={"content", "is_error"}, exclude_none=True
                )
    assert seen == documented
    # The stop's report rides the 31st result's _meta (the run id is random).
    assert result.meta is not None
    meta = json.loads(snippet("mcp-stop-meta"))
    meta["loopwarden"]["run_id"] = result.meta["loopwarden"]["run_id"]
    assert {"loopwarden": result.meta["loopwarden"]} == meta


def test_ask_example_prints_what_the_docs_show():
    """The ``on_stop="ask"`` example prints the documented question and answers, and the
    page's quotes of the question and of the note the model reads are the real texts."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(snippet("mcp-python-ask"), {"__name__": "docs_example"})
    printed = out.getvalue().strip()
    assert printed == snippet("mcp-python-ask-output").strip()
    assert snippet("mcp-ask-message").strip() in printed
    assert snippet("mcp-ask-continue").strip() == person_note(
        "Job 42 is stuck; check job 43 instead."
    )


@pytest.mark.parametrize("name", ["mcp-claude-desktop", "mcp-claude-code", "mcp-cursor"])
def test_client_configs_are_valid_proxy_invocations(name: str):
    servers = json.loads(snippet(name))["mcpServers"]
    assert servers
    for entry in servers.values():
        assert Path(entry["command"]).name == "loopwarden"
        args = entry["args"]
        assert args[0] == "mcp-proxy"
        options = args[1 : args.index("--")] if "--" in args else args[1:]
        parsed = _parse(options)  # raises (fails the test) on an unknown option
        assert parsed["upstream_specs"] or "--" in args


def test_documented_commands_use_real_options():
    text = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text("utf-8")
    commands = [
        line
        for line in text.splitlines()
        if line.startswith("loopwarden mcp-proxy ") and "[" not in line  # not a synopsis
    ]
    assert len(commands) >= 2
    for line in commands:
        args = shlex.split(line)[2:]
        _parse(args[: args.index("--")] if "--" in args else args)
    documented = {
        part.strip().strip("`").split()[0]
        for row in text.split("### Options", 1)[1].split("###", 1)[0].splitlines()
        if row.startswith("| `--")
        for part in row.split("|")[1].split(",")
    }
    options = {opt for param in mcp_proxy_command.params for opt in param.opts}
    assert documented - {"--"} <= options
    assert options - documented - {"-h", "--help"} == set(), "options missing from the table"


def test_config_example_loads(tmp_path: Path):
    path = tmp_path / ".loopwarden.json5"
    path.write_text(snippet("mcp-config"), encoding="utf-8")
    cfg = lw.load_config(str(path)).for_agent(None)
    assert (cfg.warning_threshold, cfg.critical_threshold) == (5, 10)
    assert cfg.global_circuit_breaker_threshold == 15
