"""The replay engine: :class:`Replayer` feeds trace runs through the real runtime guard.

See :mod:`loopwarden.traces.replay` for how replay proceeds past a decision.
Memory stays bounded: a finished run keeps only its :class:`RunReport` (at
most ``max_events`` detailed events, and a timeline of at most
``timeline_limit`` calls when timelines are on), and the caller gets it through
``on_run`` as soon as the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._canonical import digest
from ..config import Config
from ..errors import LoopAbort
from ..events import LoopEvent
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, hash_outcome, is_known_poll
from ..stores.memory import LocalStore
from ._results import (
    ABORTED,
    AFTER_STOP,
    BLOCKED,
    ERROR,
    REPEAT,
    STOPPED,
    WARNED,
    ReplayEvent,
    RunReport,
)
from ._runbook import MAX_PENDING, RunBook, RunStart, remember
from ._sink import Loc

__all__ = ["MAX_PENDING", "ReplayStore", "Replayer"]

_ACTION_FLAG = {"warn": WARNED, "block": BLOCKED, "stop": STOPPED | BLOCKED, "abort": ABORTED}

MAX_COMPACTION_MARKS = 100


# The replay store moved to loopwarden.stores; the old name stays for one release.
ReplayStore = LocalStore


class _Run:
    __slots__ = ("guard", "last_outcome", "pending", "report", "stopped")

    def __init__(self, guard: RunGuard, report: RunReport) -> None:
        self.guard = guard
        self.report = report
        # call id -> (call index, tool, args hash, params) for raw calls; the index for hashed ones
        self.pending: dict[str, Any] = {}
        self.stopped = False
        # args hash -> last outcome hash, for the timeline's "repeated outcome" marks
        self.last_outcome: dict[str, str] = {}


class Replayer(RunBook[_Run]):
    """Feeds trace runs through a :class:`LoopGuard` and reports each run when it ends.

    Each call and outcome is hashed once, exactly as ``before_call`` /
    ``after_call`` hash them, and fed to ``before_call_hashed`` /
    ``after_call_hashed``; the HTML timeline reuses those hashes.

    Args:
        config: the loaded config (see :func:`~loopwarden.config.load_config`).
        agent_id: force this agent's block for every run; otherwise a run uses
            the agent id its trace names (or the global block).
        on_run: receives each :class:`RunReport` as its run ends.
        on_problem: receives ``(where, reason)`` for each skipped record.
        timeline: keep a per-call timeline in each report (for the HTML page).
        max_events: detailed events kept per run (the rest are only counted).
        timeline_limit: calls kept in a run's timeline.
    """

    def __init__(
        self,
        config: Config,
        *,
        agent_id: str | None = None,
        on_run: Callable[[RunReport], None],
        on_problem: Callable[[str, str], None],
        timeline: bool = False,
        max_events: int = 200,
        timeline_limit: int = 2000,
    ) -> None:
        super().__init__(on_problem)
        # A private store and no run record: replay never writes into the live ones.
        self.guard = LoopGuard(
            config,
            agent_id=agent_id,
            store=LocalStore(),
            run_record=False,
            on_event=self._on_event,
            telemetry=False,  # recorded decisions are not live ones
        )
        self._profiles = self.guard.profiles
        self._agent_forced = agent_id is not None
        self._on_run = on_run
        self._timeline = timeline
        self._max_events = max_events
        self._timeline_limit = timeline_limit
        # The run and call being fed to the guard, for attributing its events.
        self._cur: RunReport | None = None
        self._cur_call = 0
        self._cur_line: Loc = None
        self._in_outcome = False  # the guard is fed an outcome (the call has run)
        self._poll_tools: dict[str, bool] = {}
        self._poll_raw: dict[str, bool] = {}  # tool -> a known poll (not for `process`)

    def _on_event(self, event: LoopEvent) -> None:
        report = self._cur
        if report is None:  # not from a replayed call; nothing to attribute it to
            return
        call = self._cur_call
        action = event.action
        counts = report.counts
        counts[action] = counts.get(action, 0) + 1
        if report.first_intervention_call is None:
            report.first_intervention_call = call
        if action == "warn":
            if report.first_warning_call is None:
                report.first_warning_call = call
        elif action == "block" and report.first_block_call is None:
            report.first_block_call = call
        replayed = ReplayEvent(event, call, self._cur_line)
        if action in ("stop", "abort") and report.stop is None:
            report.stop = replayed
            report.stop_ran = self._in_outcome
        if len(report.events) < self._max_events:
            report.events.append(replayed)
        else:
            report.events_omitted += 1
        timeline = report.timeline
        if timeline is not None and 0 < call <= len(timeline):
            timeline[call - 1] |= _ACTION_FLAG.get(action, 0)

    # -- runs ----------------------------------------------------------------------
    def _open(self, run_id: str, start: RunStart) -> _Run:
        agent = start.agent
        guard = self.guard.run(
            run_id,
            session_id=start.session,
            agent_id=None if self._agent_forced else agent,
            tools=start.tools,
        )
        report = RunReport(
            start.key,
            start.label,
            self._source,
            self._format,
            start.line,
            start.session,
            self.guard.agent_id if self._agent_forced else agent,
            start.title,
            self._timeline,
        )
        return _Run(guard, report)

    def _close(self, key: str, run: _Run) -> None:
        run.guard.end()
        self._on_run(run.report)

    def live_event(self, key: str) -> None:
        run = self._runs.get(key)
        if run is not None:
            run.report.live_events += 1

    def compaction(self, key: str, line: Loc) -> None:
        run = self._run(key, line)
        self._cur = None  # on_compaction emits no events; nothing to attribute
        report = run.report
        report.compactions += 1
        if len(report.compaction_marks) < MAX_COMPACTION_MARKS:
            report.compaction_marks.append(report.calls)
        if not run.stopped:
            run.guard.on_compaction()

    # -- calls and outcomes ----------------------------------------------------------
    def _timeline_cell(self, run: _Run, index: int, tool: str) -> None:
        report = run.report
        timeline = report.timeline
        if timeline is None or index > self._timeline_limit:
            return
        ids = report.timeline_tools
        tool_id = ids.get(tool)
        if tool_id is None:
            tool_id = ids[tool] = len(ids)
        timeline.append((tool_id << 8) | (AFTER_STOP if run.stopped else 0))

    def call(self, key: str, call_id: str | None, tool: str, params: Any, line: Loc) -> None:
        """A call with raw params, hashed here once (what ``before_call`` would hash).
        The replay hot path: the helpers it uses are written out inline."""
        run = self._last_run if key is self._last_key else None
        if run is None:
            run = self._run(key, line)
        report = run.report
        index = report.calls = report.calls + 1
        tools = report.tools
        tools[tool] = tools.get(tool, 0) + 1
        if report.timeline is not None:
            self._timeline_cell(run, index, tool)
        if run.stopped:
            return
        if call_id is None:
            call_id = f"#{index}"
        # call_signature, inline
        name = tool.strip() if type(tool) is str else str(tool).strip()
        sig = f"{name}:{digest(params)}"
        # Whether a tool is a known poll depends on its params only for `process`.
        poll = self._poll_raw.get(name)
        if poll is None:
            poll = is_known_poll(name, params, self._profiles)
            if name != "process" and len(self._poll_raw) < 1024:
                self._poll_raw[name] = poll
        pending = run.pending  # remember(), inline
        pending[call_id] = (index, name, sig, params)
        if len(pending) > MAX_PENDING:
            del pending[next(iter(pending))]
        self._cur = report
        self._cur_call = index
        self._cur_line = line
        try:
            run.guard.before_call_hashed(name, sig, call_id=call_id, poll=poll)
        except LoopAbort:
            run.stopped = True

    def call_hashed(
        self,
        key: str,
        call_id: str | None,
        tool: str,
        args_hash: str,
        line: Loc,
        params: Any = None,
        poll: bool | None = None,
    ) -> None:
        """A call known by its args hash (``before_call_hashed``). The replay hot path."""
        run = self._last_run if key is self._last_key else None
        if run is None:
            run = self._run(key, line)
        report = run.report
        index = report.calls = report.calls + 1
        tools = report.tools
        tools[tool] = tools.get(tool, 0) + 1
        if report.timeline is not None:
            self._timeline_cell(run, index, tool)
        if run.stopped:
            return
        if call_id is None:
            call_id = f"#{index}"
        remember(run.pending, call_id, index)  # hashed outcomes carry tool and hash themselves
        if poll is None and params is None:  # not recorded by the live guard
            # Without params only tool-level poll markers are known (process needs its action).
            poll = self._poll_tools.get(tool)
            if poll is None:
                poll = self._poll_tools[tool] = is_known_poll(tool, None, self._profiles)
        elif poll is None:
            poll = is_known_poll(tool, params, self._profiles)
        self._cur = report
        self._cur_call = index
        self._cur_line = line
        try:
            run.guard.before_call_hashed(tool, args_hash, call_id=call_id, poll=poll)
        except LoopAbort:
            run.stopped = True

    def outcome(
        self,
        key: str,
        call_id: str | None,
        line: Loc,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> None:
        """A call's result or error, hashed once (what ``after_call`` would hash)."""
        # _take_pending, inline (every outcome passes here)
        run = self._last_run if key is self._last_key else self._runs.get(key)
        if run is None or run.stopped:
            return
        entry = run.pending.pop(call_id, None) if call_id is not None else None
        if entry is None:  # a result whose call the trace never showed
            return
        index, tool, sig, params = entry
        self._cur = run.report
        self._cur_call = index
        self._cur_line = line
        out = hash_outcome(tool, params, result=result, error=error, profiles=self._profiles)
        self._in_outcome = True
        try:
            run.guard.after_call_hashed(
                tool,
                sig,
                out.hash,
                call_id=call_id,
                unknown_tool_name=out.unknown_tool_name,
                is_error=out.is_error,
                params=params,
                result=result,
                error=error,
            )
        except LoopAbort:
            run.stopped = True
        finally:
            self._in_outcome = False
        timeline = run.report.timeline
        if timeline is not None and index <= len(timeline):
            self._mark_outcome(run, timeline, index, sig, out.hash, out.is_error)

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
        """An outcome known by its hash (``after_call_hashed``)."""
        found = self._take_pending(key, call_id, line)
        if found is None:
            return
        run, index = found
        self._in_outcome = True
        try:
            run.guard.after_call_hashed(
                tool,
                args_hash,
                outcome_hash,
                call_id=call_id,
                unknown_tool_name=unknown_tool,
                is_error=is_error,
            )
        except LoopAbort:
            run.stopped = True
        finally:
            self._in_outcome = False
        timeline = run.report.timeline
        if timeline is not None and index <= len(timeline):
            self._mark_outcome(run, timeline, index, args_hash, outcome_hash, is_error)

    def _take_pending(self, key: str, call_id: str | None, line: Loc) -> tuple[_Run, Any] | None:
        """The run and pending entry an outcome belongs to; its call becomes the current one."""
        run = self._last_run if key is self._last_key else self._runs.get(key)
        if run is None or run.stopped:
            return None
        entry = run.pending.pop(call_id, None) if call_id is not None else None
        if entry is None:  # a result whose call the trace never showed
            return None
        self._cur = run.report
        self._cur_call = entry if entry.__class__ is int else entry[0]
        self._cur_line = line
        return run, entry

    @staticmethod
    def _mark_outcome(
        run: _Run, timeline: list[int], index: int, sig: str, outcome: str | None, error: bool
    ) -> None:
        if error:
            timeline[index - 1] |= ERROR
        if outcome is None:
            return
        last = run.last_outcome
        if last.get(sig) == outcome:
            timeline[index - 1] |= REPEAT
        last[sig] = outcome
