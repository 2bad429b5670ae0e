"""A shard as a local trace source: its file, its byte range, or a local copy of its URL.

Reading itself is :func:`loopwarden.traces.read_input`'s, the same as for
``loopwarden replay`` on one process: the same format detection, the same
readers, the same problems.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..traces import ByteRange, Source, TraceInputError
from ._inputs import Shard

__all__ = ["local_source", "shard_source"]


def shard_source(shard: Shard, path: str | None = None) -> Source:
    """The trace source a shard reads (``path``: a local copy of its URL)."""
    local = path if path is not None else shard.path
    part = None
    if shard.is_range and shard.end is not None:
        part = ByteRange(shard.start, shard.end, shard.first_line, shard.fmt or "chat")
    return Source(shard.name, Path(local) if local is not None else None, part, shard.walked)


@contextlib.contextmanager
def local_source(shard: Shard) -> Iterator[Source]:
    """The shard's source; a URL is first copied to a temporary file (removed afterwards).

    Raises :class:`~loopwarden.traces.TraceInputError` when the URL cannot be read.
    """
    if shard.url is None:
        yield shard_source(shard)
        return
    import fsspec  # type: ignore[import-untyped, import-not-found, unused-ignore]

    # The copy keeps the .gz suffix, which decides decoding; messages keep the URL.
    suffix = ".gz" if shard.url.endswith(".gz") else ""
    fd, local = tempfile.mkstemp(prefix="loopwarden-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out, fsspec.open(shard.url, "rb") as remote:
            shutil.copyfileobj(remote, out, 1 << 20)
    except (OSError, ValueError) as exc:
        os.unlink(local)
        raise TraceInputError(f"cannot read {shard.url}: {exc}") from None
    try:
        yield shard_source(shard, local)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(local)
