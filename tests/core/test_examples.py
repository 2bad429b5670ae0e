"""Every README snippet has a runnable file in examples/ that holds it and runs as a script."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import json5
import pytest

from tests._snippets import ROOT, snippet

EXAMPLES = ROOT / "examples"

# snippet -> (example file, directory it runs from, what it needs, what it prints)
RUNS = {
    "quickstart": ("quickstart.py", ".", None, None),
    "langchain-quickstart": (
        "langchain_quickstart.py",
        ".",
        "langchain.agents",
        r"stopped: \w+ poll_status \d+",
    ),
    "pydantic-ai-quickstart": (
        "pydantic_ai_quickstart.py",
        ".",
        "pydantic_ai",
        r"stopped: \w+ poll_status \d+",
    ),
    "openai-agents-quickstart": (
        "openai_agents_quickstart.py",
        ".",
        "agents",
        r"Job 42 is still pending after 30 checks\. Check it by hand\.\n\n"
        r"loopwarden stopped this run \(rule \w+, tool poll_status, count 30\): .*",
    ),
    "google-adk-quickstart": (
        "google_adk/quickstart.py",
        "google_adk",
        "google.adk",
        r"Job 42 is still pending after 30 checks\. Check it by hand\.\n\n"
        r"loopwarden stopped this run \(rule \w+, tool poll_status, count 30\): .*",
    ),
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWARDEN_")}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=180,
        check=False,
    )


def _needs(module: str | None) -> None:
    """Skip without the framework (the no-extras suite), as the framework tests do."""
    if module is not None:
        pytest.importorskip(module)


def _imported(nodes: list[ast.stmt]) -> set[tuple[str, str, str | None]]:
    """(module, name, alias) of every import among ``nodes``."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            found |= {(node.module or "", a.name, a.asname) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {("", a.name, a.asname) for a in node.names}
    return found


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_example_holds_the_snippet(name: str) -> None:
    """The example runs the README's own code: its imports, and every other statement of
    the snippet in order (the example adds a stand-in model around them)."""
    example = ast.parse((EXAMPLES / RUNS[name][0]).read_text("utf-8")).body
    code = ast.parse(snippet(name)).body
    assert _imported(code) <= _imported(example)
    statements = [ast.dump(node) for node in example]
    position = 0
    for node in code:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        wanted = ast.dump(node)
        assert wanted in statements[position:], f"{RUNS[name][0]} lacks: {ast.unparse(node)}"
        position = statements.index(wanted, position) + 1


def test_the_readme_points_at_every_example() -> None:
    """The README names the runnable file next to each of its snippets."""
    readme = (ROOT / "README.md").read_text("utf-8")
    for file, _, _, _ in RUNS.values():
        assert f"(examples/{file})" in readme, file
    assert "(examples/mcp_proxy/client.py)" in readme


def test_the_quickstart_runs_an_agent_loop() -> None:
    """examples/quickstart.py drives the README's loop with a stuck model until it is stopped."""
    done = _run(EXAMPLES / "quickstart.py", ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "calls 1-10: ran: pending"
    assert lines[1].startswith(
        "call 11: ran, and the result ends with: WARNING: the job is still running: poll_job"
    )
    assert lines[2] == "calls 12-20: ran: pending"
    assert lines[3].startswith("calls 21-30: not run, the model reads: CRITICAL: loopwarden")
    assert re.fullmatch(r"call 31: the run is stopped by loopwarden \(\w+\)", lines[4])
    assert len(lines) == 5


@pytest.mark.parametrize("name", sorted(set(RUNS) - {"quickstart"}))
def test_the_integration_example_runs(name: str) -> None:
    """Each integration example runs its framework's offline model until loopwarden stops it."""
    file, cwd, module, printed = RUNS[name]
    _needs(module)
    done = _run(EXAMPLES / file, EXAMPLES / cwd)
    assert done.returncode == 0, done.stderr
    assert printed is not None and re.fullmatch(printed, done.stdout.strip()), done.stdout


def test_the_adk_config_is_the_readme_config() -> None:
    """The ADK example's loopwarden.json5 is the README's, saved where the README says."""
    saved = (EXAMPLES / "google_adk" / "loopwarden.json5").read_text("utf-8")
    assert json5.loads(saved) == json5.loads(snippet("google-adk-config"))


def test_the_mcp_example_is_the_readme_setup() -> None:
    """examples/mcp_proxy/mcp.json has the README's client config shape, and it runs."""
    documented = json.loads(snippet("mcp-claude-code"))["mcpServers"]["github"]
    here = EXAMPLES / "mcp_proxy"
    ours = json.loads((here / "mcp.json").read_text("utf-8"))["mcpServers"]["jobs"]
    assert set(ours) == set(documented)
    assert ours["command"] == documented["command"] == "loopwarden"
    cut = documented["args"].index("--") + 1
    assert ours["args"][:cut] == documented["args"][:cut]  # mcp-proxy --config FILE --
    assert (here / documented["args"][2]).exists()
    _needs("mcp")
    done = _run(here / "client.py", here)
    assert done.returncode == 0, done.stderr
    kinds = [line.split(":")[0:2] for line in done.stdout.splitlines()]
    assert [kind for _, kind in kinds] == [" ran", " warned", " blocked", " stopped"]
    assert kinds[0][0] == "call 1"
