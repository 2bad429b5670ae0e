"""What the framework integrations share (no framework imports here).

An integration only translates: it finds the run a framework call belongs to
(:class:`RunRegistry`), keeps the guard's tool names in line with what the
framework resolved (:func:`learn_tool`), and hands each call to
:func:`guarded_call` / :func:`aguarded_call`, which run the one sequence every
integration needs, written once::

    before_call ─ block? ── yes ─▶ Answer(blocked): the tool does not run, and
         │                         nothing is reported back (the guard has the veto)
         no
         ▼
    execute() ─ raises? ── yes ─▶ after_call(error) unless it is not an outcome; re-raise
         │
         ▼
    after_call(read(value)) ─▶ Answer(value, note): the integration delivers the note
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, Generic, NamedTuple, TypeVar

from .._util import parse_arguments
from ..config import ConfigSource
from ..engine.runtime import Decision
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import ToolOutcome
from ..stopping import Choice, StopReport, ask_question, parse_choice

__all__ = [
    "ASK_ANSWERS",
    "MAX_ASKS",
    "MAX_NOTE_CHARS",
    "Answer",
    "RunRegistry",
    "ToolOutcome",
    "aguarded_call",
    "append_note",
    "guarded_call",
    "learn_tool",
    "parse_arguments",
    "read_answer",
    "require",
    "resolve_guard",
    "stop_report",
    "text_question",
    "with_summary",
]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

MAX_RUNS = 1024
"""Runs an integration keeps at once; the oldest beyond it (runs whose end never came) go."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; install it with: pip install 'loopwarden[{extra}]'"
        ) from exc


def resolve_guard(config_or_guard: LoopGuard | ConfigSource = None, **kwargs: Any) -> LoopGuard:
    """Accept a ready :class:`LoopGuard`, or anything :func:`load_config` accepts."""
    if isinstance(config_or_guard, LoopGuard):
        if kwargs:
            raise TypeError(
                f"pass {', '.join(sorted(kwargs))} to LoopGuard(...) itself, not with a LoopGuard"
            )
        return config_or_guard
    return LoopGuard(config_or_guard, **kwargs)


