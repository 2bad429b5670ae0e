"""Recorded agent traces: format detection and streaming readers for replay.

Each supported format has a reader module that turns its records into the
moments of a run (calls, outcomes, compactions) for a
:class:`~loopwarden.traces._sink.TraceSink` — in practice the
:class:`~loopwarden.traces.replay.Replayer`, which drives the real runtime
guard. :func:`read_source` detects the format of one input (or takes the one
given) and streams it through the right reader; :func:`read_input` does the
same for a replay and turns every way an input can fail into an
:class:`InputInfo` instead of an exception.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ..errors import LoopwardenError
from ._common import ReadContext, jsonl_records
from ._results import InputInfo
from ._sink import Loc, ReplaySink, TraceSink, format_loc
from ._source import (
    ByteRange,
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
    "ByteRange",
    "InputInfo",
    "OpenedSource",
    "RecordTap",
    "ReplaySink",
    "Source",
    "TraceFormatError",
    "TraceInputError",
    "TraceSink",
    "classify",
    "expand_paths",
    "format_loc",
    "normalize_format",
    "read_input",
    "read_source",
]

RecordTap = Callable[[str, Iterable[tuple[Loc, Any]]], Iterable[tuple[Loc, Any]]]
"""``tap(format, records)``: sees every record on its way to the reader, and passes it on.

For what no reader keeps (``loopwarden tune --label-field`` reads an outcome
label from any field). Loopwarden run records pass as raw ``(line, bytes)``.
"""

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


class TraceFormatError(LoopwardenError):
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
    parsed = 0
    first_ok = True
    found: str | None = None
    for index, line in enumerate(head):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            first_ok = first_ok and index > 0
            continue
        parsed += 1
        found = found or classify(record)
        if found is not None and first_ok:
            return True, found
    if first_ok:
        return parsed > 0, None
    if found is not None and parsed * 2 >= len(head) - 1:
        # A malformed first line of a JSONL trace (most other lines parse) is one bad
        # line, reported as file:1, not a sign that the file is a document.
        return True, found
    return False, None  # a pretty-printed document, or not JSON at all


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
    tap: RecordTap | None = None,
) -> str | None:
    """Stream one input through its reader. Returns the format, or None for an empty input.

    A source with a :attr:`~Source.byte_range` is read as JSONL lines of the
    range's format (unless ``input_format`` says otherwise), numbered from
    the range's first line. ``tap`` sees the records on their way to the reader.

    Raises :class:`TraceFormatError` when the format cannot be told and
    :class:`TraceInputError` when the input cannot be read.
    """
    opened: OpenedSource = open_source(source)
    if on_open is not None:
        on_open(opened)
    opened.lines.on_problem = sink.problem
    try:
        head = opened.lines.sniff()
        if not head:
            return None
        part = source.byte_range
        jsonl, found = (True, part.fmt) if part is not None else _sniff_jsonl(head)
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
        if tap is not None:
            records = tap(fmt, records)
        module = importlib.import_module(FORMATS[fmt][0])
        context = ReadContext(source.name, source.path, index)
        module.read(records, sink, context)
        return fmt
    finally:
        opened.close()


def read_input(
    source: Source,
    sink: ReplaySink,
    *,
    index: int,
    input_format: str | None = None,
    on_open: Callable[[OpenedSource], None] | None = None,
    tap: RecordTap | None = None,
) -> tuple[InputInfo, str | None]:
    """:func:`read_source` for a replay: never raises for a bad input.

    Returns the input's :class:`InputInfo` and, when it could not be read,
    one line that says so (naming the input). The sink is told the source
    and its format (``set_source``) before the records arrive; its open runs
    are left for the caller to finish. Unknown or malformed formats,
    unreadable files and even a bug in a reader end only this input.
    ``KeyboardInterrupt`` and ``BrokenPipeError`` are not caught.
    """
    name = source.name
    sink.set_source(name, input_format or "?")
    info = InputInfo(name, None)
    message = None
    try:
        info.format = read_source(
            source,
            sink,
            index=index,
            input_format=input_format,
            on_open=on_open,
            on_format=functools.partial(sink.set_source, name),
            tap=tap,
        )
        if info.format is None:
            info.error = "empty input"
    except (TraceFormatError, TraceInputError) as exc:
        info.error = message = str(exc)  # the message names the input
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except (EOFError, OSError, zlib.error) as exc:  # a truncated or corrupt .gz, a read error
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        info.error = f"cannot read: {reason or type(exc).__name__}"
        message = f"{name}: {info.error}"
    except Exception as exc:  # a reader bug must not end the whole replay
        info.error = f"internal error while reading: {type(exc).__name__}: {exc}"
        message = f"{name}: {info.error}"
    return info, message


def _unknown_message(source: Source) -> str:
    return (
        f"{source.name}: cannot tell which trace format this is; supported formats: "
        f"{supported_formats_text()} (force one with --input-format)"
    )
