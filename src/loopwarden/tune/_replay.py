"""Every run under every config, side by side, in one pass over the trace.

:class:`GridReplayer` is a trace sink like :class:`~loopwarden.traces.replay.Replayer`
and follows the same rules (a blocked call's recorded result is ignored and
later calls are fed as recorded; after a stop or abort the run is over and
later calls are only counted), but holds one real :class:`~loopwarden.guard.LoopGuard`
per config and hashes each call and outcome once for all of them
(``before_call_hashed`` / ``after_call_hashed`` with the very hashes
``before_call`` / ``after_call`` compute), so reading and hashing are paid
once however large the grid. Configs that differ in outcome profiles
(``loopwarden.sendTools`` / ``outcomeProfiles``) are hashed once per profile set.

Each finished run becomes a :class:`RunRow`: a few numbers per config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..errors import LoopAbort
from ..guard import LoopGuard, RunGuard
from ..hashing import MISSING, digest, hash_outcome, is_known_poll
from ..profiles import ProfileRegistry
from ..stores.memory import LocalStore
from ..traces._sink import Loc, format_loc
from ._loops import LoopTracker

__all__ = ["BLOCKED", "OK", "STOPPED", "WARNED", "GridReplayer", "RunRow"]

OK, WARNED, BLOCKED, STOPPED = 0, 1, 2, 3
"""A run's worst outcome under one config (stopped includes post-compaction aborts)."""

MAX_PENDING = 256


@dataclass
class RunRow:
    """One run under every config: what the parent aggregates (small; no trace content)."""

    run: str
    session: str | None
    source: str
    line: Loc
    calls: int
    label: str | None
    """good / bad / None, when the trace itself says (``--label-field``)."""
    tokens: int | None
    """Tokens the run's recorded turns cost; None when the trace records no usage."""
    levels: list[int]
    prevented: list[int]
    """Per config: calls that would not have run (blocked, or after a stop)."""
    prevented_tokens: list[int]
    """Per config: tokens of the turns whose calls were all prevented."""
    saved_tokens: list[int]
    """Per config: tokens of the turns that came wholly after a stop (never made)."""
    first_alarm: list[int | None]
    loops: list[tuple[int, int, list[int | None]]]
    number: int | None = None
    """Per-range conversation number (see :func:`loopwarden.fleet.replay.numbering`)."""
    key: str = ""


class _Run:
    __slots__ = (
        "calls",
        "first_alarm",
        "guards",
        "label",
        "levels",
        "line",
        "loops",
        "name",
        "pending",
        "prevented",
        "prevented_tokens",
        "saved_tokens",
        "session",
        "stopped",
        "tokens",
        "turn",
        "turn_after_stop",
        "turn_prevented",
        "turn_tokens",
    )

    def __init__(
        self, guards: list[RunGuard], name: str, line: Loc, session: str | None, loops: LoopTracker
    ) -> None:
        n = len(guards)
        self.guards = guards
        self.name = name
        self.line = line
        self.session = session
        self.loops = loops
        self.calls = 0
        self.label: str | None = None
        self.pending: dict[str, tuple[int, str, str, Any]] = {}
        self.stopped = [False] * n
        self.levels = [OK] * n
        self.prevented = [0] * n
        self.prevented_tokens = [0] * n
        self.saved_tokens = [0] * n
        self.first_alarm: list[int | None] = [None] * n
        self.tokens: int | None = None
        self.turn = -1
        self.turn_tokens: int | None = None
        self.turn_prevented = [True] * n
        self.turn_after_stop = [True] * n


