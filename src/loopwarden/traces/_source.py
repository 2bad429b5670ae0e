"""Trace inputs: files, folders and stdin, read as a stream of records.

JSONL files are read one line at a time (constant memory, however large the
file). A file that is one JSON document (a pretty-printed export, a JSON
array, or JSON values one after another) has to be parsed whole; that is
documented as the limit for huge inputs: use JSONL for them.

Bounds (each a documented setting, ``LOOPWARDEN_MAX_LINE_BYTES`` and
``LOOPWARDEN_MAX_DOCUMENT_BYTES``, so they reach fleet workers too): a line
longer than :func:`max_line_bytes` is reported as ``file:line`` and skipped
without being held; a document larger than :func:`max_document_bytes` is
refused. A folder walk takes regular files only (a FIFO or a device named
``*.jsonl`` is reported and skipped, never read).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple, cast

import orjson

from ..errors import LoopwardenError
from ._sink import Loc

__all__ = ["ByteRange", "Source", "TraceInputError", "expand_paths", "open_source"]

# Extensions a folder walk picks up (a ".gz" of any of them too).
TRACE_SUFFIXES = (".jsonl", ".json", ".ndjson")
# How much of a file detection may look at before deciding.
SNIFF_LINES = 50
SNIFF_BYTES = 1 << 20
# A JSON document is parsed whole; refuse absurd sizes with a clear message.
MAX_DOCUMENT_BYTES = 1 << 30
# A JSONL line longer than this is reported and skipped (memory stays bounded).
MAX_LINE_BYTES = 32 << 20
_READ_CHUNK = 1 << 20


def _setting(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def max_line_bytes() -> int:
    """The longest JSONL line read (``LOOPWARDEN_MAX_LINE_BYTES``, default 32 MiB)."""
    return _setting("LOOPWARDEN_MAX_LINE_BYTES", MAX_LINE_BYTES)


def max_document_bytes() -> int:
    """The largest JSON document parsed whole (``LOOPWARDEN_MAX_DOCUMENT_BYTES``, 1 GiB)."""
    return _setting("LOOPWARDEN_MAX_DOCUMENT_BYTES", MAX_DOCUMENT_BYTES)


def _size_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


class TraceInputError(LoopwardenError):
    """An input path that cannot be read at all (missing, unreadable)."""


class ByteRange(NamedTuple):
    """A line-aligned part of a large JSONL file, read on its own (fleet replay splits by run)."""

    start: int
    end: int
    """Byte offsets; both sit at the start of a line (``end`` may be the file size)."""
    first_line: int
    """Line number of the line at ``start``, so problems still say ``file:line``."""
    fmt: str
    """The format of the whole file (a range's first lines need not tell it)."""


@dataclass(frozen=True)
class Source:
    """One trace input."""

    name: str
    """What messages call it: the path as given (or found in a folder), or ``<stdin>``."""
    path: Path | None
    """``None`` for stdin."""
    byte_range: ByteRange | None = None
    """Only this part of the file (a plain JSONL file); None for all of it."""
    walked: bool = False
    """Found in a folder: read only if it is a regular file."""

    @property
    def size(self) -> int | None:
        if self.byte_range is not None:
            return self.byte_range.end - self.byte_range.start
        if self.path is None:
            return None
        try:
            return self.path.stat().st_size
        except OSError:
            return None


def _walk(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            bare = name[:-3] if name.endswith(".gz") else name
            if bare.endswith(TRACE_SUFFIXES):
                found.append(Path(root) / name)
    return found


def expand_paths(paths: Sequence[str]) -> list[Source]:
    """Sources for the given paths: files as given, folders walked (sorted), ``-`` = stdin."""
    sources: list[Source] = []
    stdin_seen = False
    for given in paths:
        if given == "-":
            if not stdin_seen:
                sources.append(Source("<stdin>", None))
                stdin_seen = True
            continue
        path = Path(given)
        if path.is_dir():
            sources.extend(Source(str(p), p, walked=True) for p in _walk(path))
        elif path.exists():
            sources.append(Source(given, path))
        else:
            raise TraceInputError(f"no such file or folder: {given}")
    return sources


class LineStream:
    """Numbered lines of a binary stream, with the first lines buffered for sniffing.

    Lines longer than :func:`max_line_bytes` are skipped (the rest of such a line
    is read in chunks and dropped) and told to :attr:`on_problem` as
    ``(line number, reason)``.
    """

    def __init__(self, handle: IO[bytes], first_line: int = 1) -> None:
        self.handle = handle
        self.first_line = first_line
        self.head: list[bytes] = []
        self._head_taken = False
        self.exhausted = False
        self.limit = max_line_bytes()
        self.on_problem: Callable[[int, str], None] | None = None
        self._next = first_line  # number of the next line read from the handle

    def _skip_rest(self) -> None:
        """Drop the rest of an overlong line, a chunk at a time."""
        readline = self.handle.readline
        while True:
            chunk = readline(_READ_CHUNK)
            if not chunk or chunk.endswith(b"\n"):
                return

    def _readline(self) -> bytes | None:
        """The next line within the bound, ``b""`` at the end; None for a skipped line."""
        line = self.handle.readline(self.limit + 1)
        lineno = self._next
        if line:
            self._next += 1
        if len(line) > self.limit and not line.endswith(b"\n"):
            self._skip_rest()
            if self.on_problem is not None:
                self.on_problem(
                    lineno,
                    f"line longer than {_size_text(self.limit)}; skipped "
                    "(LOOPWARDEN_MAX_LINE_BYTES raises the limit)",
                )
            return None
        return line

    def sniff(self) -> list[bytes]:
        """The first non-blank lines (up to ``SNIFF_LINES`` or ``SNIFF_BYTES``)."""
        if self._head_taken:
            return [line for line in self.head if line.strip()]
        self._head_taken = True
        size = 0
        nonblank = 0
        while nonblank < SNIFF_LINES and size < SNIFF_BYTES:
            line = self._readline()
            if line is None:
                line = b"\n"  # skipped: keeps its number, parses as nothing
            elif not line:
                self.exhausted = True
                break
            if not self.head and self.first_line == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a UTF-8 byte order mark (some Windows tools write one)
            self.head.append(line)
            size += len(line)
            if line.strip():
                nonblank += 1
        return [line for line in self.head if line.strip()]

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        yield from enumerate(self.head, self.first_line)
        if self.exhausted:
            return
        readline = self._readline
        while True:
            lineno = self._next
            line = readline()
            if line is None:
                continue
            if not line:
                return
            yield lineno, line

    def rest(self) -> bytes:
        """Everything (head included) as one byte string, for whole-document parsing."""
        limit = max_document_bytes()
        chunks = [*self.head]
        size = sum(len(c) for c in chunks)
        if not self.exhausted:
            read = self.handle.read
            while size <= limit:  # in chunks: never one huge buffer up front
                chunk = read(min(_READ_CHUNK * 16, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        if size > limit:
            raise TraceInputError(
                f"this JSON document is larger than {_size_text(limit)}; write the trace as "
                "JSONL (one record per line) so it can be streamed, or raise "
                "LOOPWARDEN_MAX_DOCUMENT_BYTES"
            )
        return b"".join(chunks)


class _RangeReader(io.RawIOBase):
    """The bytes ``[start, end)`` of a file; the buffered reader above it splits the lines."""

    def __init__(self, raw: IO[bytes], start: int, end: int) -> None:
        raw.seek(start)
        self.raw = raw
        self.left = max(0, end - start)
        self.start = start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            return 0
        view = memoryview(buffer)[: min(len(buffer), self.left)]
        n = self.raw.readinto(view)  # type: ignore[attr-defined]
        n = n or 0
        self.left -= n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class _CountingReader(io.RawIOBase):
    """Counts compressed bytes consumed, so progress works for ``.gz`` files too."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.consumed += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class OpenedSource:
    """An open source: its line stream, and how far reading has got."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._closers: list[Any] = []
        self._fd: int | None = None
        self._start = 0
        self._counter: _CountingReader | None = None
        handle: IO[bytes]
        part = source.byte_range
        if source.path is None:
            handle = sys.stdin.buffer
        else:
            raw = _open(source, buffering=0 if part is not None else 1 << 20)
            self._closers.append(raw)
            if part is not None:
                limited = _RangeReader(raw, part.start, part.end)
                self._closers.append(limited)
                handle = cast(IO[bytes], io.BufferedReader(limited, 1 << 20))
                self._closers.append(handle)
                self._start = part.start
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    self._fd = raw.fileno()
            elif source.name.endswith(".gz"):
                counter = self._counter = _CountingReader(raw)
                self._closers.append(counter)
                gz = gzip.GzipFile(fileobj=io.BufferedReader(counter, 1 << 20), mode="rb")
                self._closers.append(gz)
                handle = cast(IO[bytes], gz)
            else:
                handle = raw
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    self._fd = raw.fileno()
        self.lines = LineStream(handle, part.first_line if part is not None else 1)

    def position(self) -> int | None:
        """Bytes of the file read so far (at most one buffer ahead), or None if unknown.

        Safe to call from another thread: it asks the OS, not the Python buffer,
        so progress reporting costs the reading loop nothing.
        """
        if self._counter is not None:
            return self._counter.consumed
        if self._fd is None:
            return None
        try:
            return os.lseek(self._fd, 0, os.SEEK_CUR) - self._start
        except OSError:
            return None

    def close(self) -> None:
        for handle in reversed(self._closers):
            with contextlib.suppress(OSError):
                handle.close()


def _open(source: Source, buffering: int) -> IO[bytes]:
    """Open a trace file; only a regular file when it was found in a folder (a FIFO there
    is never waited on), and never a device (``/dev/zero`` has no end)."""
    assert source.path is not None
    try:
        fd = os.open(source.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise TraceInputError(f"cannot read {source.name}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) and not source.walked:
            os.set_blocking(fd, True)  # a pipe named on the command line: read it
        elif not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise TraceInputError(f"{source.name}: {kind}; skipped")
        else:
            os.set_blocking(fd, True)
        return open(fd, "rb", buffering=buffering, closefd=True)
    except BaseException:
        os.close(fd)
        raise


def open_source(source: Source) -> OpenedSource:
    return OpenedSource(source)


def parse_document(data: bytes) -> tuple[Any, str | None]:
    """A whole-file JSON value, or JSON values one after another (as a list).

    Returns ``(value, None)`` or ``(None, reason)``.
    """
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError as exc:
        first_error = str(exc)
    # Several JSON values back to back (e.g. OpenTelemetry's console exporter).
    import json

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = 0
    end = len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return None, f"not valid JSON or JSONL ({first_error})"
        values.append(value)
    if len(values) < 2:
        return None, f"not valid JSON or JSONL ({first_error})"
    return values, None


def document_records(doc: Any) -> Iterator[tuple[Loc, Any]]:
    """Top-level records of a JSON document: list items, or the document itself."""
    if isinstance(doc, list):
        for index, item in enumerate(doc):
            yield f"[{index}]", item
    else:
        yield None, doc
