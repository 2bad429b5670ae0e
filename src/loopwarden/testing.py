"""Helpers for testing agents that use loopwarden (loopwarden's own tests use them too).

::

    from loopwarden.testing import SMALL_THRESHOLDS, FakeClock, ScriptedAgent, capture_events

    clock = FakeClock()
    guard = lw.LoopGuard(SMALL_THRESHOLDS, clock=clock)
    agent = ScriptedAgent(guard.run(), {"poll": lambda job: "pending"})
    with capture_events() as events:
        for i in range(4):
            agent.turn([("poll", {"job": "42"}, f"c{i}")])
    assert [e.action for e in events] == ["warn"]

Nothing here is imported by ``import loopwarden``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .events import LoopEvent

if TYPE_CHECKING:
    from .guard import RunGuard

__all__ = ["SMALL_THRESHOLDS", "Call", "FakeClock", "ScriptedAgent", "Seen", "capture_events"]

SMALL_THRESHOLDS: Final[Mapping[str, Any]] = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "globalCircuitBreakerThreshold": 7,
            "unknownToolThreshold": 3,
        }
    }
}
"""A config whose escalation fits in a short test: warn at 3 identical calls, block at 5,
stop the run at 7, block a missing tool after 3 tries. Treat it as read-only: build
variants with ``{**SMALL_THRESHOLDS, "loopwarden": {...}}``."""


class FakeClock:
    """A clock that moves only when told to; pass it as ``LoopGuard(clock=...)`` or to a store.

    >>> clock = FakeClock(100.0)
    >>> clock.advance(5)
    105.0
    >>> clock()
    105.0
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        """The time it reads, in seconds since the epoch."""

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward; returns the new time."""
        self.now += seconds
        return self.now


class _EventHandler(logging.Handler):
    def __init__(self, events: list[LoopEvent]) -> None:
        super().__init__(logging.WARNING)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "loopwarden_event", None)
        if isinstance(event, LoopEvent):
            self.events.append(event)


@contextlib.contextmanager
def capture_events() -> Iterator[list[LoopEvent]]:
    """Collect every :class:`~loopwarden.events.LoopEvent` of every guard in this process.

    Events reach the list in the order the guards emit them, whatever sinks the
    guards were given; the ``loopwarden`` logger is lowered to WARNING while the
    block runs if it was set higher.
    """
    events: list[LoopEvent] = []
    handler = _EventHandler(events)
    logger = logging.getLogger("loopwarden")
    level = logger.level
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


Call = tuple[str, Mapping[str, Any], str]
"""A call the script makes: tool name, params, call id."""


@dataclass
class Seen:
    """What the model got back for one call."""

    call_id: str
    tool: str
    text: str
    """The text the model reads: the result with the guard's note, or the block message."""
    blocked: bool
    warned: bool
    result: Any = None
    """What the tool returned (``None`` when it was blocked or failed)."""
    error: BaseException | None = None
    """What the tool raised, or the unknown-tool error of a missing tool."""
    note: str | None = None
    """The guard's warning note, appended to ``text``."""


@dataclass
class ScriptedAgent:
    """An agent loop whose model is a script, driven through a real run guard.

    Each turn is a list of calls; ``tools`` are plain functions called with the
    params as keywords. The agent does what an integration does: blocked calls
    are not run and return the block message, results get the guard's note
    appended, and a :class:`~loopwarden.errors.LoopAbort` ends the run (it
    propagates). ``render`` turns a result into the text the model reads;
    ``on_run(seen)`` is called as soon as a tool has run, before the guard sees
    its outcome (``note`` is not known yet).
    """

    run: RunGuard
    tools: Mapping[str, Callable[..., Any]]
    render: Callable[[Any], str] = str
    on_run: Callable[[Seen], None] | None = None
    seen: list[Seen] = field(default_factory=list)
    executed: int = 0
    """How many calls actually ran a tool."""

    def _execute(self, call: Call) -> tuple[Any, BaseException | None]:
        tool, params, _ = call
        fn = self.tools.get(tool)
        result: Any = None
        error: BaseException | None = None
        if fn is None:
            error = LookupError(f"Unknown tool: {tool}")
        else:
            self.executed += 1
            try:
                result = fn(**params)
            except Exception as exc:  # the tool failed; the model sees the error
                error = exc
        if self.on_run is not None:
            self.on_run(self._seen(call, result, error, None))
        return result, error

    def _seen(self, call: Call, result: Any, error: BaseException | None, note: str | None) -> Seen:
        tool, _, call_id = call
        text = f"Error: {error}" if error is not None else self.render(result)
        if note:
            text = f"{text}\n\n{note}" if text else note
        return Seen(call_id, tool, text, False, bool(note), result, error, note)

    def call(self, tool: str, params: Mapping[str, Any], call_id: str) -> Seen:
        """One call, as an integration makes it."""
        return self.turn([(tool, params, call_id)])[0]

    def turn(self, calls: Iterable[Call], *, reverse_outcomes: bool = False) -> list[Seen]:
        """One model turn: every call is checked first, then run; outcomes may be reported
        in reverse order (parallel calls)."""
        decided = [(call, self.run.before_call(*call)) for call in calls]
        finished: list[Seen | tuple[Call, Any, BaseException | None]] = []
        for call, decision in decided:
            if decision.blocked:
                finished.append(Seen(call[2], call[0], decision.message or "", True, False))
            else:
                finished.append((call, *self._execute(call)))
        out: list[Seen] = []
        for item in reversed(finished) if reverse_outcomes else finished:
            if isinstance(item, Seen):
                out.append(item)
                continue
            call, result, error = item
            tool, params, call_id = call
            if error is not None:
                note = self.run.after_call(tool, params, call_id, error=error)
            else:
                note = self.run.after_call(tool, params, call_id, result=result)
            out.append(self._seen(call, result, error, note))
        self.seen.extend(out)
        return out

    async def aturn(self, calls: Iterable[Call]) -> list[Seen]:
        """:meth:`turn` through the guard's async methods, one call after the other."""
        out = []
        for call in calls:
            tool, params, call_id = call
            decision = await self.run.abefore_call(tool, params, call_id)
            if decision.blocked:
                out.append(Seen(call_id, tool, decision.message or "", True, False))
                continue
            result, error = self._execute(call)
            await asyncio.sleep(0)
            if error is not None:
                note = await self.run.aafter_call(tool, params, call_id, error=error)
            else:
                note = await self.run.aafter_call(tool, params, call_id, result=result)
            out.append(self._seen(call, result, error, note))
        self.seen.extend(out)
        return out
