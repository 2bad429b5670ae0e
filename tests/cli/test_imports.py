"""The package layering holds: no import cycles, and every CLI and hooks module imports alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "loopwarden"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """``loopwarden.hooks.daemon`` -> ``hooks``; top-level modules are units of their own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that can run, at module level or inside functions (not type-checking only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in _runtime_imports_of(child))
            continue
        yield from _runtime_imports_of(node)


def _runtime_imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _runtime_imports(node)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    # ``from . import x`` may name a submodule: count both the base and base.x.
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the imports that make the edge, over src/loopwarden."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text("utf-8"))
        for node in _runtime_imports(tree):
            for target in _targets(module, path.name == "__init__.py", node):
                if target.split(".")[0] != "loopwarden":
                    continue
                source_unit, target_unit = _unit(module), _unit(target)
                if target_unit and source_unit and source_unit != target_unit:
                    edge = graph.setdefault(source_unit, {}).setdefault(target_unit, [])
                    edge.append(f"{module} -> {target}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected groups of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for other in graph.get(unit, {}):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            group: list[str] = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == unit:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return found


def test_no_import_cycle_between_loopwarden_packages() -> None:
    """No subpackage or top-level module of loopwarden imports one that imports it back."""
    graph = import_graph()
    assert graph["cli"]["hooks"], "the graph walk found no edges; it is broken"
    problems = {
        " <-> ".join(group): {
            f"{a} -> {b}": graph[a][b][:3] for a in group for b in group if b in graph.get(a, {})
        }
        for group in cycles(graph)
    }
    assert problems == {}


def test_cycle_finder_finds_a_cycle() -> None:
    """The cycle check itself reports a two-unit cycle and leaves a chain alone."""
    assert cycles({"a": {"b": []}, "b": {"a": []}, "c": {"a": []}}) == [["a", "b"]]
    assert cycles({"a": {"b": []}, "b": {"c": []}}) == []


def _modules(*packages: str) -> list[str]:
    names = []
    for package in packages:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            names.append(_module_name(path))
    return names


@pytest.mark.parametrize("module", _modules("cli", "hooks"))
def test_module_imports_alone(module: str) -> None:
    """Each CLI and hooks module imports first in a fresh interpreter (no cycle by order)."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
