"""Fleet inputs: files, folders, globs, ``.gz`` and (optionally) ``fsspec`` URLs, as shards.

A shard is a unit of work a worker can do alone: a whole file, or, for a large
plain JSONL file that holds one run per line (Chat/Responses conversation
objects, as in fine-tuning and benchmark datasets), a byte range of it that
starts and ends on a line boundary. The plan depends only on the inputs (never
on the number of workers or the engine), which is what keeps results identical
whatever runs them.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..traces import TraceInputError, classify, expand_paths
from ..traces.chat import is_conversation

__all__ = ["SPLIT_BYTES", "Shard", "plan_shards"]

SPLIT_BYTES = 32 << 20
"""Plain JSONL files of one run per line larger than this are split into ranges of this size."""

_GLOB_CHARS = frozenset("*?[")
_SCAN_BLOCK = 1 << 20


@dataclass(frozen=True)
class Shard:
    """One unit of work: a whole input, or a line-aligned byte range of a large one."""

    index: int
    """Position of the input among all inputs (orders results, prefixes run keys)."""
    part: int
    """Position of this range inside its input (0 for a whole file)."""
    name: str
    """What messages call the input: the path as found, or the URL."""
    path: str | None
    """Local path; None for stdin or a URL."""
    url: str | None = None
    """An ``fsspec`` URL (read by the worker that runs the shard)."""
    start: int = 0
    end: int | None = None
    """Byte range; ``end`` None means the whole input."""
    first_line: int = 1
    """Line number of the first line of the range (problems say ``file:line``)."""
    fmt: str | None = None
    """The format, when it is known (forced, or sniffed for a split)."""
    size: int = 0
    """Bytes of input this shard reads (for progress)."""
    walked: bool = False
    """Found in a folder or by a glob: read only if it is a regular file."""

    @property
    def is_range(self) -> bool:
        return self.end is not None


def _is_url(text: str) -> bool:
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isidentifier()


def _url_inputs(given: str) -> list[tuple[str, str, int]]:
    """``(name, url, size)`` for an fsspec URL, glob or folder."""
    try:
        import fsspec  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        raise TraceInputError(
            f"{given}: reading URLs needs fsspec (pip install fsspec, plus the "
            "filesystem package of the store, such as s3fs or gcsfs)"
        ) from None
    try:
        fs, root = fsspec.core.url_to_fs(given)
        if _GLOB_CHARS & set(root):
            found = sorted(fs.glob(root))
        elif fs.isdir(root):
            found = sorted(p for p in fs.find(root) if _trace_name(p))
        else:
            found = [root]
        out = []
        for path in found:
            if fs.isdir(path):
                continue
            size = fs.size(path) or 0
            out.append((fs.unstrip_protocol(path), fs.unstrip_protocol(path), int(size)))
    except (OSError, ValueError) as exc:
        raise TraceInputError(f"cannot list {given}: {exc}") from None
    if not out:
        raise TraceInputError(f"no trace file found at {given}")
    return out


def _trace_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if name.startswith("."):
        return False
    bare = name[:-3] if name.endswith(".gz") else name
    return bare.endswith((".jsonl", ".json", ".ndjson"))


def _local_paths(given: str) -> list[tuple[str, Path | None, bool]]:
    """Local inputs of one argument: a file, a folder (walked), a glob, or ``-``; with
    whether each was found (in a folder or by a glob) rather than named."""
    if given != "-" and not os.path.exists(given) and _GLOB_CHARS & set(given):
        matches = sorted(glob.glob(given, recursive=True))
        if not matches:
            raise TraceInputError(f"no file matches {given}")
        out: list[tuple[str, Path | None, bool]] = []
        for match in matches:
            if os.path.isdir(match):
                out.extend((s.name, s.path, True) for s in expand_paths([match]))
            else:
                out.append((match, Path(match), True))
        return out
    return [(s.name, s.path, s.walked) for s in expand_paths([given])]


def plan_shards(
    paths: Sequence[str], *, input_format: str | None = None, split_bytes: int = SPLIT_BYTES
) -> list[Shard]:
    """The shards of the given inputs, in input order.

    Raises :class:`~loopwarden.traces.TraceInputError` for a path, glob or URL
    that names nothing.
    """
    shards: list[Shard] = []
    seen_stdin = False
    index = 0
    for given in paths:
        if _is_url(given):
            for name, url, size in _url_inputs(given):
                shards.append(Shard(index, 0, name, None, url=url, fmt=input_format, size=size))
                index += 1
            continue
        for name, path, walked in _local_paths(given):
            if path is None:
                if not seen_stdin:
                    shards.append(Shard(index, 0, name, None, fmt=input_format))
                    index += 1
                seen_stdin = True
                continue
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
            found = _split(index, name, str(path), size, input_format, split_bytes)
            shards.extend(dataclasses.replace(s, walked=walked) for s in found)
            index += 1
    return shards


def _split(
    index: int, name: str, path: str, size: int, fmt: str | None, split_bytes: int
) -> list[Shard]:
    whole = [Shard(index, 0, name, path, fmt=fmt, size=size)]
    if size <= split_bytes or path.endswith(".gz") or fmt not in (None, "chat"):
        return whole
    if not _one_run_per_line(path):
        return whole
    # Split points at line starts, with the line number there: one sequential
    # read that only counts newlines (far cheaper than parsing).
    bounds: list[tuple[int, int]] = [(0, 1)]
    lines = 1
    pos = 0
    with open(path, "rb") as handle:
        for target in range(split_bytes, size, split_bytes):
            if target <= pos:
                continue
            handle.seek(pos)
            remaining = target - pos
            while remaining > 0:
                block = handle.read(min(_SCAN_BLOCK, remaining))
                if not block:
                    break
                lines += block.count(b"\n")
                remaining -= len(block)
            partial = handle.readline()  # the rest of the line the target falls in
            lines += partial.count(b"\n")
            pos = target + len(partial)
            if pos >= size:
                break
            bounds.append((pos, lines))
    if len(bounds) < 2:
        return whole
    shards = []
    for part, (start, first_line) in enumerate(bounds):
        end = bounds[part + 1][0] if part + 1 < len(bounds) else size
        shards.append(
            Shard(index, part, name, path, None, start, end, first_line, "chat", end - start)
        )
    return shards


def _one_run_per_line(path: str) -> bool:
    """Whether the first lines of a file are Chat/Responses conversation objects."""
    try:
        with open(path, "rb") as handle:
            head = [handle.readline() for _ in range(5)]
    except OSError:
        return False
    checked = 0
    for line in head:
        if not line.strip():
            continue
        try:
            record: Any = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        if classify(record) != "chat":
            return False
        if not (isinstance(record, list) or (isinstance(record, dict) and is_conversation(record))):
            return False
        checked += 1
    return checked > 0
