"""`loopwarden mcp-proxy --metrics`: `/metrics` scraped over HTTP while a real proxy runs.

A real ``mcp`` client launches the proxy through the console script; the proxy
runs a stdio upstream. Between tool calls the test scrapes the endpoint.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("prometheus_client")

from mcp.client.client import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.mcp.conftest import BLOCKED, HERE, SMALL, STOPPED, free_port, proxy_params, texts
from tests.telemetry._common import CANARY

pytestmark = pytest.mark.timeout(120)
LEGACY = [sys.executable, str(HERE / "legacy_server.py")]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert CANARY not in text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def calls(samples: Samples, action: str) -> float:
    want = {("loopwarden_action", action), ("gen_ai_tool_name", "poll_status")}
    return sum(
        v for (name, labels), v in samples.items() if name == "loopwarden_tool_calls_total"
        and want <= labels
    )  # fmt: skip


def detections(samples: Samples, action: str) -> float:
    return sum(
        v
        for (name, labels), v in samples.items()
        if name == "loopwarden_detections_total" and ("loopwarden_action", action) in labels
    )


async def test_metrics_show_the_counts_of_a_proxied_loop(tmp_path: Path) -> None:
    """Mid-run and after the stop, `/metrics` counts exactly the calls the client saw decided."""
    config = tmp_path / "lw.json"
    config.write_text(json.dumps(SMALL))
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    params = proxy_params(
        "--config", str(config), "--agent", "ops", "--metrics", f"127.0.0.1:{port}", command=LEGACY
    )
    args = {"job": "42", "token": CANARY}
    async with Client(params) as client:
        before = await asyncio.to_thread(scrape, url)
        assert calls(before, "allow") == 0
        first = [texts(await client.call_tool("poll_status", args)) for _ in range(4)]
        assert [len(body) for body in first] == [1, 1, 2, 1]  # the third carries the warning
        mid = await asyncio.to_thread(scrape, url)
        assert (calls(mid, "allow"), calls(mid, "warn"), calls(mid, "block")) == (3, 1, 0)
        assert detections(mid, "warn") == 1

        rest = [texts(await client.call_tool("poll_status", args)) for _ in range(3)]
        assert [body[0].startswith(BLOCKED) for body in rest] == [True, True, False]
        assert STOPPED in rest[2][0]
        after = await asyncio.to_thread(scrape, url)

    # Calls 5 and 6 were blocked and call 7 stopped the run: all three were not run.
    assert (calls(after, "allow"), calls(after, "warn"), calls(after, "block")) == (3, 1, 3)
    assert (detections(after, "block"), detections(after, "stop")) == (2, 1)
    stopped = {
        labels: v for (name, labels), v in after.items() if name == "loopwarden_runs_stopped_total"
    }
    assert stopped == {
        frozenset(
            {
                ("loopwarden_code", "global_circuit_breaker"),
                ("gen_ai_tool_name", "poll_status"),
                ("gen_ai_agent_name", "ops"),
            }
        ): 1.0
    }
    durations = sum(
        v for (name, _), v in after.items() if name == "loopwarden_guard_duration_seconds_count"
    )
    assert durations == 7  # one sample per call


def test_a_bad_or_remote_metrics_address_is_a_usage_error() -> None:
    """`--metrics` is checked before anything starts: malformed, or remote without consent."""
    from tests.cli.conftest import run_cli

    done = run_cli(["mcp-proxy", "--metrics", "host:http", "--", "true"])
    assert done.returncode == 2
    assert "--metrics: invalid metrics address 'host:http'" in done.stderr
    done = run_cli(["mcp-proxy", "--metrics", "0.0.0.0:9464", "--", "true"])
    assert done.returncode == 2
    assert "0.0.0.0 is not a loopback address" in done.stderr
    assert "Traceback" not in done.stderr
