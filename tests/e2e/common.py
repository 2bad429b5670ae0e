"""Checks shared by the per-CLI test files."""

from __future__ import annotations

import pytest

from .harness import Outcome, Workspace
from .views import classify

SMALL = {
    "enabled": True,
    "warningThreshold": 3,
    "criticalThreshold": 5,
    "globalCircuitBreakerThreshold": 7,
    "unknownToolThreshold": 3,
}
"""Low thresholds for the tests that only need *a* config: fewer calls, faster runs."""


def defect(n: int, why: str) -> pytest.MarkDecorator:
    """Expected to fail until issue 10's defect ``n`` is fixed (strict: a pass flips it)."""
    return pytest.mark.xfail(strict=True, reason=f"issue 10 defect {n}: {why}")


def kinds(outcome: Outcome) -> list[str | None]:
    """loopwarden's verdict in what the model saw after each call (None: plain result)."""
    return [None if s is None else classify(s.everything) for s in outcome.results()]


def check_warn_then_block(ws: Workspace, outcome: Outcome) -> list[str | None]:
    """The first ``breaker`` calls of an identical no-progress loop: one warning right
    after the warning threshold, blocks from the critical threshold on, blocked calls
    not run. Returns the verdicts for more checks."""
    t = ws.thresholds()
    seen = kinds(outcome)
    assert len(seen) >= t.breaker, f"the model was called {len(seen)} times"
    assert seen[: t.warning] == [None] * t.warning
    assert seen[t.first_warning - 1] == "warn"
    assert seen[t.first_warning : t.critical] == [None] * (t.critical - t.first_warning)
    assert seen[t.critical : t.breaker] == ["block"] * (t.breaker - t.critical)
    return seen
