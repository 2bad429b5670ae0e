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
from ..hashing import MISSING, hash_outcome, is_known_poll
from ..profiles import ProfileRegistry
from ..stores.memory import LocalStore
from ..traces._runbook import RunBook, RunStart, call_signature, remember
from ..traces._sink import Loc
from ._loops import LoopTracker

__all__ = ["BLOCKED", "OK", "STOPPED", "WARNED", "GridReplayer", "RunRow"]

OK, WARNED, BLOCKED, STOPPED = 0, 1, 2, 3
"""A run's worst outcome under one config (stopped includes post-compaction aborts)."""


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
    key: str = ""
    """The reader's run key (whole-file labels of split files are made from it)."""


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
        "turn_after_stop",
        "turn_open",
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
        # The model response the latest calls came from (see TraceSink.model_turn).
        self.turn_open = False
        self.turn_tokens: int | None = None
        self.turn_prevented = [True] * n
        self.turn_after_stop = [True] * n


class GridReplayer(RunBook[_Run]):
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
        super().__init__(on_problem)
        # Private stores, no run record and no telemetry: recorded decisions are not live ones.
        self.guards = [
            LoopGuard(c, agent_id=agent_id, store=LocalStore(), run_record=False, telemetry=False)
            for c in configs
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
        self._min_loop = min_loop
        self._pending_label: Any = None

    # -- outcome labels read from the trace (tune's LabelTap) ---------------------
    def trace_label(self, value: Any) -> None:
        """The record on its way to the reader holds this outcome label."""
        self._pending_label = value

    def record_done(self) -> None:
        """The reader is done with that record: its label belongs to the run it touched."""
        if self._pending_label is not None and self._last_run is not None:
            self._last_run.label = self._pending_label
        self._pending_label = None

    # -- runs -------------------------------------------------------------------
    def _open(self, run_id: str, start: RunStart) -> _Run:
        agent_id = None if self._agent_forced else start.agent
        tools = list(start.tools) if start.tools is not None else None
        session = start.session
        guards = [
            g.run(run_id, session_id=session, agent_id=agent_id, tools=tools) for g in self.guards
        ]
        loops = LoopTracker(len(guards), self._min_loop)
        run = _Run(guards, start.label, start.line, session, loops)
        if self._pending_label is not None:
            run.label = self._pending_label
            self._pending_label = None
        return run

    def _close(self, key: str, run: _Run) -> None:
        for guard in run.guards:
            guard.end()
        self._close_turn(run)
        loops = run.loops.finish(run.calls)
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

    def compaction(self, key: str, line: Loc) -> None:
        run = self._run(key, line)
        for c, guard in enumerate(run.guards):
            if not run.stopped[c]:
                guard.on_compaction()

    # -- model turns and alarms -------------------------------------------------
    def model_turn(self, key: str, tokens: int | None) -> None:
        run = self._runs.get(key)
        if run is not None:
            self._close_turn(run)
            self._open_turn(run, tokens)

    def turn_usage(self, key: str, tokens: int | None) -> None:
        run = self._runs.get(key)
        if run is not None and run.turn_open:
            run.turn_tokens = tokens
            self._close_turn(run)

    @staticmethod
    def _open_turn(run: _Run, tokens: int | None) -> None:
        n = len(run.guards)
        run.turn_open = True
        run.turn_tokens = tokens
        run.turn_prevented = [True] * n
        run.turn_after_stop = [True] * n

    @staticmethod
    def _close_turn(run: _Run) -> None:
        """Count the finished turn: its tokens, and per config whether all its calls were
        prevented (``prevented_tokens``) or came after a stop (``saved_tokens``)."""
        if not run.turn_open:
            return
        run.turn_open = False
        tokens = run.turn_tokens
        if tokens is None:
            return
        run.tokens = (run.tokens or 0) + tokens
        for c, prevented in enumerate(run.turn_prevented):
            if prevented:
                run.prevented_tokens[c] += tokens
                if run.turn_after_stop[c]:
                    run.saved_tokens[c] += tokens

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
        raw: tuple[Any, Any, Any] | None = None,
    ) -> None:
        # raw: (params, result, error) when known, for masking and the extra detectors.
        params, result, error = raw if raw is not None else (MISSING, MISSING, MISSING)
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
                    params=params,
                    result=result,
                    error=error,
                )
            except LoopAbort:
                run.stopped[c] = True
                self._alarm(run, c, index, STOPPED)

    # -- calls and outcomes -------------------------------------------------------
    def call(self, key: str, call_id: str | None, tool: str, params: Any, line: Loc) -> None:
        run = self._run(key, line)
        index = run.calls = run.calls + 1
        name, sig = call_signature(tool, params)
        run.loops.call(index, sig)
        if not run.turn_open:
            self._open_turn(run, None)
        cid = call_id if call_id is not None else f"#{index}"
        for registry, members in self._groups:
            poll = is_known_poll(name, params, registry)
            self._before(run, members, index, name, sig, cid, poll)
        remember(run.pending, cid, (index, name, sig, params))

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
        if not run.turn_open:
            self._open_turn(run, None)
        cid = call_id if call_id is not None else f"#{index}"
        for registry, members in self._groups:
            known = poll if poll is not None else is_known_poll(tool, params, registry)
            self._before(run, members, index, tool, args_hash, cid, known)
        remember(run.pending, cid, (index, tool, args_hash, MISSING))

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
                (params, result, error),
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
