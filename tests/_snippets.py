"""Find documented code snippets so tests can run exactly what the docs show.

A snippet is a fenced code block preceded by an HTML comment
``<!-- snippet: NAME -->`` in README.md or any ``docs/*.md`` file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PATTERN = re.compile(r"<!--\s*snippet:\s*([\w.-]+)\s*-->\s*\n```[\w-]*\n(.*?)\n```", re.DOTALL)


def occurrences() -> list[tuple[str, str, str]]:
    """Every snippet as (name, file, code), README first."""
    found: list[tuple[str, str, str]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.exists():
            for name, code in _PATTERN.findall(path.read_text(encoding="utf-8")):
                found.append((name, path.name, code))
    return found


def all_snippets() -> dict[str, str]:
    """Every snippet by name; where a name is shown twice, the first (README) copy."""
    found: dict[str, str] = {}
    for name, _, code in occurrences():
        found.setdefault(name, code)
    return found


def snippet(name: str) -> str:
    """The code of snippet ``name``; fails loudly when the docs lost it."""
    snippets = all_snippets()
    if name not in snippets:
        raise AssertionError(f"snippet {name!r} not found in README.md or docs/*.md")
    return snippets[name]
