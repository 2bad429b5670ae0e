"""The contract every rule implements, and the plan that runs the rules of one config.

A rule is a :class:`Detector` subclass. It declares:

* ``name``: what it is called in events, run records, reports and stop codes;
* ``family``: ``openclaw`` (the rules of OpenClaw's tool-loop detection) or
  ``loopwarden`` (this project's own), and ``order``: its place in the precedence
  (see :func:`loopwarden.engine.runtime.before` and docs/detection.md);
* ``settings``: the :class:`~loopwarden.config.model.RuleSettings` of its section of
  the ``loopwarden`` block, if it has one (OpenClaw's rules read
  ``tools.loopDetection``), and :meth:`Detector.thresholds`: its numbers, in words;
* ``triggers``: which calls it can fire on (:class:`Trigger`); the engine asks it only
  about those, so a rule costs nothing on a call it cannot be part of;
* what it watches, by overriding the hooks it needs: :meth:`Detector.check` before a
  call, :meth:`Detector.observe` after each finished or blocked call,
  :meth:`Detector.arbitrate` to re-decide the winning finding (precedence rules),
  :meth:`Detector.compacted` when the context was compacted;
* its state: ``stateful`` rules get a fresh copy per run (:meth:`Detector.fresh`) and
  write it with :meth:`Detector.dump` / :meth:`Detector.load`, through every store.

Its findings are :class:`Detection`\\ s whose level and ``stop`` flag are its escalation:
a warning is shown to the model, a critical finding blocks the call, ``stop`` ends the run
with the rule's name as the stop code. The texts it shows live in
:mod:`loopwarden.engine.messages`.

:func:`register` adds a rule; :func:`plan_for` builds the rules of one config once.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, Self, TypeVar

from ...config.model import RULE_SETTINGS, RuleSettings

if TYPE_CHECKING:
    from ...config import LoopDetectionConfig
    from ..compaction import LogLine
    from ..state import RunState

__all__ = [
    "Call",
    "Detection",
    "Detector",
    "Observed",
    "Plan",
    "Threshold",
    "Trigger",
    "Verdict",
    "plan_for",
    "register",
    "registered",
    "rules",
    "unregister",
]

Level = Literal["warning", "critical"]
Family = Literal["openclaw", "loopwarden"]
D = TypeVar("D", bound="Detector")


class Trigger(enum.IntFlag):
    """Facts about a call that the engine knows before it runs, each cheap to test.

    A rule declares the ones it can fire on; the engine asks its :meth:`Detector.check`
    only when one of them holds for the call. ``ANY`` asks about every call.
    """

    NONE = 0
    ANY = enum.auto()
    """Every call."""
    SEEN = enum.auto()
    """The call's signature (tool and arguments) is in the run's window."""
    PAIRED = enum.auto()
    """The call continues the alternation of the window's two newest signatures."""
    POLL = enum.auto()
    """A known poll call (``command_status``, ``process`` poll/log, a poll profile)."""
    FAILING = enum.auto()
    """The run's newest outcome was a failure of this tool."""
    MISSING = enum.auto()
    """The tool is known not to exist: the run's registered tools do not name it (or a miss
    streak is running), or the newest outcome said it is unavailable."""


# Call and Observed are slotted dataclasses, not NamedTuples: several rules read their
# fields on every call, and a slot read is specialised by the interpreter where a NamedTuple
# field read is not (measured: a few thousand instructions per guarded call).


@dataclass(slots=True)
class Call:
    """A call about to run, as the engine sees it."""

    tool: str
    sig: str
    """The args hash: ``"<tool>:" + digest(params)``."""
    poll: bool
    key: str
    """What pairs the call with its outcome: the call id, or the signature without one."""
    call_id: str | None
    unregistered: bool | None = None
    """The run's registered tools do not name the tool (``None``: they are not known)."""


@dataclass(slots=True)
class Observed:
    """A finished call (or a blocked one) as the rules observe it. The engine may refill one
    object for the outcomes of a run: a rule reads it during :meth:`Detector.observe` and
    keeps its fields, never the object."""

    tool: str
    sig: str
    outcome: str | None
    """The outcome hash compared (volatile counters masked); ``None``: no outcome."""
    is_error: bool = False
    error: str | None = None
    """The failure's masked first line, when a rule asked for it (never stored)."""
    quiet: bool = False
    """The call looked like a wait: it took long, it is a poll the run made, or its
    command sleeps, watches or waits (tested only for a call that repeats a recent one)."""
    veto: bool = False
    """The guard blocked the call; ``outcome`` repeats the pattern it was blocked for."""


