"""What trace readers feed: the moments of an agent run, in the order they happened.

Readers translate one trace format into calls of a :class:`TraceSink`; the
replay engine (:class:`~loopwarden.traces.replay.Replayer`) is the sink that
drives the runtime guard. Readers never hash anything themselves except where
the trace already holds loopwarden's own hashes (``*_hashed`` methods). Where
a trace records what each model response cost, readers pass it on
(``model_turn`` / ``turn_usage``); nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["Loc", "ReplaySink", "TraceSink", "format_loc"]

Loc = int | str | None
"""Where a record is: a 1-based line number (JSONL), a JSON path (documents), or unknown."""


def format_loc(source: str, loc: Loc) -> str:
    """``file:line`` for JSONL lines, ``file: path`` for positions inside a JSON document."""
    if loc is None:
        return source
    if isinstance(loc, int):
        return f"{source}:{loc}"
    return f"{source}: {loc}"


class TraceSink(Protocol):
    """Receives the runs of a trace. Run keys are chosen by the reader, unique per source."""

    def begin_run(
        self,
        key: str,
        *,
        label: str,
        line: Loc,
        session: str | None = None,
        agent: str | None = None,
        tools: Iterable[str] | None = None,
        title: str | None = None,
    ) -> None:
        """A run starts. ``tools`` are the registered tool names when the trace lists them."""
        ...

    def call(self, key: str, call_id: str | None, tool: str, params: Any, line: Loc) -> None:
        """The model asked for a tool call with these params."""
        ...

    def call_hashed(
        self,
        key: str,
        call_id: str | None,
        tool: str,
        args_hash: str,
        line: Loc,
        params: Any,
        poll: bool | None = None,
    ) -> None:
        """A call known by its args hash (loopwarden's own run records); ``poll`` if recorded."""
        ...

    def outcome(
        self, key: str, call_id: str | None, line: Loc, *, result: Any = ..., error: Any = ...
    ) -> None:
        """A call's result or error, matched to its call by ``call_id``."""
        ...

    def outcome_hashed(
        self,
        key: str,
        call_id: str | None,
        tool: str,
        args_hash: str,
        outcome_hash: str | None,
        line: Loc,
        is_error: bool = False,
        unknown_tool: str | None = None,
    ) -> None:
        """An outcome known by its hash (loopwarden's own run records)."""
        ...

    def compaction(self, key: str, line: Loc) -> None:
        """The context was compacted during this run."""
        ...

    def live_event(self, key: str) -> None:
        """The trace holds a decision the live guard made (counted, not replayed)."""
        ...

    def model_turn(self, key: str, tokens: int | None) -> None:
        """The calls that follow in ``key`` come from a new model response.

        ``tokens`` is what that response cost where the trace records it
        (input, output and cache tokens), None where it does not. Readers
        send it just before the response's first call.
        """
        ...

    def turn_usage(self, key: str, tokens: int | None) -> None:
        """What the response behind the latest calls of ``key`` cost, recorded after them.

        (Codex records usage after the calls.) The calls that follow belong to a new response.
        """
        ...

    def end_run(self, key: str) -> None:
        """The run is over; nothing more will arrive for ``key``."""
        ...

    def problem(self, loc: Loc, reason: str) -> None:
        """A record that could not be used; it is skipped and replay goes on."""
        ...

    def has_run(self, key: str) -> bool:
        """Whether ``key`` is an open run."""
        ...


class ReplaySink(TraceSink, Protocol):
    """A trace sink that replays: told which input it reads, and able to end every open run."""

    def set_source(self, source: str, fmt: str) -> None:
        """The records that follow come from ``source``, a trace of format ``fmt``."""
        ...

    def finish(self) -> None:
        """End every open run (the end of an input)."""
        ...
