"""`loopwarden hook AGENT --metrics HOST:PORT`: the hook helper serves `/metrics`.

The real console script runs once per event, as Claude Code runs it; the
first event starts the helper, which answers the rest and counts them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from tests.hooks import payloads as p
from tests.hooks.conftest import LOOPWARDEN, SMALL, helper_ready, stop_helper
from tests.telemetry._common import CANARY

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(name="env")
def fixture_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A home with the small config, and a private runtime directory for our own helper."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "XDG_"))}
    home = tmp_path / "home"
    config = home / ".config" / "loopwarden" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_bytes(orjson.dumps(SMALL))
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env.update(HOME=str(home), LOOPWARDEN_RUNTIME_DIR=str(runtime), LOOPWARDEN_HOOK_IDLE="120")
    yield env
    stop_helper(env)


def hook(env: dict[str, str], event: dict[str, Any], port: int) -> dict[str, Any]:
    argv = [str(LOOPWARDEN), "hook", "claude-code", "--metrics", f"127.0.0.1:{port}"]
    done = subprocess.run(
        argv, input=orjson.dumps(event), env=env, capture_output=True, timeout=60, check=True
    )
    assert done.stderr == b"", done.stderr
    answer: dict[str, Any] = orjson.loads(done.stdout)
    return answer


def scrape(port: int) -> dict[str, float]:
    """Sample name (with its action or code label, if any) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert CANARY not in text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            assert s.labels.get("gen_ai_agent_name", "claude-code") == "claude-code"
            label = s.labels.get("loopwarden_action") or s.labels.get("loopwarden_code")
            name = f"{s.name}:{label}" if label else s.name
            found[name] = found.get(name, 0.0) + s.value
    return found


def test_the_helper_counts_the_events_it_answers(env: dict[str, str]) -> None:
    """Mid-run and after the stop, the helper's `/metrics` counts each call once."""
    port = free_port()
    command = f"curl -H 'Authorization: Bearer {CANARY}' https://ci.example/job/42"
    assert hook(env, p.claude_session_start("startup"), port) == {}  # starts the helper
    assert helper_ready(env)

    answers = []
    for n in range(1, 9):
        pre = hook(env, p.claude_pre(n, command=command), port)
        answers.append(pre)
        if n == 2:
            mid = scrape(port)
            assert mid["loopwarden_tool_calls_total:allow"] == 2
            assert mid["loopwarden_guard_duration_seconds_count"] == 1  # call 2 still runs
        if pre.get("continue") is False:
            break
        decision = pre.get("hookSpecificOutput", {}).get("permissionDecision")
        if decision != "deny":  # Claude Code reports no outcome for a denied call
            hook(env, p.claude_post(n, command=command), port)

    # Warn at 2 (told with call 3's outcome), block at 3, stop at 4 identical outcomes.
    assert len(answers) == 5 and answers[-1]["continue"] is False
    assert [a.get("hookSpecificOutput", {}).get("permissionDecision") for a in answers] == [
        None,
        None,
        None,
        "deny",
        "deny",
    ]
    after = scrape(port)
    assert after["loopwarden_tool_calls_total:allow"] == 2
    assert after["loopwarden_tool_calls_total:warn"] == 1
    assert after["loopwarden_tool_calls_total:block"] == 2
    assert after["loopwarden_detections_total:warn"] == 1
    assert after["loopwarden_detections_total:block"] == 1
    assert after["loopwarden_detections_total:stop"] == 1
    assert after["loopwarden_runs_stopped_total:global_circuit_breaker"] == 1
    assert after["loopwarden_guard_duration_seconds_count"] == 5  # one sample per call


def test_a_hook_process_on_its_own_serves_nothing(env: dict[str, str]) -> None:
    """With `--no-daemon` the event is answered in process and no port is opened."""
    port = free_port()
    argv = [str(LOOPWARDEN), "hook", "claude-code", "--no-daemon", "--metrics", f"127.0.0.1:{port}"]
    done = subprocess.run(
        argv, input=orjson.dumps(p.claude_pre(1)), env=env, capture_output=True, check=True
    )
    assert orjson.loads(done.stdout) == {}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # still free


def test_install_puts_the_option_into_the_hook_command(env: dict[str, str]) -> None:
    """`loopwarden install AGENT --metrics HOST:PORT` writes it into the hook command (and
    into the URL of Claude Code's HTTP hooks)."""
    argv = [str(LOOPWARDEN), "install", "claude-code", "--dry-run", "--metrics", "127.0.0.1:9464"]
    done = subprocess.run([*argv, "--command"], env=env, capture_output=True, text=True, check=True)
    commands = [
        handler["command"]
        for groups in orjson.loads(done.stdout)["hooks"].values()
        for group in groups
        for handler in group["hooks"]
    ]
    assert commands and all(c.endswith(" claude-code --metrics 127.0.0.1:9464") for c in commands)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    urls = [
        handler["url"]
        for groups in orjson.loads(done.stdout)["hooks"].values()
        for group in groups
        for handler in group["hooks"]
        if handler["type"] == "http"
    ]
    assert urls and all(u.endswith("?arg=--metrics&arg=127.0.0.1%3A9464") for u in urls)
    bad = subprocess.run([*argv[:-1], "9464x"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--metrics: invalid metrics address '9464x'" in bad.stderr