class RunRegistry(dict[K, V]):
    """A bounded, thread-safe table from a framework's run key to the integration's run entry.

    A dict (lookups stay plain dict lookups on the per-call path); entries stay
    in creation order, and beyond ``limit`` the oldest is dropped and handed to
    ``on_evict`` (runs whose framework never said they ended).
    """

    def __init__(self, limit: int = MAX_RUNS, on_evict: Callable[[V], None] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()
        self._on_evict = on_evict

    def get_or_create(self, key: K, create: Callable[[], V]) -> V:
        """The entry of ``key``, made by ``create`` (once, under the lock) when missing."""
        entry = self.get(key)
        if entry is not None:
            return entry
        evicted: V | None = None
        with self._lock:
            entry = self.get(key)
            if entry is None:
                entry = self[key] = create()
                if len(self) > self.limit:
                    evicted = self.pop(next(iter(self)))
        if evicted is not None and self._on_evict is not None:
            self._on_evict(evicted)
        return entry

    def forget(self, key: K) -> V | None:
        """Remove and return the entry of ``key``, if there is one."""
        with self._lock:
            return self.pop(key, None)


def learn_tool(run: RunGuard, name: str, registered: bool) -> None:
    """Keep the guard's registered names in line with what the framework resolved.

    Frameworks know exactly which calls name a missing tool (they answer them
    themselves), so the set is learned from the calls instead of computed from
    tools, servers and handoffs.
    """
    tools = run.tools if run.tools is not None else frozenset()
    if registered and name not in tools:
        run.set_tools(tools | {name})
    elif not registered and name in tools:
        run.set_tools(tools - {name})


class Answer(NamedTuple, Generic[T]):
    """What :func:`guarded_call` did with one call."""

    value: T | None
    """What ``execute`` returned (``None`` when the call was blocked)."""
    note: str | None
    """The warning to deliver with the value, if any."""
    decision: Decision
    """The guard's decision before the call; ``decision.message`` answers a blocked call."""
    blocked: bool = False
    """The call was not run: answer it with ``decision.message``."""


Read = Callable[[Any, "str | None"], Any]
Failure = Callable[[BaseException], "ToolOutcome | None"]


def guarded_call(
    run: RunGuard,
    name: str,
    params: Any,
    call_id: str | None,
    execute: Callable[[Any], T],
    arg: Any,
    *,
    read: Read | None = None,
    failure: Failure | None = None,
    on_failure_note: Callable[[str], None] | None = None,
    decided: Decision | None = None,
) -> Answer[T]:
    """Check, run and record one tool call (see the module docstring).

    ``execute(arg)`` runs the tool. ``read(value, call_id)`` is the outcome to
    record: the value itself by default, a
    :class:`ToolOutcome`, or ``MISSING`` for nothing to record (e.g. a
    framework object that does not answer this call). ``failure(exc)`` is the
    outcome of an exception ``execute`` raised (by default the exception as
    the error; ``None``: not an outcome, e.g. an interrupt); the exception is
    re-raised either way, after a note for it went to ``on_failure_note``.
    ``decided``: the decision already made for this call (a person's answer to a stop,
    :meth:`~loopwarden.RunGuard.resume`), so the guard is not asked again.
    Raises the guard's stops (:class:`~loopwarden.errors.LoopAbort`).
    """
    decision = run.before_call(name, params, call_id) if decided is None else decided
    if decision.action == "block":
        return Answer(None, None, decision, True)
    try:
        value = execute(arg)
    except LoopAbort:
        raise
    except Exception as exc:
        outcome = ToolOutcome(error=exc) if failure is None else failure(exc)
        if outcome is not None:
            note = run.after_call(name, params, call_id, result=outcome)
            if note and on_failure_note is not None:
                on_failure_note(note)
        raise
    result = value if read is None else read(value, call_id)
    return Answer(value, run.after_call(name, params, call_id, result=result), decision)


async def aguarded_call(
    run: RunGuard,
    name: str,
    params: Any,
    call_id: str | None,
    execute: Callable[[Any], Awaitable[T]],
    arg: Any,
    *,
    read: Read | None = None,
    failure: Failure | None = None,
    on_failure_note: Callable[[str], None] | None = None,
    decided: Decision | None = None,
) -> Answer[T]:
    """Async form of :func:`guarded_call` (the plain guard methods on in-process stores)."""
    inline = run.inline
    if decided is not None:
        decision = decided
    elif inline:
        decision = run.before_call(name, params, call_id)
    else:
        decision = await run.abefore_call(name, params, call_id)
    if decision.action == "block":
        return Answer(None, None, decision, True)
    try:
        value = await execute(arg)
    except LoopAbort:
        raise
    except Exception as exc:
        outcome = ToolOutcome(error=exc) if failure is None else failure(exc)
        if outcome is not None:
            note = (
                run.after_call(name, params, call_id, result=outcome)
                if inline
                else await run.aafter_call(name, params, call_id, result=outcome)
            )
            if note and on_failure_note is not None:
                on_failure_note(note)
        raise
    result = value if read is None else read(value, call_id)
    note = (
        run.after_call(name, params, call_id, result=result)
        if inline
        else await run.aafter_call(name, params, call_id, result=result)
    )
    return Answer(value, note, decision)


def stop_report(stop: LoopAbort) -> StopReport:
    """The report of a stop (one a RunGuard raised carries it; any other gets the basics)."""
    report = stop.report
    if report is None:
        report = StopReport(stop.code, stop.tool_name, stop.count, stop.message)
    return report


def append_note(text: str, note: str | None) -> str:
    """A tool result text with loopwarden's note after it."""
    if not note:
        return text
    return f"{text}\n\n{note}" if text else note


# -- a person's typed answer (hosts whose approval flow is a line of text) -------------------
MAX_NOTE_CHARS = 4000
"""A person's note for the model is cut to this many characters."""
MAX_ASKS = 3
"""Answers that are none of the three choices are asked again this many times in all; then
the run stops (as under ``stop``)."""
ASK_ANSWERS = (
    "Answer allow_once (let the call run once more), stop (stop the run), or "
    "continue: <a note for the agent> (let it continue, with your note)."
)
"""How a person answers loopwarden's question in a text prompt."""


def text_question(report: StopReport, error: str | None = None) -> str:
    """The question for a host that asks a person with a line of text: the stop, the three
    answers, and what was wrong with the previous answer, if one was not understood."""
    head = f"{error}\n" if error else ""
    return f"{head}{ask_question(report)}\n{ASK_ANSWERS}"


def read_answer(value: object) -> tuple[Choice, str | None] | None:
    """A person's answer as (choice, note); ``None`` when it is none of the three.

    Takes ``"allow_once"``, ``"stop"``, ``"continue: <note>"`` (the note after a colon,
    a newline or a space), the words :func:`~loopwarden.stopping.parse_choice` knows,
    and ``{"choice": ..., "note": ...}`` mappings.
    """
    note: object = None
    given = value
    if isinstance(value, Mapping):
        given, note = value.get("choice"), value.get("note")
    if not isinstance(given, str):
        return None
    text = given.strip()
    choice = parse_choice(text)
    if choice is None:
        for separator in (":", "\n", " "):
            head, found, rest = text.partition(separator)
            if found:
                choice = parse_choice(head)
                if choice is not None:
                    note = rest if note is None else note
                    break
    if choice is None:
        return None
    clean = note.strip()[:MAX_NOTE_CHARS] if isinstance(note, str) else ""
    return choice, (clean or None)


def with_summary(text: str, report: StopReport) -> str:
    """A last answer's text with the stop's summary as its last paragraph."""
    body = text.rstrip()
    return f"{body}\n\n{report.summary()}" if body else report.summary()
