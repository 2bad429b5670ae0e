"""The guard around one ``tools/call``, shared by the proxy and the server middleware.

Also what the model reads (error results, appended notes; a stop's answers are in
:mod:`._onstop`) and the outcome views: the parts of an MCP tool result that decide
whether two outcomes are equal.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..._logging import logger
from ...errors import LoopAbort
from ...guard import LoopGuard, RunGuard
from ...stopping import ON_STOP, OnStop, choose_on_stop
from .._base import append_note, stop_report
from ._onstop import (
    ASK_KEY,
    DEFAULT_ASK_TIMEOUT_SECONDS,
    TOKEN_PREFIX,
    answer_result,
    can_ask,
    embeds_questions,
    new_token,
    note_result,
    question_form,
    question_request,
    read_reply,
    stop_error,
)
from ._runs import Question, RunTable, session_key

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

Answer = types.CallToolResult | types.InputRequiredResult
"""What the client gets instead of the call's own result (an ``InputRequiredResult``:
loopwarden's question about a stop)."""


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def with_note(result: types.CallToolResult, note: str | None) -> types.CallToolResult:
    if not note:
        return result
    content = [*result.content, types.TextContent(type="text", text=note)]
    return result.model_copy(update={"content": content})


def outcome_view(result: types.CallToolResult) -> dict[str, Any]:
    """The parts of a tool result that decide whether two outcomes are equal.

    Text blocks become ``content`` and ``structuredContent`` becomes
    ``details``, as the engine expects. Images, audio and embedded resources
    have no text, so their data goes into ``details`` too: otherwise every
    image-only result would look identical (false "no progress").
    """
    texts: list[Any] = []
    others: list[Any] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append({"type": "text", "text": block.text})
        else:
            others.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
    return _view(texts, others, result.structured_content, result.is_error)


