"""The README's and docs' examples, tables and quoted messages are true."""

from __future__ import annotations

import ast
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
    """The quickstart loop warns, then blocks, then stops an agent stuck polling."""
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
    """The quickstart loop never blocks an agent whose calls make progress."""
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
    """The quickstart loop blocks, then stops, an agent calling a tool that does not exist."""
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
    """The warning and block texts the README quotes are the ones the guard writes."""
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
    """The full config example in docs/configuration.md is valid and means what it says."""
    raw = json5.loads(snippet("config-example"))
    config = lw.load_config(raw)
    agent = config.for_agent("safe-runner")
    assert (agent.enabled, agent.warning_threshold, agent.critical_threshold) == (True, 8, 16)
    assert config.settings.store == "sqlite:///var/lib/loopwarden/state.db"
    assert "slack_post" in config.settings.send_tools


def test_short_config_example_loads() -> None:
    """The README's short config example is valid and means what the text says."""
    config = lw.load_config(json5.loads(snippet("config-short")))
    main = config.for_agent(None)
    assert (main.enabled, main.warning_threshold, main.critical_threshold) == (True, 8, 16)
    assert config.settings.run_record == "loopwarden-runs.jsonl"


def test_configuration_table_matches_defaults() -> None:
    """docs/configuration.md gives every threshold's real default."""
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    defaults = lw.LoopDetectionConfig().to_dict()
    for key in (
        "historySize",
        "warningThreshold",
        "criticalThreshold",
        "unknownToolThreshold",
        "globalCircuitBreakerThreshold",
    ):
        assert re.search(rf"\| `{key}` \| int ≥ 1 \| {defaults[key]} \|", page), key
    window = lw.LoopDetectionConfig().post_compaction_guard.window_size
    assert f"| `postCompactionGuard.windowSize` | int ≥ 1 | {window} |" in page


def test_readme_commands_exist() -> None:
    """The README's two commands name a script and a folder that exist."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "./scripts/check" in readme and "loopwarden replay examples/traces" in readme
    assert (ROOT / "scripts" / "check").stat().st_mode & 0o111
    assert any((ROOT / "examples" / "traces").iterdir())


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


def _pages() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "CHANGELOG.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]


def test_relative_links_exist() -> None:
    """Every relative link in the README, CONTRIBUTING, CHANGELOG and docs/ points at a file."""
    broken = []
    for page in _pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_docs_index_maps_every_page() -> None:
    """docs/index.md links every page in docs/, so no page is left unfindable."""
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[^)]*)?\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages - linked == set()


def _defined_names(node: ast.stmt) -> tuple[str, ...]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return tuple(alias.asname or alias.name for alias in node.names)
    if isinstance(node, ast.Assign):
        return tuple(ast.unparse(target) for target in node.targets)
    if isinstance(node, ast.AnnAssign):
        return (ast.unparse(node.target),)
    return ()


class _Unannotate(ast.NodeTransformer):
    """Drop type annotations, so typed and untyped code compare equal."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt | None:
        if node.value is None:
            return None
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def test_typed_quickstart_is_the_readme_quickstart() -> None:
    """tests/typing/api.py type-checks the README quickstart itself, not a drifted copy."""
    readme = ast.parse(snippet("quickstart")).body
    typed = {
        name: node
        for node in ast.parse((ROOT / "tests" / "typing" / "api.py").read_text("utf-8")).body
        for name in _defined_names(node)
    }
    for node in readme:
        (name,) = _defined_names(node)
        assert name in typed, f"tests/typing/api.py does not define {name}"
        assert ast.dump(_Unannotate().visit(typed[name])) == ast.dump(node), name


def test_every_docs_page_links_back_to_the_index() -> None:
    """A reader who lands on any page of docs/ finds the way back to docs/index.md."""
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "index.md"]
    assert pages
    missing = [p.name for p in pages if "](index.md)" not in p.read_text(encoding="utf-8")]
    assert missing == []


def test_the_index_row_of_cli_md_names_every_command_it_documents() -> None:
    """docs/index.md's row for cli.md names each command that has a section in cli.md."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = re.findall(r"^## `loopwarden ([\w-]+)", page, re.MULTILINE)
    assert {"demo", "replay", "tune", "config"} <= set(commands)
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    (row,) = [line for line in index.splitlines() if line.startswith("| [cli.md](cli.md)")]
    assert [name for name in commands if f"`{name}" not in row and f" {name}`" not in row] == []


# A lead-owned file that still cites the tracker; its docstrings are fixed on the lead's
# branch. Remove the entry once the file is clean.
_NOT_YET = ("engine/messages.py",)
_CITATION = re.compile(r"\bSPEC\b|\bissues? \d+|\bits tracker\b")


def _docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    found = [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    found += [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    return found


def test_no_citation_leads_outside_the_repository() -> None:
    """Docs, README and src/ docstrings cite no SPEC section and no tracker issue: neither is
    in the repository; they say the rule or link the docs page that does."""
    cited = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if _CITATION.search(line):
                cited.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    src = ROOT / "src" / "loopwarden"
    for path in sorted(src.rglob("*.py")):
        name = path.relative_to(src).as_posix()
        if name.startswith(_NOT_YET):
            continue
        for number, text in _docstrings_and_comments(path):
            if _CITATION.search(text):
                cited.append(f"src/loopwarden/{name}:{number}: {text.strip()[:80]}")
    assert cited == []


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a page."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.*)$", text, re.MULTILINE)
    }


def test_links_to_a_section_find_it() -> None:
    """Every link to a section of a page in the repository names a heading of that page."""
    broken = []
    for page in _pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            if "://" in target:
                continue
            linked = (page.parent / target) if target else page
            if linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert broken == []
