"""The rules in force under a config, their numbers and where each comes from, and which
rule acts first on each loop pattern.

``config check``, the replay header (text and HTML) and ``tune`` all describe a config
with this module, so they cannot disagree. The thresholds are the rules' own
(:meth:`~loopwarden.engine.detectors.Detector.thresholds`); what acts first is not
derived from them but measured: :func:`first_actions` runs the real
:class:`~loopwarden.guard.LoopGuard` under the config on a synthetic call sequence of
each pattern and reports the call at which it warned, blocked and stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "PATTERNS",
    "Pattern",
    "PatternResult",
    "RuleView",
    "Source",
    "ThresholdView",
    "first_actions",
    "own_settings",
    "rules_changed",
    "rules_in_force",
    "rules_line",
    "run_pattern",
]

_BLOCK = "tools.loopDetection."
_OWN = "loopwarden."

Step = tuple[str, dict[str, Any], Any, BaseException | None]
"""One synthetic call: tool, params, result, error (an error means the call failed)."""


@dataclass(frozen=True)
class Source:
    """Where one value of a config comes from."""

    key: str
    """Dotted config key (``tools.loopDetection.warningThreshold``)."""
    value: Any
    source: str
    """``default``, ``global``, ``agent``, ``override``, ``repair``, ``loopwarden`` (the file's
    ``loopwarden`` block) or ``derived`` (computed from other keys)."""
    line: int | None = None
    detail: str | None = None

    def where(self, file: str | None) -> str:
        """The source in words: ``default``, ``cfg.json5:4``, ``repair (...)``."""
        if self.line is not None and file is not None:
            return f"{self.source} {file}:{self.line}"
        if self.detail:
            return f"{self.source} ({self.detail})"
        return self.source

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "source": self.source,
            "line": self.line,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ThresholdView:
    action: str
    at: int
    unit: str
    sources: tuple[Source, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "at": self.at,
            "unit": self.unit,
            "sources": [s.to_dict() for s in self.sources],
        }


@dataclass(frozen=True)
class RuleView:
    """One registered rule under a config."""

    name: str
    family: str
    order: int
    summary: str
    on: bool
    thresholds: tuple[ThresholdView, ...] = ()
    switch: Source | None = None
    """Its ``enabled`` key, for loopwarden's own rules."""

    def numbers(self) -> str:
        """``warn 5 · block 6 · stop 8``."""
        return " · ".join(f"{t.action} {t.at}" for t in self.thresholds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "order": self.order,
            "summary": self.summary,
            "on": self.on,
            "thresholds": [t.to_dict() for t in self.thresholds],
            "switch": None if self.switch is None else self.switch.to_dict(),
        }


class _Sources:
    """Looks up the value and origin of a dotted key of one agent's effective config."""

    def __init__(self, config: Config, agent: str | None) -> None:
        self.config = config
        self.fields = {f.key: f for f in config.explain(agent)}
        raw = config.raw.get("loopwarden")
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def __call__(self, key: str) -> Source:
        if key.startswith(_BLOCK):
            f = self.fields.get(key[len(_BLOCK) :])
            if f is not None:
                return Source(key, f.value, f.source, f.line, f.detail)
        elif key.startswith(_OWN):
            return self._own(key[len(_OWN) :].split("."))
        return Source(key, None, "default")

    def _own(self, parts: list[str]) -> Source:
        from ..config.model import RULE_SETTINGS

        key = _OWN + ".".join(parts)
        settings = self.config.settings
        given: Any = self.raw
        path: tuple[str, ...] = ("loopwarden",)
        for part in parts:
            if isinstance(given, bool) and part == "enabled":
                break  # the section given as true/false: that is its switch
            given = given.get(part) if isinstance(given, Mapping) else None
            path += (part,)
        section = RULE_SETTINGS.get(parts[0]) if len(parts) == 2 else None
        if section is not None:
            value = settings.rules.get(section).to_dict().get(parts[1])
        elif parts == ["waitSeconds"]:
            value = settings.rules.wait_seconds
        elif parts == ["volatileCounters"]:
            value = settings.volatile_counters
        else:
            value = given
        if given is None:
            return Source(key, value, "default")
        return Source(key, value, "loopwarden", self.config.line_of(path))


