"""Recorded agent traces: format detection and streaming readers for replay.

Each supported format has a reader module that turns its records into the
moments of a run (calls, outcomes, compactions) for a
:class:`~loopwarden.traces._sink.TraceSink` — in practice the
:class:`~loopwarden.traces.replay.Replayer`, which drives the real runtime
guard. :func:`read_source` detects the format of one input (or takes the one
given) and streams it through the right reader.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ._common import ReadContext, jsonl_records
from ._sink import Loc, TraceSink, format_loc
from ._source import (
    OpenedSource,
    Source,
    TraceInputError,
    document_records,
    expand_paths,
    open_source,
    parse_document,
)

__all__ = [
    "ALIASES",
    "FORMATS",
    "OpenedSource",
    "Source",
    "TraceFormatError",
    "TraceInputError",
    "TraceSink",
    "classify",
    "expand_paths",
    "format_loc",
    "normalize_format",
    "read_source",
]

# name -> (reader module, what it reads)
FORMATS: dict[str, tuple[str, str]] = {
    "loopwarden": (
        "loopwarden.traces.loopwarden",
        "loopwarden's own JSONL run record (run_start / call / outcome / compaction / event)",
    ),
    "claude-code": (
        "loopwarden.traces.claude_code",
        "Claude Code session transcripts (~/.claude/projects/<project>/<session>.jsonl)",
    ),
    "codex": (
        "loopwarden.traces.codex",
        "OpenAI Codex CLI rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)",
    ),
    "openclaw": (
        "loopwarden.traces.openclaw",
        "OpenClaw session transcripts (~/.openclaw/agents/<agent>/sessions/<id>.jsonl)",
    ),
    "chat": (
        "loopwarden.traces.chat",
        "OpenAI Chat Completions / Responses / Anthropic Messages lists (JSON or JSONL)",
    ),
    "otel": (
        "loopwarden.traces.otel",
        "OpenTelemetry GenAI spans as JSON (OTLP JSON, console exporter, flat spans)",
    ),
}

ALIASES = {
    "lw": "loopwarden",
    "claude": "claude-code",
    "claudecode": "claude-code",
    "openai": "chat",
    "responses": "chat",
    "chat-completions": "chat",
    "anthropic": "chat",
    "opentelemetry": "otel",
    "otlp": "otel",
}

_LW_TYPES = frozenset({"run_start", "call", "outcome", "compaction", "event"})
_CODEX_TYPES = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "compacted", "world_state"}
)
_OPENCLAW_TYPES = frozenset(
    {
        "message",
        "custom_message",
        "custom",
        "compaction",
        "branch_summary",
        "model_change",
        "thinking_level_change",
        "label",
        "session_info",
    }
)
_CLAUDE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "summary",
        "attachment",
        "file-history-snapshot",
        "queue-operation",
        "last-prompt",
        "cost-state",
        "progress",
    }
)


class TraceFormatError(Exception):
    """The format of an input could not be determined (or makes no sense for it)."""


def supported_formats_text() -> str:
    return ", ".join(FORMATS)


def normalize_format(name: str) -> str:
    """A format name or alias as the canonical name; raises ``ValueError`` if unknown."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown trace format {name!r}; supported: {supported_formats_text()}")
    return key


def classify(record: Any) -> str | None:
    """The format one parsed record belongs to, or None if it tells nothing."""
    if isinstance(record, list):
        for item in record[:20]:
            found = classify(item)
            if found is not None:
                return "chat" if found == "chat" else found
        return None
    if not isinstance(record, Mapping):
        return None
    kind = record.get("type")
    if not isinstance(kind, str):
        kind = None  # a list or object here would not even be hashable
    if kind in _LW_TYPES and "run_id" in record:
        return "loopwarden"
    if kind in _CODEX_TYPES and "payload" in record:
        return "codex"
    if kind == "session" and "id" in record:
        return "openclaw"
    if kind in _OPENCLAW_TYPES and "id" in record and "parentId" in record:
        return "openclaw"
    if "sessionId" in record and kind in _CLAUDE_TYPES:
        return "claude-code"
    if kind in _CLAUDE_TYPES and ("uuid" in record or "leafUuid" in record):
        return "claude-code"
    if kind == "file-history-snapshot" and "snapshot" in record:
        return "claude-code"
    from .otel import is_span

    if is_span(record):
        return "otel"
    from .chat import is_conversation, is_item

    if is_conversation(record) or is_item(record):
        return "chat"
    return None


def _sniff_jsonl(head: list[bytes]) -> tuple[bool, str | None]:
    """(is JSONL, detected format) from the first non-blank lines."""
    parsed_any = False
    for index, line in enumerate(head):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            if index == 0:
                return False, None  # a pretty-printed document, or not JSON at all
            continue
        parsed_any = True
        found = classify(record)
        if found is not None:
            return True, found
    return parsed_any, None


def _document_format(doc: Any) -> str | None:
    if isinstance(doc, list):
        for item in doc[:50]:
            found = classify(item)
            if found is not None:
                return found
        return None
    return classify(doc)


def read_source(
    source: Source,
    sink: TraceSink,
    *,
    index: int,
    input_format: str | None = None,
    on_open: Callable[[OpenedSource], None] | None = None,
    on_format: Callable[[str], None] | None = None,
) -> str | None:
    """Stream one input through its reader. Returns the format, or None for an empty input.

    Raises :class:`TraceFormatError` when the format cannot be told and
    :class:`TraceInputError` when the input cannot be read.
    """
    opened: OpenedSource = open_source(source)
    if on_open is not None:
        on_open(opened)
    try:
        head = opened.lines.sniff()
        if not head:
            return None
        jsonl, found = _sniff_jsonl(head)
        records: Iterable[tuple[Loc, Any]]
        if jsonl:
            fmt = input_format or found
            if fmt is None:
                raise TraceFormatError(_unknown_message(source))
            if fmt == "loopwarden":
                records = opened.lines  # the reader parses raw lines itself (fast path)
            else:
                records = jsonl_records(opened.lines, sink)
        else:
            doc, reason = parse_document(opened.lines.rest())
            if reason is not None:
                raise TraceFormatError(f"{source.name}: {reason}")
            fmt = input_format or _document_format(doc)
            if fmt is None:
                raise TraceFormatError(_unknown_message(source))
            records = document_records(doc)
        if on_format is not None:
            on_format(fmt)
        module = importlib.import_module(FORMATS[fmt][0])
        context = ReadContext(source.name, source.path, index)
        module.read(records, sink, context)
        return fmt
    finally:
        opened.close()


def _unknown_message(source: Source) -> str:
    return (
        f"{source.name}: cannot tell which trace format this is; supported formats: "
        f"{supported_formats_text()} (force one with --input-format)"
    )