class GridReplayer:
    """A trace sink that replays each run under several configs at once."""

    def __init__(
        self,
        configs: Sequence[Config],
        *,
        on_run: Callable[[RunRow], None],
        on_problem: Callable[[str, str], None],
        agent_id: str | None = None,
        min_loop: int = 10,
    ) -> None:
        self.guards = [
            LoopGuard(c, agent_id=agent_id, store=LocalStore(), telemetry=False) for c in configs
        ]
        # Configs sharing outcome profiles share hashes.
        groups: dict[int, list[int]] = {}
        registries: list[ProfileRegistry] = []
        for i, guard in enumerate(self.guards):
            for g, registry in enumerate(registries):
                if registry == guard.profiles:
                    groups[g].append(i)
                    break
            else:
                groups[len(registries)] = [i]
                registries.append(guard.profiles)
        self._groups = [(registries[g], members) for g, members in groups.items()]
        self._agent_forced = agent_id is not None
        self._on_run = on_run
        self._on_problem = on_problem
        self._min_loop = min_loop
        self._runs: dict[str, _Run] = {}
        self._serial = 0
        self._source = "<input>"
        self._last: _Run | None = None
        self._pending_label: Any = None
        self.tap: Any = None
        """The :class:`~loopwarden.tune._usage.UsageTap` feeding this replayer, if any."""

    # -- bookkeeping ---------------------------------------------------------
    def set_source(self, source: str, fmt: str) -> None:
        self._source = source

    def problem(self, loc: Loc, reason: str) -> None:
        self._on_problem(format_loc(self._source, loc), reason)

    def has_run(self, key: str) -> bool:
        return key in self._runs

    def live_event(self, key: str) -> None:
        return None

    def open_runs(self) -> int:
        return len(self._runs)

    # -- what the usage tap says ---------------------------------------------
    def turn_usage(self, turn: int, tokens: int) -> None:
        for run in self._runs.values():
            if run.turn == turn:
                run.turn_tokens = tokens

    def trace_label(self, value: Any) -> None:
        self._pending_label = value

    def record_done(self) -> None:
        if self._pending_label is not None and self._last is not None:
            self._last.label = self._pending_label
        self._pending_label = None

    # -- runs -------------------------------------------------------------------
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
        if key in self._runs:
            self.end_run(key)
        self._serial += 1
        run_id = str(self._serial)
        agent_id = None if self._agent_forced else agent
        tool_list = list(tools) if tools is not None else None
        guards = [
            g.run(run_id, session_id=session, agent_id=agent_id, tools=tool_list)
            for g in self.guards
        ]
        run = _Run(guards, label, line, session, LoopTracker(len(guards), self._min_loop))
        self._runs[key] = run
        self._last = run
        if self._pending_label is not None:
            run.label = self._pending_label
            self._pending_label = None

    def _run(self, key: str, line: Loc) -> _Run:
        run = self._runs.get(key)
        if run is None:
            self.begin_run(key, label=key.rpartition("\x1f")[2] or key, line=line)
            run = self._runs[key]
        self._last = run
        return run

    def end_run(self, key: str) -> None:
        run = self._runs.pop(key, None)
        if run is None:
            return
        for guard in run.guards:
            guard.end()
        self._close_turn(run)
        loops = run.loops.finish(run.calls)
        if run is self._last:
            self._last = None
        self._on_run(
            RunRow(
                run=run.name,
                session=run.session,
                source=self._source,
                line=run.line,
                calls=run.calls,
                label=run.label,
                tokens=run.tokens,
                levels=run.levels,
                prevented=run.prevented,
                prevented_tokens=run.prevented_tokens,
                saved_tokens=run.saved_tokens,
                first_alarm=run.first_alarm,
                loops=loops,
                key=key,
            )
        )

    def finish(self) -> None:
        for key in list(self._runs):
            self.end_run(key)

    def compaction(self, key: str, line: Loc) -> None:
        run = self._run(key, line)
        for c, guard in enumerate(run.guards):
            if not run.stopped[c]:
                guard.on_compaction()

    # -- turns and alarms -------------------------------------------------------
    def _enter_turn(self, run: _Run, call_id: str | None) -> None:
        tap = self.tap
        if tap is None:
            return
        found = tap.by_call.get(call_id) if call_id is not None and tap.by_call else None
        turn, tokens = found if found is not None else (tap.turn, tap.tokens)
        if turn != run.turn:
            self._close_turn(run)
            run.turn = turn
            run.turn_tokens = tokens
            n = len(run.guards)
            run.turn_prevented = [True] * n
            run.turn_after_stop = [True] * n

    def _close_turn(self, run: _Run) -> None:
        tokens = run.turn_tokens
        if run.turn < 0 or tokens is None:
            return
        run.tokens = (run.tokens or 0) + tokens
        for c, prevented in enumerate(run.turn_prevented):
            if prevented:
                run.prevented_tokens[c] += tokens
                if run.turn_after_stop[c]:
                    run.saved_tokens[c] += tokens
        run.turn_tokens = None

    def _alarm(self, run: _Run, c: int, index: int, level: int) -> None:
        if level > run.levels[c]:
            run.levels[c] = level
        if run.first_alarm[c] is None:
            run.first_alarm[c] = index
        run.loops.alarm(c, index)

    def _before(
        self,
        run: _Run,
        members: Iterable[int],
        index: int,
        tool: str,
        sig: str,
        call_id: str,
        poll: bool,
    ) -> None:
        for c in members:
            if run.stopped[c]:
                run.prevented[c] += 1
                continue
            run.turn_after_stop[c] = False
            try:
                decision = run.guards[c].before_call_hashed(tool, sig, call_id=call_id, poll=poll)
            except LoopAbort:
                run.stopped[c] = True
                run.prevented[c] += 1
                self._alarm(run, c, index, STOPPED)
                continue
            action = decision.action
            if action == "block":
                run.prevented[c] += 1
                self._alarm(run, c, index, BLOCKED)
            else:
                run.turn_prevented[c] = False
                if action == "warn":
                    self._alarm(run, c, index, WARNED)

    def _after(
        self,
        run: _Run,
        members: Iterable[int],
        index: int,
        tool: str,
        sig: str,
        call_id: str,
        outcome_hash: str | None,
        unknown: str | None,
        is_error: bool,
    ) -> None:
        for c in members:
            if run.stopped[c]:
                continue
            try:
                run.guards[c].after_call_hashed(
                    tool,
                    sig,
                    outcome_hash,
                    call_id=call_id,
                    unknown_tool_name=unknown,
                    is_error=is_error,
                )
            except LoopAbort:
                run.stopped[c] = True
                self._alarm(run, c, index, STOPPED)

    def _pend(self, run: _Run, call_id: str, entry: tuple[int, str, str, Any]) -> None:
        pending = run.pending
        pending[call_id] = entry
        if len(pending) > MAX_PENDING:
            del pending[next(iter(pending))]

    # -- calls and outcomes -------------------------------------------------------
    def call(self, key: str, call_id: str | None, tool: str, params: Any, line: Loc) -> None:
        run = self._run(key, line)
        index = run.calls = run.calls + 1
        tool = tool.strip() if type(tool) is str else str(tool).strip()
        sig = f"{tool}:{digest(params)}"
        run.loops.call(index, sig)
        self._enter_turn(run, call_id)
        cid = call_id if call_id is not None else f"#{index}"
        for registry, members in self._groups:
            poll = is_known_poll(tool, params, registry)
            self._before(run, members, index, tool, sig, cid, poll)
        self._pend(run, cid, (index, tool, sig, params))

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
        run = self._run(key, line)
        index = run.calls = run.calls + 1
        run.loops.call(index, args_hash)
        self._enter_turn(run, call_id)
        cid = call_id if call_id is not None else f"#{index}"
        for registry, members in self._groups:
            known = poll if poll is not None else is_known_poll(tool, params, registry)
            self._before(run, members, index, tool, args_hash, cid, known)
        self._pend(run, cid, (index, tool, args_hash, MISSING))

    def outcome(
        self,
        key: str,
        call_id: str | None,
        line: Loc,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> None:
        run = self._runs.get(key)
        if run is None or call_id is None or all(run.stopped):
            return
        entry = run.pending.pop(call_id, None)
        if entry is None:
            return
        index, tool, sig, params = entry
        for registry, members in self._groups:
            out = hash_outcome(tool, params, result=result, error=error, profiles=registry)
            self._after(
                run,
                members,
                index,
                tool,
                sig,
                call_id,
                out.hash,
                out.unknown_tool_name,
                out.is_error,
            )

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
        run = self._runs.get(key)
        if run is None or call_id is None:
            return
        entry = run.pending.pop(call_id, None)
        if entry is None:
            return
        index = entry[0]
        for _, members in self._groups:
            self._after(
                run, members, index, tool, args_hash, call_id, outcome_hash, unknown_tool, is_error
            )
