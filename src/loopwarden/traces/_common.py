"""Small helpers shared by the trace readers.

Records reach the readers as parsed JSON, so a JSON object is always a
``dict``: the readers test ``isinstance(x, dict)``, which is much cheaper on
the replay hot path than the ``Mapping`` ABC.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..hashing import MISSING, extract_unknown_tool_name
from ._sink import Loc, TraceSink

__all__ = [
    "ReadContext",
    "blocks_text",
    "file_stem",
    "jsonl_records",
    "outcome_from_text",
    "short_title",
]

# Only short texts are searched for "unknown tool" wordings: real tool output
# can be megabytes, and the not-found answers of agents are one line.
_UNKNOWN_SCAN_LIMIT = 2000
# Every unknown-tool wording of ``hashing.extract_unknown_tool_name`` holds one of
# these (a test keeps the two in step).
_UNKNOWN_WORDS = ("tool", "unsupported call")


@dataclass(frozen=True)
class ReadContext:
    """What a reader knows about the input it reads."""

    name: str
    """Display name of the source (for run labels)."""
    path: Path | None
    index: int
    """Position of the source in this replay; run keys are prefixed with it."""

    @property
    def stem(self) -> str:
        return "stdin" if self.path is None else file_stem(self.path.name)

    def key(self, local: str) -> str:
        return f"{self.index}\x1f{local}"


def file_stem(name: str) -> str:
    """A file name without its folder and trace suffixes: ``runs.jsonl.gz`` -> ``runs``."""
    base = name.rsplit("/", 1)[-1]
    stem = base
    for suffix in (".gz", ".jsonl", ".ndjson", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem or base


def jsonl_records(lines: Iterable[tuple[int, bytes]], sink: TraceSink) -> Iterator[tuple[Loc, Any]]:
    """Parsed JSONL lines; a line that is not JSON is reported and skipped, blank ones ignored."""
    loads = orjson.loads
    for lineno, raw in lines:
        try:
            yield lineno, loads(raw)
        except orjson.JSONDecodeError as exc:
            if raw.strip():
                sink.problem(lineno, f"not valid JSON ({exc})")


def blocks_text(content: Any) -> str:
    """The text of a string or a list of content blocks (``{"type": ..., "text": ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return ""


def outcome_from_text(tool: str, text: str, value: Any = MISSING) -> tuple[Any, Any]:
    """``(result, error)`` for a result text that carries no error flag.

    Formats such as Chat Completions lose the "this was an error" flag, so an
    answer that says the called tool does not exist ("unsupported call: x",
    "Tool 'x' not found.") is treated as an error naming that tool, the way
    the live guard sees it. Everything else is a result (``value`` if given).
    """
    if len(text) <= _UNKNOWN_SCAN_LIMIT:
        # The wording must name the called tool, so a text without that name
        # (nearly every result) skips the regular expressions.
        name = tool.strip().lower()
        low = text.lower()
        if name and name in low and any(word in low for word in _UNKNOWN_WORDS):
            found = extract_unknown_tool_name(text)
            if found is not None and found == name:
                return MISSING, text
    return (text if value is MISSING else value), MISSING


def short_title(text: Any, limit: int = 80) -> str | None:
    """The first line of a prompt, shortened, to recognise a run by."""
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return None
