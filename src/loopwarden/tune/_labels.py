"""Outcome labels: the words that mean good and bad, and labels read from the trace itself.

Token usage needs no such side channel (the trace readers pass it on with
:meth:`~loopwarden.traces.TraceSink.model_turn`); an outcome label may sit in
any field of any record (``--label-field``), so :class:`LabelTap` watches the
raw records on their way to the reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from ..traces._sink import Loc

__all__ = ["LABEL_WORDS", "LabelTap", "label_word"]

LABEL_WORDS = {
    "good": "good",
    "healthy": "good",
    "ok": "good",
    "success": "good",
    "succeeded": "good",
    "resolved": "good",
    "pass": "good",
    "passed": "good",
    "true": "good",
    "bad": "bad",
    "stuck": "bad",
    "loop": "bad",
    "looped": "bad",
    "fail": "bad",
    "failed": "bad",
    "failure": "bad",
    "unresolved": "bad",
    "false": "bad",
}


def label_word(value: Any) -> str | None:
    """``good``, ``bad`` or None (unknown) for a label value from a file or a trace."""
    if isinstance(value, bool):
        return "good" if value else "bad"
    if isinstance(value, (int, float)) and value in (0, 1):
        return "good" if value == 1 else "bad"
    if isinstance(value, str):
        return LABEL_WORDS.get(value.strip().lower())
    return None


class LabelSink(Protocol):
    """What the tap tells the tune replayer."""

    def trace_label(self, value: Any) -> None:
        """An outcome label read from the record on its way to the reader."""
        ...

    def record_done(self) -> None:
        """The reader has finished with the record the tap passed on last."""
        ...


class LabelTap:
    """A :data:`~loopwarden.traces.RecordTap` reading a dotted field of every record."""

    def __init__(self, sink: LabelSink, label_field: str) -> None:
        self.sink = sink
        self._path = tuple(label_field.split("."))

    def __call__(self, fmt: str, records: Iterable[tuple[Loc, Any]]) -> Iterator[tuple[Loc, Any]]:
        path = self._path
        sink = self.sink
        for loc, record in records:
            if record.__class__ is dict:
                value = _dig(record, path)
                if value is not None:
                    sink.trace_label(value)
            yield loc, record
            sink.record_done()


def _dig(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
