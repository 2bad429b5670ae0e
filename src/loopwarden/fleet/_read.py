"""Reading one shard into a trace sink, the way ``replay`` reads a whole input.

A whole local file without a record tap goes through
:func:`loopwarden.traces.read_source` itself. A byte range of a large file, a
URL (copied to a temporary file by the worker) and reads that need to see the
raw records (``tap``: token usage, outcome labels) use the same building
blocks: the same format detection, the same readers, the same problems.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ..traces import (
    FORMATS,
    Source,
    TraceFormatError,
    TraceInputError,
    TraceSink,
    _document_format,
    _sniff_jsonl,
    _unknown_message,
    read_source,
)
from ..traces._common import ReadContext, jsonl_records
from ..traces._sink import Loc
from ..traces._source import document_records, open_source, parse_document
from ._inputs import Shard

__all__ = ["RecordTap", "read_shard"]

RecordTap = Callable[[str, Iterable[tuple[Loc, Any]]], Iterable[tuple[Loc, Any]]]
"""``tap(format, records)``: sees every record on its way to the reader (and passes it on)."""

_BOM = b"\xef\xbb\xbf"


def read_shard(
    shard: Shard,
    sink: TraceSink,
    *,
    tap: RecordTap | None = None,
    on_format: Callable[[str], None] | None = None,
) -> str | None:
    """Stream one shard through its reader. Returns the format, or None for an empty input.

    Raises :class:`TraceFormatError` when the format cannot be told and
    :class:`TraceInputError` when the input cannot be read.
    """
    if shard.url is not None:
        with _fetched(shard.url) as local:
            return _read_file(shard, local, sink, tap, on_format)
    if shard.is_range:
        return _read_range(shard, sink, tap, on_format)
    return _read_file(shard, shard.path, sink, tap, on_format)


@contextlib.contextmanager
def _fetched(url: str) -> Iterator[str]:
    """A local copy of a URL's bytes (streamed; removed afterwards)."""
    import fsspec  # type: ignore[import-untyped, import-not-found, unused-ignore]

    suffix = ".gz" if url.endswith(".gz") else ""
    fd, local = tempfile.mkstemp(prefix="loopwarden-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out, fsspec.open(url, "rb") as remote:
            shutil.copyfileobj(remote, out, 1 << 20)
    except (OSError, ValueError) as exc:
        os.unlink(local)
        raise TraceInputError(f"cannot read {url}: {exc}") from None
    try:
        yield local
    finally:
        with contextlib.suppress(OSError):
            os.unlink(local)


def _read_file(
    shard: Shard,
    path: str | None,
    sink: TraceSink,
    tap: RecordTap | None,
    on_format: Callable[[str], None] | None,
) -> str | None:
    # A URL keeps its own name (and so its .gz suffix) for messages and decoding.
    source = Source(shard.name, Path(path) if path is not None else None)
    if tap is None:
        return read_source(
            source, sink, index=shard.index, input_format=shard.fmt, on_format=on_format
        )
    opened = open_source(source)
    try:
        head = opened.lines.sniff()
        if not head:
            return None
        jsonl, found = _sniff_jsonl(head)
        records: Iterable[tuple[Loc, Any]]
        if jsonl:
            fmt = shard.fmt or found
            if fmt is None:
                raise TraceFormatError(_unknown_message(source))
            records = opened.lines if fmt == "loopwarden" else jsonl_records(opened.lines, sink)
        else:
            doc, reason = parse_document(opened.lines.rest())
            if reason is not None:
                raise TraceFormatError(f"{source.name}: {reason}")
            fmt = shard.fmt or _document_format(doc)
            if fmt is None:
                raise TraceFormatError(_unknown_message(source))
            records = document_records(doc)
        if on_format is not None:
            on_format(fmt)
        module = importlib.import_module(FORMATS[fmt][0])
        module.read(tap(fmt, records), sink, ReadContext(source.name, source.path, shard.index))
        return fmt
    finally:
        opened.close()


def _range_lines(handle: IO[bytes], shard: Shard) -> Iterator[tuple[int, bytes]]:
    """Numbered lines of ``[start, end)``; both ends sit on line boundaries."""
    end = shard.end if shard.end is not None else 0
    pos = shard.start
    number = shard.first_line
    handle.seek(pos)
    for line in handle:
        if pos == 0 and line.startswith(_BOM):
            line = line[3:]
            pos += 3
        yield number, line
        pos += len(line)
        number += 1
        if pos >= end:
            return


def _read_range(
    shard: Shard,
    sink: TraceSink,
    tap: RecordTap | None,
    on_format: Callable[[str], None] | None,
) -> str | None:
    fmt = shard.fmt or "chat"
    path = shard.path or ""
    try:
        handle = open(path, "rb", buffering=1 << 20)  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceInputError(f"cannot read {shard.name}: {exc.strerror or exc}") from None
    try:
        if on_format is not None:
            on_format(fmt)
        records: Iterable[tuple[Loc, Any]] = jsonl_records(_range_lines(handle, shard), sink)
        if tap is not None:
            records = tap(fmt, records)
        module = importlib.import_module(FORMATS[fmt][0])
        module.read(records, sink, ReadContext(shard.name, Path(path), shard.index))
        return fmt
    finally:
        handle.close()
