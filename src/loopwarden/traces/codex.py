"""OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. ``response_item`` payloads
are Responses API items: ``function_call`` / ``custom_tool_call`` /
``local_shell_call`` are calls, ``function_call_output`` /
``custom_tool_call_output`` their outcomes (matched by ``call_id``). Shell
output wrappers (chunk id, wall time) are scrubbed by the built-in outcome
profiles of ``exec_command`` and ``shell``, as in a live guard.

A run is one turn: it starts at an ``event_msg`` ``task_started`` (or
``turn_started``; its ``turn_id`` names the run) and ends at ``task_complete``
/ ``turn_aborted``. Rollouts without those events start a run at each
``turn_context``. ``compacted`` lines, ``context_compacted`` events and
``compaction`` items are compactions (counted once when they come together).
A ``token_count`` event (``info.last_token_usage``) is the cost of the model
response whose calls came before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._util import parse_arguments
from ..hashing import MISSING
from ._common import ReadContext, blocks_text, outcome_from_text, short_title
from ._sink import Loc, TraceSink
from ._usage import usage_tokens

__all__ = ["read"]

_START_EVENTS = frozenset({"task_started", "turn_started"})
_END_EVENTS = frozenset({"task_complete", "turn_complete", "turn_aborted"})
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})


def read(records: Iterable[tuple[Loc, Any]], sink: TraceSink, ctx: ReadContext) -> None:
    session = ctx.stem
    count = 0
    key: str | None = None
    # A turn is begun lazily (at its first call, compaction or end) so that the
    # user message that follows task_started can still title it.
    turn: tuple[Loc, Any] | None = None
    title: str | None = None
    task_events = False
    compacted_since_call = False
    names: dict[str, str] = {}  # call id -> tool name, for unknown-tool answers

    def new_turn(loc: Loc, turn_id: Any) -> None:
        nonlocal key, turn, title
        close()
        turn, title = (loc, turn_id), None

    def current(loc: Loc) -> str:
        nonlocal key, count, turn
        if key is not None:
            return key
        start_loc, turn_id = turn if turn is not None else (loc, None)
        turn = None
        count += 1
        local = turn_id if isinstance(turn_id, str) and turn_id else f"{session}#{count}"
        key = ctx.key(f"{local}\x1e{count}")
        sink.begin_run(key, label=local, line=start_loc, session=session, title=title)
        if compacted_since_call:  # compaction between turns arms the next one
            sink.compaction(key, loc)
        return key

    def close() -> None:
        nonlocal key, turn
        if key is not None:
            sink.end_run(key)
        key, turn = None, None

    def compaction(loc: Loc) -> None:
        nonlocal compacted_since_call
        if compacted_since_call:
            return  # the same compaction reported again (line + event)
        compacted_since_call = True
        if key is not None:
            sink.compaction(key, loc)

    for loc, record in records:
        if not isinstance(record, dict):
            sink.problem(loc, "expected a JSON object")
            continue
        kind = record.get("type")
        payload = record.get("payload")
        if kind == "compacted":
            compaction(loc)
            continue
        if not isinstance(payload, dict):
            if kind in ("session_meta", "turn_context", "event_msg", "response_item"):
                sink.problem(loc, f"{kind} line without a payload object")
            continue
        if kind == "session_meta":
            meta = payload.get("meta") if isinstance(payload.get("meta"), dict) else payload
            sid = meta.get("id") if isinstance(meta, dict) else None
            if isinstance(sid, str) and sid:
                session = sid
        elif kind == "event_msg":
            event = _text(payload.get("type"))
            if event in _START_EVENTS:
                task_events = True
                new_turn(loc, payload.get("turn_id"))
            elif event in _END_EVENTS:
                close()
            elif event == "context_compacted":
                compaction(loc)
            elif event == "user_message" and title is None:
                title = short_title(payload.get("message"))
            elif event == "token_count" and key is not None:
                info = payload.get("info")
                usage = info.get("last_token_usage") if isinstance(info, dict) else None
                sink.turn_usage(key, usage_tokens(usage))
        elif kind == "turn_context":
            if not task_events:
                new_turn(loc, payload.get("turn_id"))
        elif kind == "response_item":
            item = _text(payload.get("type"))
            if item in _CALL_ITEMS:
                call_id = payload.get("call_id") or payload.get("id")
                tool: Any
                params: Any
                if item == "local_shell_call":
                    tool, params = "local_shell", payload.get("action")
                else:
                    tool = payload.get("name")
                    params = payload.get("arguments" if item == "function_call" else "input")
                    params = parse_arguments(params) if item == "function_call" else params
                if not isinstance(tool, str) or not tool:
                    sink.problem(loc, f"{item} without a name")
                    continue
                run_key = current(loc)
                compacted_since_call = False
                if isinstance(call_id, str):
                    names[call_id] = tool
                    if len(names) > 512:
                        del names[next(iter(names))]
                sink.call(run_key, call_id if isinstance(call_id, str) else None, tool, params, loc)
            elif item in _OUTPUT_ITEMS:
                call_id = payload.get("call_id")
                if not isinstance(call_id, str):
                    sink.problem(loc, f"{item} without a call_id")
                    continue
                if key is None:
                    continue
                result, error = _output(names.pop(call_id, ""), payload.get("output"))
                sink.outcome(key, call_id, loc, result=result, error=error)
            elif item == "compaction":
                compaction(loc)
            elif item == "message" and payload.get("role") == "user" and title is None:
                text = blocks_text(payload.get("content"))
                if not text.lstrip().startswith("<"):  # environment/instructions blocks
                    title = short_title(text)
    close()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _output(tool: str, output: Any) -> tuple[Any, Any]:
    """``(result, error)`` of a function-call output (a string, or ``{content, success}``)."""
    if isinstance(output, dict):
        content = output.get("content", output.get("body"))
        text = blocks_text(content) if content is not None else ""
        if output.get("success") is False:
            return MISSING, text or "error"
        return outcome_from_text(tool, text, content if content is not None else output)
    if isinstance(output, list):
        return outcome_from_text(tool, blocks_text(output), output)
    if isinstance(output, str):
        return outcome_from_text(tool, output)
    return output, MISSING
