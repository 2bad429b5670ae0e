"""A plain scripted agent loop driven through the runtime guard, as an integration would.

The "model" is a script of turns; each turn is a list of tool calls. Tools are
real Python functions. The loop shows the model exactly what an integration
would: the tool result with loopwarden's note appended, or the block message
instead of running the tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import loopwarden as lw

Call = tuple[str, dict[str, Any], str]  # (tool, params, call id)


@dataclass
class Seen:
    """What the model got back for one call."""

    call_id: str
    tool: str
    text: str
    blocked: bool
    warned: bool


@dataclass
class ScriptedAgent:
    run: lw.RunGuard
    tools: dict[str, Callable[..., Any]]
    seen: list[Seen] = field(default_factory=list)
    executed: int = 0

    def _execute(self, tool: str, params: dict[str, Any]) -> tuple[Any, BaseException | None]:
        fn = self.tools.get(tool)
        if fn is None:
            return None, LookupError(f"Unknown tool: {tool}")
        self.executed += 1
        try:
            return fn(**params), None
        except Exception as exc:  # the tool failed; the model sees the error
            return None, exc

    def turn(self, calls: Iterable[Call], *, reverse_outcomes: bool = False) -> list[Seen]:
        """One model turn; outcomes may be reported in reverse (parallel calls)."""
        decided = [
            (call, self.run.before_call(call[0], call[1], call_id=call[2])) for call in calls
        ]
        finished = []
        for (tool, params, call_id), decision in decided:
            if decision.blocked:
                finished.append(Seen(call_id, tool, decision.message or "", True, False))
                continue
            result, error = self._execute(tool, params)
            finished.append((tool, params, call_id, result, error))  # type: ignore[arg-type]
        out: list[Seen] = []
        order = list(reversed(finished)) if reverse_outcomes else finished
        for item in order:
            if isinstance(item, Seen):
                out.append(item)
                continue
            tool, params, call_id, result, error = item
            if error is not None:
                note = self.run.after_call(tool, params, call_id=call_id, error=error)
                text = f"Error: {error}"
            else:
                note = self.run.after_call(tool, params, call_id=call_id, result=result)
                text = str(result)
            out.append(
                Seen(call_id, tool, f"{text}\n\n{note}" if note else text, False, bool(note))
            )
        self.seen.extend(out)
        return out

    async def aturn(self, calls: Iterable[Call]) -> list[Seen]:
        out = []
        for tool, params, call_id in calls:
            decision = await self.run.abefore_call(tool, params, call_id=call_id)
            if decision.blocked:
                out.append(Seen(call_id, tool, decision.message or "", True, False))
                continue
            result, error = self._execute(tool, params)
            await asyncio.sleep(0)
            if error is not None:
                note = await self.run.aafter_call(tool, params, call_id=call_id, error=error)
            else:
                note = await self.run.aafter_call(tool, params, call_id=call_id, result=result)
            text = str(result) if error is None else f"Error: {error}"
            out.append(
                Seen(call_id, tool, f"{text}\n\n{note}" if note else text, False, bool(note))
            )
        self.seen.extend(out)
        return out