@dataclass(frozen=True)
class Detection:
    """A loop pattern found before a call: what a rule decided."""

    level: Level
    """``warning``: shown to the model with the call's result; ``critical``: the call is blocked."""
    detector: str
    """The rule's name (with :attr:`stop`, the stop code)."""
    count: int
    message: str
    """For the model."""
    warning_key: str
    """Identifies the pattern: warnings are delivered once per bucket of this key."""
    paired_tool: str | None = None
    tool_name: str = ""
    latest_result_hash: str | None = None
    """The outcome the pattern keeps returning (what a block repeats as a veto)."""
    unknown_tool_name: str | None = None
    stop: bool = False
    """Block the call and end the run."""
    every: int = 1
    """Warnings are delivered when the count reaches a multiple of this (1: each time the
    count grows)."""
    log_message: str | None = None
    """:attr:`message` without quoted tool output, for events and logs (``None``: the same)."""
    tools: tuple[str, ...] = ()
    """The tools of the pattern, in call order."""

    @property
    def critical(self) -> bool:
        return self.level == "critical"

    @property
    def action(self) -> Literal["warn", "block", "stop"]:
        return "stop" if self.stop else "block" if self.level == "critical" else "warn"

    def relabel(self, **changes: Any) -> Detection:
        return replace(self, **changes)


class Verdict(NamedTuple):
    """What an observation did: ended the run, and/or a line to log."""

    stop: Detection | None = None
    log: LogLine | None = None


class Threshold(NamedTuple):
    """One number of a rule, in words: at which count it warns, blocks or stops."""

    action: Literal["warn", "block", "stop"]
    at: int
    """The count (see ``unit``) at which the action happens."""
    unit: str
    """What is counted, e.g. ``identical calls in a row``."""
    key: str
    """The config key that sets it (dotted path)."""


class Detector:
    """Base of every rule. Subclasses override only the hooks they need."""

    name: ClassVar[str]
    family: ClassVar[Family]
    order: ClassVar[int]
    """Precedence: lower acts first (see docs/detection.md)."""
    triggers: ClassVar[Trigger] = Trigger.NONE
    settings: ClassVar[type[RuleSettings] | None] = None
    stateful: ClassVar[bool] = False
    """A fresh copy per run (:meth:`fresh`), stored with :meth:`dump` / :meth:`load`."""
    feeds_failures_only: ClassVar[bool] = False
    """:meth:`observe` wants only failed outcomes and the next outcome of a failing tool."""
    wants_errors: ClassVar[bool] = False
    """:meth:`observe` reads ``is_error`` as the tool's profile sees it and ``error``."""
    wants_quiet: ClassVar[bool] = False
    """:meth:`observe` reads ``quiet``."""
    summary: ClassVar[str] = ""
    """What the rule catches, in one line."""

    def __init__(self, cfg: LoopDetectionConfig) -> None:
        self.cfg = cfg

    @classmethod
    def build(cls, cfg: LoopDetectionConfig) -> Self | None:
        """The rule under ``cfg``, or ``None`` when the config switches it off."""
        return cls(cfg)

    def fresh(self) -> Self:
        """This rule's object for a new run (the same object when it keeps no state)."""
        return self

    def check(self, st: RunState, call: Call) -> Detection | None:
        """Before a call that one of ``triggers`` holds for: a finding, or ``None``."""
        return None

    def observe(self, st: RunState, ev: Observed) -> Verdict | None:
        """After a call finished (or was blocked)."""
        return None

    def arbitrate(self, st: RunState, call: Call, det: Detection) -> Detection:
        """Re-decide the finding the other rules settled on (precedence rules)."""
        return det

    def compacted(self, st: RunState) -> LogLine | None:
        """The context was compacted and the runner retries."""
        return None

    def thresholds(self) -> list[Threshold]:
        """The rule's numbers under its config."""
        return []

    def dump(self) -> Any:
        return None

    def load(self, raw: Any) -> None:
        return None


