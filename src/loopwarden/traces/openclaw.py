"""OpenClaw session transcripts (``~/.openclaw/agents/<agentId>/sessions/<id>.jsonl``).

The first line is ``{"type": "session", "id": ...}``; later lines are tree
entries (``id`` + ``parentId``). ``message`` entries carry pi-ai messages:
assistant ``content`` blocks of type ``toolCall`` (``id``, ``name``,
``arguments``) are calls; ``toolResult`` messages (``toolCallId``) are their
outcomes, replayed as OpenClaw's ``{content, details}`` tool results (with
``isError``), so the outcome profiles of OpenClaw's tools (exec, process,
message sends) apply exactly as live. Entries are replayed in file order;
abandoned branches of the tree are not filtered out.

A run is one user message and everything until the next one. ``compaction``
entries arm the post-compaction guard (of the next run when no call follows
in the current one). The agent id is taken from the ``agents/<id>/sessions``
path when present, so per-agent config blocks apply. An assistant message's
``usage`` is the cost of its model response.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._util import parse_arguments
from ._common import ReadContext, blocks_text, short_title
from ._sink import Loc, TraceSink
from ._usage import usage_tokens

__all__ = ["read"]


def _agent_from_path(ctx: ReadContext) -> str | None:
    """``<agentId>`` of a path like ``.../agents/<agentId>/sessions/<file>``."""
    if ctx.path is None:
        return None
    parts = ctx.path.parts
    for index in range(len(parts) - 3, -1, -1):
        if parts[index] == "agents" and parts[index + 2] == "sessions":
            return parts[index + 1]
    return None


def read(records: Iterable[tuple[Loc, Any]], sink: TraceSink, ctx: ReadContext) -> None:
    session = ctx.stem
    agent = _agent_from_path(ctx)
    count = 0
    key: str | None = None
    armed = False

    def start(loc: Loc, title: str | None) -> str:
        nonlocal key, count, armed
        if key is not None:
            sink.end_run(key)
        count += 1
        label = f"{session}#{count}"
        key = ctx.key(label)
        sink.begin_run(key, label=label, line=loc, session=session, agent=agent, title=title)
        if armed:
            sink.compaction(key, loc)
            armed = False
        return key

    for loc, record in records:
        if not isinstance(record, dict):
            sink.problem(loc, "expected a JSON object")
            continue
        kind = record.get("type")
        if kind == "session":
            sid = record.get("id")
            if isinstance(sid, str) and sid:
                session = sid
            continue
        if kind == "compaction":
            if key is not None:
                sink.compaction(key, loc)
            armed = True
            continue
        if kind != "message":
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            sink.problem(loc, "message entry without a message object")
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            start(loc, short_title(blocks_text(content)))
        elif role == "assistant":
            if not isinstance(content, list):
                continue
            new_turn = True
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "toolCall":
                    continue
                tool = block.get("name")
                if not isinstance(tool, str) or not tool:
                    sink.problem(loc, "toolCall without a name")
                    continue
                current = key if key is not None else start(loc, None)
                if new_turn:
                    sink.model_turn(current, usage_tokens(message.get("usage")))
                    new_turn = False
                call_id = block.get("id")
                sink.call(
                    current,
                    call_id if isinstance(call_id, str) else None,
                    tool,
                    parse_arguments(block.get("arguments")),
                    loc,
                )
                armed = False
        elif role == "toolResult":
            call_id = message.get("toolCallId")
            if not isinstance(call_id, str):
                sink.problem(loc, "toolResult without a toolCallId")
                continue
            if key is None:
                continue
            result: dict[str, Any] = {"content": content if content is not None else []}
            details = message.get("details")
            if details is not None:
                result["details"] = details
            if message.get("isError") is True:
                result["isError"] = True
            sink.outcome(key, call_id, loc, result=result)
    if key is not None:
        sink.end_run(key)
