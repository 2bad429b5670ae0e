"""Checks shared by the per-CLI test files."""

from __future__ import annotations

import json
from typing import Any

from .harness import Outcome, Workspace, hook_events
from .views import classify

SMALL = {
    "enabled": True,
    "warningThreshold": 3,
    "criticalThreshold": 5,
    "globalCircuitBreakerThreshold": 7,
    "unknownToolThreshold": 3,
}
"""Low thresholds for the tests that only need *a* config: fewer calls, faster runs."""


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


def check_progressing_loop(ws: Workspace, calls: int) -> Outcome:
    """A repeated shell call whose output changes every time: all run, none blocked."""
    outcome = ws.run([ws.progress(calls)])
    assert outcome.executions == calls
    assert not {"block", "stop"} & set(kinds(outcome))
    return outcome


def check_users_hook_kept(ws: Workspace, event: str) -> None:
    """The user's own hook group is still first under ``event`` and still fires."""
    before = json.loads(ws.original)
    after = json.loads(ws.settings.read_text())
    assert after["hooks"][event][0] == before["hooks"][event][0]
    assert {k: v for k, v in after.items() if k != "hooks"} == {
        k: v for k, v in before.items() if k != "hooks"
    }
    outcome = ws.run([ws.poll(3)])
    assert outcome.executions == 3
    assert outcome.user_hook_runs == 3


def check_uninstall_restores(ws: Workspace, step: dict[str, Any]) -> None:
    """install (done), a session, then uninstall: the settings file is byte-for-byte back."""
    ws.run([step])
    ws.loopwarden("install", ws.agent, "--uninstall")
    assert ws.settings.read_bytes() == ws.original


COMPACTION = "compaction_loop_persisted"
ARMED = "post-compaction guard armed"
LOOP_THROUGH_COMPACTION = (4, 5, 7)
"""Identical calls made before the compaction: past the consecutive-repeat rule's warning
(at the 5th in a row), its first block (6th) and well into its blocks (stop at the 8th)."""


def check_ended_by_the_compaction_abort(ws: Workspace, outcome: Outcome, before: int) -> None:
    """An identical loop (``before`` calls of it before a compaction, more after) ended with
    the post-compaction abort: the first stop in the hook log and the only stop stored, and
    no more real executions after the compaction than the guard alone allows (windowSize)."""
    t = ws.thresholds()
    assert any(r["kind"] == "summary" for r in outcome.requests), "no compaction happened"
    events = outcome.hook_events()
    # The compaction came after the ``before`` calls: from the 5th on, each drew an event.
    assert outcome.hook_log.count(ARMED) == 1, outcome.hook_log
    head = hook_events(outcome.hook_log.split(ARMED)[0])
    assert len(head) == max(0, before - t.warning), (head, events)
    stops = [detector for action, detector in events if action in ("stop", "abort")]
    assert stops[:1] == [COMPACTION], events
    # The case this is about: loopwarden's own repeat rule spoke too, and was held back.
    assert any(d == "consecutive_repeat" for _, d in events), events
    assert ws.stored_stops() == [COMPACTION]
    ran_after = outcome.executions - min(before, t.critical)
    assert 0 <= ran_after <= t.window, f"{outcome.executions} executions, {before} before"
