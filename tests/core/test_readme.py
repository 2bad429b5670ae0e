"""The README's examples and quoted messages are true."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import json5
import pytest

import loopwarden as lw
from tests._snippets import ROOT, occurrences, snippet


def scripted_model(script: list[list[dict[str, Any]]]) -> Any:
    """A model that returns the scripted tool calls turn by turn, then stops."""
    turns = iter(script)

    def model(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return next(turns, [])

    return model


def load_quickstart() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(snippet("quickstart"), namespace)
    return namespace


def test_quickstart_stops_a_stuck_agent() -> None:
    """The README quickstart stops an agent that polls forever."""
    ns = load_quickstart()
    executed: list[str] = []

    def poll_job(job: str) -> str:
        executed.append(job)
        return "pending"

    stuck = [[{"name": "poll_job", "args": {"job": "42"}, "id": f"call_{i}"}] for i in range(50)]
    messages: list[dict[str, Any]] = []
    with pytest.raises(lw.CircuitBreakerTripped) as exc:
        ns["run_agent"](scripted_model(stuck), {"poll_job": poll_job}, messages)
    assert exc.value.count == 30
    assert len(messages) == 30 and len(executed) == 20
    assert "WARNING" in messages[10]["content"] and messages[10]["content"].startswith("pending")
    assert all("CRITICAL" in m["content"] for m in messages[20:])


def test_quickstart_lets_a_healthy_agent_finish() -> None:
    """The README quickstart lets a progressing agent finish."""
    ns = load_quickstart()
    script = [
        [
            {"name": "read", "args": {"path": f"/f{i}"}, "id": f"r{i}"},
            {"name": "count", "args": {}, "id": f"c{i}"},
        ]
        for i in range(40)
    ]
    counter = iter(range(1000))
    messages: list[dict[str, Any]] = []
    ns["run_agent"](
        scripted_model(script),
        {"read": lambda path: f"contents of {path}", "count": lambda: next(counter)},
        messages,
    )
    assert len(messages) == 80
    assert not any("CRITICAL" in m["content"] for m in messages)


def test_quickstart_blocks_hallucinated_tools() -> None:
    """The README quickstart blocks a tool that does not exist."""
    ns = load_quickstart()
    script = [[{"name": "web_search", "args": {"q": f"try {i}"}, "id": f"w{i}"}] for i in range(40)]
    messages: list[dict[str, Any]] = []
    with pytest.raises(lw.CircuitBreakerTripped) as exc:
        ns["run_agent"](scripted_model(script), {"search_docs": lambda q: "docs"}, messages)
    assert exc.value.detector == "unknown_tool_repeat"
    contents = [m["content"] for m in messages]
    assert contents[:10] == ["Unknown tool: web_search"] * 10
    assert all("CRITICAL" in c and "web_search" in c for c in contents[10:])
    assert len(contents) == 30


def test_readme_quotes_the_real_messages() -> None:
    """The messages quoted in the README are the ones the guard writes."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    run = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}}).run()
    notes, blocks = [], []
    for i in range(30):
        decision = run.before_call("poll_job", {"job": "42"}, call_id=str(i))
        if decision.blocked:
            blocks.append(decision.message)
            continue
        note = run.after_call("poll_job", {"job": "42"}, call_id=str(i), result="pending")
        if note:
            notes.append(note)
    flat = re.sub(r"\s+", " ", readme)
    assert f'*"{notes[0]}"*' in flat
    assert f'*"{blocks[0]}"*' in flat


def test_config_example_loads() -> None:
    """The README config example loads."""
    raw = json5.loads(snippet("config-example"))
    config = lw.load_config(raw)
    agent = config.for_agent("safe-runner")
    assert (agent.enabled, agent.warning_threshold, agent.critical_threshold) == (True, 8, 16)
    assert config.settings.store == "sqlite:///var/lib/loopwarden/state.db"
    assert "slack_post" in config.settings.send_tools


def test_readme_table_matches_defaults() -> None:
    """The README's table of defaults matches the code."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    defaults = lw.LoopDetectionConfig().to_dict()
    for key in (
        "historySize",
        "warningThreshold",
        "criticalThreshold",
        "unknownToolThreshold",
        "globalCircuitBreakerThreshold",
    ):
        assert re.search(rf"\| `{key}` \| int ≥ 1 \| {defaults[key]} \|", readme), key
    assert Path(ROOT / "scripts" / "check").exists()


def test_snippets_shown_twice_are_identical() -> None:
    """README repeats some docs examples; the copies must not drift (tests run the first)."""
    by_name: dict[str, set[str]] = {}
    for name, _, code in occurrences():
        by_name.setdefault(name, set()).add(code)
    assert {name for name, codes in by_name.items() if len(codes) > 1} == set()
    readme = {name for name, file, _ in occurrences() if file == "README.md"}
    assert {
        "quickstart",
        "langchain-quickstart",
        "openai-agents-quickstart",
        "pydantic-ai-quickstart",
        "google-adk-quickstart",
        "mcp-claude-code",
    } <= readme


def test_readme_links_exist() -> None:
    """Every relative link of the README points at a file."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?:docs|examples)/[^)]+)\)", readme):
        assert (ROOT / target).exists(), target