def wire_outcome_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`outcome_view` of a result in wire form (what server middleware gets)."""
    content = result.get("content")
    texts: list[Any] = []
    others: list[Any] = []
    for block in content if isinstance(content, list) else ():
        (texts if isinstance(block, dict) and block.get("type") == "text" else others).append(block)
    return _view(texts, others, result.get("structuredContent"), result.get("isError") is True)


def _view(texts: list[Any], others: list[Any], structured: Any, is_error: bool) -> dict[str, Any]:
    if isinstance(structured, dict):
        details: dict[str, Any] = structured
    else:
        details = {} if structured is None else {"structuredContent": structured}
    if others:
        details = {**details, "mcpContent": others}
    view: dict[str, Any] = {"content": texts, "details": details}
    if is_error:
        view["isError"] = True
    return view


def args_key(arguments: Any) -> str:
    """A key for a call's arguments (to pair the rounds of an input-required call)."""
    try:
        return json.dumps(arguments, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(arguments)


class Guarding:
    """The guard around one ``tools/call``: shared by the proxy and the middleware.

    A stop is answered as ``on_stop`` says (:mod:`._onstop`); resolved per stop, since
    whether a person can be asked depends on the client of the stopped call.
    """

    def __init__(
        self,
        guard: LoopGuard,
        run_idle_seconds: float | None,
        *,
        on_stop: OnStop | None = None,
        ask_timeout: float = DEFAULT_ASK_TIMEOUT_SECONDS,
    ) -> None:
        if on_stop is not None and on_stop not in ON_STOP:
            raise ValueError(f"on_stop must be 'answer', 'raise' or 'ask', not {on_stop!r}")
        if not ask_timeout > 0:
            raise ValueError(f"ask_timeout must be positive, got {ask_timeout!r}")
        self.guard = guard
        self.runs = RunTable(guard, run_idle_seconds=run_idle_seconds)
        self.default_session = f"mcp-{uuid.uuid4().hex[:8]}"
        self.on_stop = on_stop
        self.ask_timeout = ask_timeout

    def session(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return session_key(ctx, self.default_session)

    async def before(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        arguments: Any,
        tools: frozenset[str] | None,
    ) -> tuple[RunGuard | None, str, str | None, Answer | None]:
        """Check a call; returns (run, session, call id, answer-instead-of-running).

        Raises ``MCPError`` for a stop under ``onStop: raise``.
        """
        session = self.default_session
        try:
            session = self.session(ctx)
            stopped = self.runs.stopped(session)
            if stopped is None:
                run, call_id = self.runs.enter(session, ctx.request_id, tools)
        except Exception:
            logger.exception("loopwarden: could not look up the run of an MCP call; allowing it")
            return None, session, None, None
        if stopped is not None:  # stopped, and pushed out of the table by other sessions
            return None, session, None, self._final(ctx, stopped, ran=False)
        try:
            decision = await run.abefore_call(name, arguments, call_id=call_id)
        except LoopAbort as exc:
            self.runs.stop(session, exc)
            try:
                answer = await self._stopped(ctx, run, session, name, arguments, exc)
            except BaseException:
                self.runs.leave(session, call_id)
                raise
            if answer is None:  # a person let the call run once more
                return run, session, call_id, None
            self.runs.leave(session, call_id)
            return run, session, call_id, answer
        if decision.blocked:
            self.runs.leave(session, call_id)
            return run, session, call_id, error_result(decision.message or "blocked by loopwarden")
        return run, session, call_id, None

    async def answered(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        arguments: Any,
        state: object,
        responses: object,
    ) -> tuple[RunGuard | None, str, str | None, Answer | None] | None:
        """A 2026-07-28 retry carrying a person's answer to loopwarden's question: as
        :meth:`before` (allowed once: the answer is ``None``, forward the call), or
        ``None`` when ``state`` is not an open question of this call (check it afresh)."""
        if not isinstance(state, str) or not state.startswith(TOKEN_PREFIX):
            return None
        try:
            session = self.session(ctx)
        except Exception:
            logger.exception("loopwarden: could not look up the session of an MCP call")
            return None
        question = self.runs.question(session)
        if (
            question is None
            or question.token is None
            or question.settled
            or not hmac.compare_digest(question.token.encode(), _utf8(state))
            or question.call != (name, args_key(arguments))
        ):
            return None
        reply = None
        if self.guard.clock() <= question.deadline and isinstance(responses, Mapping):
            reply = responses.get(ASK_KEY)
        run = question.run
        answer = await self._apply(run, session, question, reply)
        call_id = question.stop.call_id
        if answer is None:  # let run once more: forward it, as its first round was
            self.runs.hold(session, call_id)
        return run, session, call_id, answer

    async def after(
        self,
        ctx: ServerRequestContext[Any, Any],
        run: RunGuard | None,
        session: str,
        name: str,
        arguments: Any,
        call_id: str | None,
        **outcome: Any,
    ) -> tuple[str | None, Answer | None]:
        """Record an outcome; returns (note to append, answer replacing the result)."""
        if run is None:
            return None, None
        try:
            return await run.aafter_call(name, arguments, call_id, **outcome), None
        except LoopAbort as exc:  # only the post-compaction abort stops after a call ran
            self.runs.stop(session, exc)
            return None, self._final(ctx, exc, ran=True)
        finally:
            self.runs.leave(session, call_id)

    async def after_rpc_error(
        self,
        ctx: ServerRequestContext[Any, Any],
        run: RunGuard | None,
        session: str,
        name: str,
        arguments: Any,
        call_id: str | None,
        exc: MCPError,
    ) -> Answer:
        """Record a JSON-RPC error as the outcome: the stop answer, or the error re-raised
        with the warning appended to its message."""
        note, stop = await self.after(
            ctx, run, session, name, arguments, call_id, error=exc.message
        )
        if stop is not None:
            return stop
        raise MCPError(exc.code, append_note(exc.message, note), exc.data) from None

    # -- a stop ---------------------------------------------------------------------
    def _mode(self, ctx: ServerRequestContext[Any, Any]) -> OnStop:
        try:
            person = can_ask(ctx)
        except Exception:
            logger.exception("loopwarden: could not tell whether the MCP client can ask")
            person = False
        return choose_on_stop(self.on_stop, self.guard.config.settings.on_stop, person=person)

    def _final(
        self,
        ctx: ServerRequestContext[Any, Any],
        exc: LoopAbort,
        *,
        ran: bool,
        mode: OnStop | None = None,
    ) -> Answer:
        """The stop as ``answer`` has it (or raised, under ``raise``), never asked."""
        idle = self.runs.run_idle_seconds
        if (mode or self._mode(ctx)) == "raise":
            raise stop_error(exc, run_idle_seconds=idle, ran=ran)
        return answer_result(stop_report(exc), run_idle_seconds=idle, ran=ran)

    async def _stopped(
        self,
        ctx: ServerRequestContext[Any, Any],
        run: RunGuard,
        session: str,
        name: str,
        arguments: Any,
        exc: LoopAbort,
    ) -> Answer | None:
        """What the client gets for a call the guard refused with a stop (``None``: a
        person let it run once more: forward it)."""
        mode = self._mode(ctx)
        if mode != "ask" or not exc.askable or self.runs.question(session) is not None:
            # One question per stop: calls made meanwhile, or after the person left the
            # stop standing, are answered as under ``answer``.
            return self._final(ctx, exc, ran=False, mode=mode)
        question = Question(exc, run, self.guard.clock() + self.ask_timeout)
        report = stop_report(exc)
        if embeds_questions(ctx):
            question.token = new_token()
            question.call = (name, args_key(arguments))
            self.runs.ask(session, question)
            return types.InputRequiredResult(
                input_requests={ASK_KEY: question_request(report)}, request_state=question.token
            )
        self.runs.ask(session, question)
        message, schema = question_form(report)
        reply: types.ElicitResult | None = None
        with anyio.move_on_after(self.ask_timeout) as waited:
            try:
                reply = await ctx.session.elicit_form(
                    message, schema, related_request_id=ctx.request_id
                )
            except Exception as error:  # the client could not ask: the stop stands
                logger.warning(
                    "loopwarden: the MCP client could not ask the person about the stop (%s)",
                    type(error).__name__,
                )
        if waited.cancelled_caught:
            logger.info(
                "loopwarden: no answer to the stop within %g seconds; the run ends",
                self.ask_timeout,
            )
        return await self._apply(run, session, question, reply)

    async def _apply(
        self, run: RunGuard, session: str, question: Question, reply: object
    ) -> Answer | None:
        """Apply a person's answer with ``run.aresume``; ``None``: allowed once more."""
        picked = read_reply(reply)
        choice, note = picked if picked is not None else ("stop", None)
        self.runs.hold(session, None)
        try:
            decision = await run.aresume(question.stop, choice, note)
        except LoopAbort as exc:  # stop, decline, cancel, no answer: the run ends
            question.settled = True
            return answer_result(
                stop_report(exc), run_idle_seconds=self.runs.run_idle_seconds, ran=False
            )
        self.runs.ask(session, None)  # lifted: a later stop is asked about again
        if decision.blocked:
            return note_result(decision.message or "")
        return None


def _utf8(text: str) -> bytes:
    """``text`` as bytes, whatever it holds (a client's lone surrogates included)."""
    return text.encode("utf-8", "surrogatepass")