def _overrides(cls: type[Detector], hook: str) -> bool:
    return getattr(cls, hook) is not getattr(Detector, hook)


_lock = threading.Lock()
_registry: list[type[Detector]] = []


def register(cls: type[D]) -> type[D]:
    """Add a rule (usable as a class decorator). Its settings section becomes a valid key
    of the ``loopwarden`` block; configs built afterwards run it."""
    with _lock:
        if any(c.name == cls.name for c in _registry):
            raise ValueError(f"a rule named {cls.name!r} is registered already")
        if cls.settings is not None:
            RULE_SETTINGS[cls.settings.KEY] = cls.settings
        _registry.append(cls)
        _registry.sort(key=lambda c: c.order)
        _plans.clear()
    return cls


def unregister(cls: type[Detector]) -> None:
    """Remove a rule added with :func:`register`."""
    with _lock:
        _registry.remove(cls)
        if cls.settings is not None:
            RULE_SETTINGS.pop(cls.settings.KEY, None)
        _plans.clear()


@contextmanager
def registered(cls: type[D]) -> Iterator[type[D]]:
    """``with registered(MyRule): ...``: a rule registered for the block's duration."""
    register(cls)
    try:
        yield cls
    finally:
        unregister(cls)


def rules() -> tuple[type[Detector], ...]:
    """Every registered rule, in precedence order."""
    return tuple(_registry)


class Plan:
    """The rules of one config, built once, and the index the engine runs them by."""

    __slots__ = (
        "arbiters",
        "by_facts",
        "compactors",
        "detectors",
        "errors",
        "failure_observers",
        "observers",
        "openclaw",
        "own",
        "wait_seconds",
    )

    def __init__(self, detectors: Iterable[Detector], wait_seconds: float = 10.0) -> None:
        self.detectors: tuple[Detector, ...] = tuple(detectors)
        """The prototypes, in precedence order; :meth:`fresh` copies them for a run."""
        indexed = list(enumerate(self.detectors))
        self.openclaw = tuple(d.family == "openclaw" for d in self.detectors)
        """Per rule: one of OpenClaw's (first match wins among them)."""
        self.observers = tuple(
            i for i, d in indexed if _overrides(type(d), "observe") and not d.feeds_failures_only
        )
        self.failure_observers = tuple(
            i for i, d in indexed if _overrides(type(d), "observe") and d.feeds_failures_only
        )
        self.arbiters = tuple(i for i, d in indexed if _overrides(type(d), "arbitrate"))
        self.compactors = tuple(i for i, d in indexed if _overrides(type(d), "compacted"))
        self.own = any(d.wants_quiet for d in self.detectors)
        """Some rule reads whether a call waited (loopwarden's own pattern rules do)."""
        self.errors = any(d.wants_errors for d in self.detectors)
        """Some rule reads failures as the tool's profile sees them, and their text."""
        self.wait_seconds = wait_seconds
        self.by_facts: dict[int, tuple[int, ...]] = {}

    def fresh(self) -> tuple[Detector, ...]:
        return tuple(d.fresh() for d in self.detectors)

    def checkers(self, facts: int) -> tuple[int, ...]:
        """The rules to ask about a call for which the ``facts`` hold, in precedence order
        (the engine reads ``by_facts`` first: a dict lookup, no call)."""
        found = self.by_facts.get(facts)
        if found is None:
            found = self.by_facts[facts] = tuple(
                i
                for i, d in enumerate(self.detectors)
                if d.triggers & facts and _overrides(type(d), "check")
            )
        return found

    def find(self, name: str) -> Detector | None:
        for det in self.detectors:
            if det.name == name:
                return det
        return None


_plans: dict[int, tuple[LoopDetectionConfig, Plan]] = {}
_MAX_PLANS = 256


def plan_for(cfg: LoopDetectionConfig) -> Plan:
    """The rules of ``cfg`` (built once per config object)."""
    entry = _plans.get(id(cfg))
    if entry is not None and entry[0] is cfg:
        return entry[1]
    built = (cls.build(cfg) for cls in _registry)
    wait = cfg.rules.wait_seconds if cfg.rules is not None else 10.0
    plan = Plan((d for d in built if d is not None), wait)
    with _lock:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[id(cfg)] = (cfg, plan)
    return plan
