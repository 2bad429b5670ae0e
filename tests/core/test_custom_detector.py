"""A rule of one's own: declared, registered, configured, stored and removed like the built-ins.

The recipe in docs/architecture.md ("Adding a rule") is this file's ``ToolBudget``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

import loopwarden as lw
from loopwarden.config.model import RuleSettings, setting
from loopwarden.engine.detectors import (
    Call,
    Detection,
    Detector,
    Observed,
    Threshold,
    Trigger,
    Verdict,
    registered,
    rules,
)
from loopwarden.stores import MemoryStore
from loopwarden.stores.sqlite import SQLiteStore


@dataclass(frozen=True)
class ToolBudgetSettings(RuleSettings):
    """``loopwarden.toolBudget``: calls of one tool a run may make, whatever the args."""

    KEY: ClassVar[str] = "toolBudget"
    limit: int = setting(3, "limit")


class ToolBudget(Detector):
    """Blocks a tool's calls past its budget; the budget's last call gets a warning."""

    name = "tool_budget"
    family = "loopwarden"
    order = 95  # after the built-in rules: they name a loop better when they see one
    triggers = Trigger.ANY
    settings = ToolBudgetSettings
    stateful = True
    summary = "one tool called more often than its budget allows"

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.limit = cfg.rules.get(ToolBudgetSettings).limit
        self.used: dict[str, int] = {}

    @classmethod
    def build(cls, cfg: Any) -> ToolBudget | None:
        if cfg.enabled is not True or cfg.rules is None:
            return None
        return cls(cfg) if cfg.rules.get(ToolBudgetSettings).enabled else None

    def fresh(self) -> ToolBudget:
        return ToolBudget(self.cfg)

    def check(self, st: Any, call: Call) -> Detection | None:
        used = self.used.get(call.tool, 0) + 1
        if used < self.limit:
            return None
        over = used > self.limit
        verb = "is over" if over else "reaches"
        return Detection(
            level="critical" if over else "warning",
            detector=self.name,
            count=used,
            message=f"{call.tool} {verb} its budget of {self.limit} calls",
            warning_key=f"budget:{call.tool}",
            tool_name=call.tool,
        )

    def observe(self, st: Any, ev: Observed) -> Verdict | None:
        if not ev.veto:  # a blocked call used nothing
            self.used[ev.tool] = self.used.get(ev.tool, 0) + 1
        return None

    def thresholds(self) -> list[Threshold]:
        key = "loopwarden.toolBudget.limit"
        return [
            Threshold("warn", self.limit, "calls of one tool", key),
            Threshold("block", self.limit + 1, "calls of one tool", key),
        ]

    def dump(self) -> Any:
        return self.used

    def load(self, raw: Any) -> None:
        self.used = {str(k): int(v) for k, v in raw.items()}


CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {"toolBudget": {"limit": 3}},
}


def _searches(run: Any, start: int, count: int) -> list[str]:
    """``count`` calls of ``search``, each with new args (no built-in rule sees a loop)."""
    actions = []
    for n in range(start, start + count):
        params = {"q": f"query {n}"}
        decision = run.before_call("search", params, call_id=f"c{n}")
        actions.append(decision.action)
        if not decision.blocked:
            run.after_call("search", params, call_id=f"c{n}", result=f"hit {n}")
    return actions


def test_a_registered_rule_runs_in_precedence_order() -> None:
    with registered(ToolBudget):
        assert [r.name for r in rules()][-2:] == ["tool_budget", "compaction_loop_persisted"]
        run = lw.LoopGuard(CONFIG).run("r")
        assert _searches(run, 1, 5) == ["allow", "allow", "warn", "block", "block"]
        decision = run.before_call("search", {"q": "again"}, call_id="c6")
        assert decision.detection is not None
        assert decision.detection.detector == "tool_budget"
        assert decision.detection.message == "search is over its budget of 3 calls"
    assert "tool_budget" not in [r.name for r in rules()]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_its_state_is_stored_with_the_run(tmp_path: Path, kind: str) -> None:
    """The rule's dump goes into the run's stored state and comes back for the next call,
    also in another guard object (another process, with SQLite)."""
    with registered(ToolBudget):
        if kind == "memory":
            store: Any = MemoryStore()
            stores = [store, store]
        else:
            stores = [SQLiteStore(tmp_path / "state.db"), SQLiteStore(tmp_path / "state.db")]
        try:
            first, second = (lw.LoopGuard(CONFIG, store=s) for s in stores)
            assert _searches(first.run("r"), 1, 2) == ["allow", "allow"]
            # The other guard sees the two calls already used.
            assert _searches(second.run("r"), 3, 2) == ["warn", "block"]
        finally:
            for s in stores:
                s.close()


def test_its_settings_are_validated_from_the_declaration() -> None:
    with registered(ToolBudget):
        with pytest.raises(lw.ConfigError) as bad:
            lw.LoopGuard({**CONFIG, "loopwarden": {"toolBudget": {"limit": 0}}})
        assert "loopwarden.toolBudget.limit" in str(bad.value)
        off = {**CONFIG, "loopwarden": {"toolBudget": {"enabled": False}}}
        assert _searches(lw.LoopGuard(off).run("r"), 1, 5) == ["allow"] * 5
    # Once removed, its section is an unknown key again.
    with pytest.raises(lw.ConfigError) as unknown:
        lw.LoopGuard(CONFIG)
    assert "toolBudget" in str(unknown.value)