def rules_in_force(config: Config, agent: str | None = None) -> list[RuleView]:
    """Every registered rule under the agent's effective config (as the guard runs it), in
    precedence order; rules the config switches off are listed with ``on=False``."""
    from ..engine.detectors import plan_for, rules
    from ..guard import LoopGuard

    guard = LoopGuard(config, store="memory://", run_record=False, telemetry=False)
    cfg = guard.config_for(agent)
    guard.close()
    plan = plan_for(cfg)
    lookup = _Sources(config, agent)
    out = []
    for cls in rules():
        det = plan.find(cls.name)
        switch = None
        if cls.settings is not None and cls.family == "loopwarden":
            switch = lookup(f"{_OWN}{cls.settings.KEY}.enabled")
        views: tuple[ThresholdView, ...] = ()
        if det is not None:
            views = tuple(
                ThresholdView(t.action, t.at, t.unit, tuple(_key_sources(lookup, t.key, cfg)))
                for t in det.thresholds()
            )
        out.append(
            RuleView(cls.name, cls.family, cls.order, cls.summary, det is not None, views, switch)
        )
    return out


def _key_sources(lookup: _Sources, keys: str, cfg: Any) -> Iterator[Source]:
    for key in keys.split(", "):
        found = lookup(key)
        if key == f"{_OWN}blocksInARow.stopAfter" and found.value is None:
            # Unset: the rule derives it from OpenClaw's thresholds.
            derived = cfg.global_circuit_breaker_threshold - cfg.critical_threshold
            found = Source(
                key,
                derived,
                "derived",
                detail="globalCircuitBreakerThreshold - criticalThreshold",
            )
        yield found


def own_settings(config: Config) -> list[Source]:
    """The ``loopwarden`` block's settings that shape the rules but are no threshold."""
    lookup = _Sources(config, None)
    return [lookup(f"{_OWN}waitSeconds"), lookup(f"{_OWN}volatileCounters")]


# -- what acts first ------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A loop pattern and the synthetic calls that show it."""

    key: str
    title: str
    sequence: str
    """The calls, in words."""
    calls: Callable[[], Iterator[Step]]
    tools: tuple[str, ...] | None = None
    """The run's registered tools (``None``: not known)."""
    compact_first: bool = False
    """The context is compacted before the first call (the calls are the retries)."""


def _identical() -> Iterator[Step]:
    while True:
        yield ("read_file", {"path": "a.txt"}, "the same text", None)


def _ping_pong() -> Iterator[Step]:
    for i in itertools.count():
        if i % 2 == 0:
            yield ("list_dir", {"path": "."}, "a.txt b.txt", None)
        else:
            yield ("read_file", {"path": "a.txt"}, "the same text", None)


def _poll() -> Iterator[Step]:
    while True:
        yield ("process", {"action": "poll", "sessionId": "s1"}, "still running", None)


def _failures() -> Iterator[Step]:
    for i in itertools.count(1):
        yield ("run_tests", {"target": f"test_{i}"}, None, RuntimeError("exit code 1"))


def _unknown() -> Iterator[Step]:
    for i in itertools.count(1):
        error = LookupError("Unknown tool: web_search")
        yield ("web_search", {"query": f"question {i}"}, None, error)


