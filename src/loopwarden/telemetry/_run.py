"""The guard of one run when telemetry is on: every entry point counted and timed.

:class:`Traced` is mixed into :class:`~loopwarden.guard.RunGuard` by
``loopwarden.guard`` (this module imports the driver for the type checker only)
rather than a branch inside it, so that a
guard without telemetry runs exactly the code it ran before. Each method first
runs the ``RunGuard`` one, which commits the store transaction and then
writes the run record and emits the events (the span events among them,
through :meth:`Telemetry.on_event`) in the caller's thread or task, where the
framework's tool span is current. Only then is the
call counted and timed here, outside any transaction, so a store that runs a
transaction twice still counts each call once.

The guard's time per call is one sample: ``before_call`` plus ``after_call``.
A blocked call is sampled at ``before_call``, since most frameworks report
nothing back for it; when one does (LangChain, Pydantic AI), that
``after_call`` adds no second sample. The ``before_call`` time waits for its
outcome in the :class:`LoopGuard`, not in the run object, because a hook
helper makes a new run object for every event of the same run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from itertools import islice
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .._logging import logger
from .._util import guard_text
from ..engine.runtime import ALLOW, Decision
from ..errors import LoopAbort
from ..hashing import MISSING

if TYPE_CHECKING:
    from ._core import Telemetry

__all__ = ["Traced"]

_MAX_OPEN = 1024  # calls whose outcome never came; the oldest half is dropped past this


if TYPE_CHECKING:
    # For the type checker only: at run time the guard is the next class in line, and this
    # module never imports it (no import circle).
    from ..guard import RunGuard as _Base
else:
    _Base = object


def _name(tool: Any) -> str:
    """The tool's name as the guard keeps it (valid UTF-8, bounded): a metric label."""
    return guard_text(tool.strip() if type(tool) is str else str(tool).strip())


class Traced(_Base):
    """Mixed into the run guard: reports each call to its guard's :class:`Telemetry`."""

    def __init__(self, guard: Any, **kwargs: Any) -> None:
        super().__init__(guard, **kwargs)
        tel: Telemetry = guard.telemetry
        self._tel = tel
        self._recorders = tel.recorders
        # tool as called -> its (tool, agent) metric labels, capped by the Telemetry
        self._labels: dict[Any, tuple[str, str]] = {}
        # (run key, call key) -> seconds spent in before_call; None: sampled already (blocked)
        self._open: dict[tuple[str, Any], float | None] = guard._open_calls

    # -- bookkeeping ---------------------------------------------------------------
    def _label(self, tool: Any) -> tuple[str, str]:
        labels = self._labels
        if len(labels) > 256:  # a model inventing names; the Telemetry caps them anyway
            labels.clear()
        found = labels[tool] = self._tel._labels(_name(tool), self.agent_id)
        return found

    def _checked(self, action: str, tool: Any, key: Any, seconds: float) -> None:
        try:
            label, agent = self._labels.get(tool) or self._label(tool)
            for recorder in self._recorders:
                recorder.call(action, label, agent, seconds)
            open_calls = self._open
            open_calls[self.key, key] = None if action == "block" else seconds
            if len(open_calls) > _MAX_OPEN:
                for stale in list(islice(open_calls, _MAX_OPEN // 2)):
                    open_calls.pop(stale, None)
        except Exception:  # e.g. a tool name that cannot be made a string
            logger.exception("loopwarden telemetry failed to record a call")

    def _done(self, tool: Any, key: Any, seconds: float) -> None:
        try:
            before = self._open.pop((self.key, key), 0.0)
            if before is not None:
                label, agent = self._labels.get(tool) or self._label(tool)
                for recorder in self._recorders:
                    recorder.outcome(label, agent, before + seconds)
        except Exception:
            logger.exception("loopwarden telemetry failed to record an outcome")

    def _timed(self, check: Callable[[], Decision], tool: Any, key: Any) -> Decision:
        start = perf_counter()
        try:
            decision = check()
        except LoopAbort:  # the run ends: counted as a call that was not run
            self._checked("block", tool, key, perf_counter() - start)
            raise
        self._checked(decision.action, tool, key, perf_counter() - start)
        return decision

    async def _atimed(
        self, check: Callable[[], Awaitable[Decision]], tool: Any, key: Any
    ) -> Decision:
        start = perf_counter()
        try:
            decision = await check()
        except LoopAbort:
            self._checked("block", tool, key, perf_counter() - start)
            raise
        self._checked(decision.action, tool, key, perf_counter() - start)
        return decision

    # -- the entry points ------------------------------------------------------------
    def before_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        if self._off:
            return ALLOW
        key = call_id if call_id is not None else (tool, id(params))
        return self._timed(
            lambda: super(Traced, self).before_call(tool, params, call_id), tool, key
        )

    async def abefore_call(self, tool: str, params: Any, call_id: str | None = None) -> Decision:
        if self._off:
            return ALLOW
        key = call_id if call_id is not None else (tool, id(params))
        return await self._atimed(
            lambda: super(Traced, self).abefore_call(tool, params, call_id), tool, key
        )

    def before_call_hashed(
        self, tool: str, args_hash: str, *, call_id: str | None = None, poll: bool = False
    ) -> Decision:
        if self._off:
            return ALLOW
        key = call_id if call_id is not None else args_hash
        return self._timed(
            lambda: super(Traced, self).before_call_hashed(
                tool, args_hash, call_id=call_id, poll=poll
            ),
            tool,
            key,
        )

    def after_call(
        self,
        tool: str,
        params: Any,
        call_id: str | None = None,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> str | None:
        if self._off:
            return None
        start = perf_counter()
        try:
            return super().after_call(tool, params, call_id, result=result, error=error)
        finally:
            key = call_id if call_id is not None else (tool, id(params))
            self._done(tool, key, perf_counter() - start)

    async def aafter_call(
        self,
        tool: str,
        params: Any,
        call_id: str | None = None,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
    ) -> str | None:
        if self._off:
            return None
        start = perf_counter()
        try:
            return await super().aafter_call(tool, params, call_id, result=result, error=error)
        finally:
            key = call_id if call_id is not None else (tool, id(params))
            self._done(tool, key, perf_counter() - start)

    def after_call_hashed(
        self, tool: str, args_hash: str, outcome_hash: str | None, **kwargs: Any
    ) -> str | None:
        if self._off:
            return None
        start = perf_counter()
        try:
            return super().after_call_hashed(tool, args_hash, outcome_hash, **kwargs)
        finally:
            call_id = kwargs.get("call_id")
            self._done(tool, call_id if call_id is not None else args_hash, perf_counter() - start)