PATTERNS: tuple[Pattern, ...] = (
    Pattern("identical", "identical loop", 'read_file("a.txt") again and again, same result',
            _identical),
    Pattern("ping_pong", "ping-pong", "list_dir and read_file alternating, results unchanged",
            _ping_pong),
    Pattern("poll", "known poll", 'process(action="poll") answering "still running"', _poll),
    Pattern("failure_streak", "failure streak",
            "run_tests failing on every call, new arguments each time", _failures),
    Pattern("unknown_tool", "unknown tool",
            "web_search, not a registered tool, new arguments each time", _unknown,
            tools=("read_file",)),
    Pattern("post_compaction", "post-compaction",
            "after a context compaction, the same read_file call and result again", _identical,
            compact_first=True),
)  # fmt: skip


@dataclass(frozen=True)
class Act:
    """The first warning, block or stop of a pattern's run."""

    call: int
    """1-based call number in the run."""
    rule: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"call": self.call, "rule": self.rule, "count": self.count}


@dataclass(frozen=True)
class PatternResult:
    pattern: Pattern
    calls: int
    """Calls made before the run ended or the limit was reached."""
    first: dict[str, Act] = field(default_factory=dict)
    """``warn``, ``block``, ``stop``: the first of each (absent: it never happened)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern.key,
            "title": self.pattern.title,
            "sequence": self.pattern.sequence,
            "calls": self.calls,
            "first": {action: act.to_dict() for action, act in self.first.items()},
        }

    def text(self) -> str:
        parts = [
            f"{action} at call {act.call} ({act.rule})"
            for action in ("warn", "block", "stop")
            if (act := self.first.get(action)) is not None
        ]
        return " · ".join(parts) if parts else f"nothing within {self.calls} calls"


def run_pattern(config: Config, pattern: Pattern, agent: str | None, limit: int) -> PatternResult:
    """Run the guard under ``config`` on ``pattern``'s calls, as an integration drives it:
    blocked calls are not run, failed calls report their error, a stop ends the run."""
    from ..errors import LoopAbort
    from ..guard import LoopGuard

    guard = LoopGuard(config, agent_id=agent, store="memory://", run_record=False, telemetry=False)
    run = guard.run("config-check", tools=pattern.tools)
    first: dict[str, Act] = {}
    made = 0
    try:
        if pattern.compact_first:
            run.on_compaction()
        for number, (tool, params, result, error) in enumerate(
            itertools.islice(pattern.calls(), limit), 1
        ):
            made = number
            call_id = f"call-{number}"
            decision = run.before_call(tool, params, call_id)
            det = decision.detection
            if decision.action != "allow" and det is not None:
                first.setdefault(decision.action, Act(number, det.detector, det.count))
            if decision.blocked:
                continue
            if error is not None:
                run.after_call(tool, params, call_id, error=error)
            else:
                run.after_call(tool, params, call_id, result=result)
    except LoopAbort as stop:
        first.setdefault("stop", Act(made, stop.code, stop.count))
    finally:
        guard.close()
    return PatternResult(pattern, made, first)


def first_actions(config: Config, agent: str | None = None) -> list[PatternResult]:
    """Per pattern, the guard's first warning, block and stop under ``config``."""
    views = rules_in_force(config, agent)
    # Far enough past every threshold that a rule which acts, acts within it.
    highest = max((t.at for r in views for t in r.thresholds), default=0)
    limit = min(2 * highest + 10, 5000)
    return [run_pattern(config, pattern, agent, limit) for pattern in PATTERNS]


def rules_line(views: list[RuleView]) -> str:
    """The rules in force on one line: ``consecutive_repeat warn 5 · block 6 · stop 8; ...``."""
    return "; ".join(f"{r.name} {r.numbers()}" for r in views if r.on and r.thresholds)


def rules_changed(base: list[RuleView], views: list[RuleView]) -> str:
    """The rules whose numbers (or on/off) differ from ``base``: ``cycle off; ...``."""
    before = {r.name: r for r in base}
    parts = []
    for rule in views:
        old = before.get(rule.name)
        if old is not None and old.on == rule.on and old.numbers() == rule.numbers():
            continue
        parts.append(f"{rule.name} {rule.numbers()}" if rule.on else f"{rule.name} off")
    return "; ".join(parts)
