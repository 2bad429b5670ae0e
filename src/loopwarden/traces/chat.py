"""Message lists: OpenAI Chat Completions, the Responses API, Anthropic Messages.

Most agent frameworks can export a conversation in one of these shapes
(openai-agents ``result.to_input_list()`` gives Responses items, LangChain
messages convert to Chat Completions). Accepted:

* a JSON list of messages/items, or a JSONL file with one message/item per
  line — the whole file is **one run**;
* a conversation object ``{"messages" | "input" | "items" | "output": [...],
  "tools": [...]}`` — one run per object (a JSON list of them, or one per JSONL
  line, as in fine-tuning datasets).

Calls: Chat ``tool_calls`` (and legacy ``function_call``), Responses
``function_call`` / ``custom_tool_call`` / ``mcp_call`` items, Anthropic
``tool_use`` blocks. Outcomes: ``role: "tool"`` / ``"function"`` messages,
``function_call_output`` items, ``tool_result`` blocks (``is_error`` kept).
These formats do not mark failed calls, so an answer that says the called
tool does not exist is taken as that error. ``compaction`` items are
compactions. A ``tools`` list names the registered tools, which turns on the
unknown-tool guard for names outside it. Token usage recorded on an assistant
message (``usage``, ``usage_metadata``, ``response_metadata.token_usage``), or
on a whole Responses object, is the cost of the model response behind its calls.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from .._util import parse_arguments
from ._common import ReadContext, blocks_text, file_stem, outcome_from_text, short_title
from ._sink import Loc, TraceSink
from ._usage import message_usage, usage_tokens

__all__ = ["ITEM_TYPES", "RangeLabels", "read"]

_LIST_KEYS = ("messages", "input", "items", "output")
_TEXT_OR_NONE = (str, type(None))
ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "mcp_call",
        "compaction",
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_list_tools",
        "item_reference",
    }
)


def is_conversation(record: Mapping[str, Any]) -> bool:
    return any(isinstance(record.get(k), list) for k in _LIST_KEYS)


def is_item(record: Mapping[str, Any]) -> bool:
    kind = record.get("type")
    return isinstance(record.get("role"), str) or (isinstance(kind, str) and kind in ITEM_TYPES)


def tool_names(tools: Any) -> list[str] | None:
    """Function tool names of a Chat/Responses/Anthropic ``tools`` list (None if none)."""
    if not isinstance(tools, list):
        return None
    names = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str) and name:
            names.append(name)
    return names or None


def _sub(loc: Loc, field: str, index: int) -> Loc:
    if isinstance(loc, int):
        return loc
    return f"{loc or ''}{'.' if loc else ''}{field}[{index}]"


class _Conversation:
    """One run: pairs results with calls and remembers call names."""

    def __init__(self, sink: TraceSink, key: str) -> None:
        self.sink = sink
        self.key = key
        self.names: dict[str, str] = {}
        self.legacy: dict[str, list[str]] = {}
        self.count = 0
        # The model response the next calls come from (sent with its first call).
        self.new_turn = False
        self.turn_tokens: int | None = None

    def turn(self, tokens: int | None) -> None:
        self.new_turn = True
        self.turn_tokens = tokens

    def call(self, call_id: Any, tool: Any, params: Any, loc: Loc, what: str) -> str | None:
        if not isinstance(tool, str) or not tool:
            self.sink.problem(loc, f"{what} without a tool name")
            return None
        self.count += 1
        cid = call_id if isinstance(call_id, str) and call_id else f"call#{self.count}"
        self.names[cid] = tool
        if len(self.names) > 512:
            del self.names[next(iter(self.names))]
        if self.new_turn:
            self.sink.model_turn(self.key, self.turn_tokens)
            self.new_turn = False
        self.sink.call(self.key, cid, tool, params, loc)
        return cid

    def result(self, call_id: Any, content: Any, loc: Loc, *, is_error: bool = False) -> None:
        if not isinstance(call_id, str) or not call_id:
            self.sink.problem(loc, "tool result without a call id")
            return
        text = blocks_text(content)
        if is_error:
            self.sink.outcome(self.key, call_id, loc, error=text.strip() or "error")
            return
        tool = self.names.get(call_id, "")
        value = content if isinstance(content, _TEXT_OR_NONE) else text
        result, error = outcome_from_text(tool, text, value)
        self.sink.outcome(self.key, call_id, loc, result=result, error=error)

    def item(self, item: Any, loc: Loc) -> None:
        if not isinstance(item, dict):
            self.sink.problem(loc, "expected a message or item object")
            return
        kind = item.get("type")
        role = item.get("role")
        if kind is None:  # a chat message (no item type): by its role alone
            self.message(item, role, loc)
        elif kind == "function_call":
            self.call(
                item.get("call_id") or item.get("id"),
                item.get("name"),
                parse_arguments(item.get("arguments")),
                loc,
                "function_call",
            )
        elif kind == "custom_tool_call":
            self.call(
                item.get("call_id") or item.get("id"),
                item.get("name"),
                item.get("input"),
                loc,
                "custom_tool_call",
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self.result(item.get("call_id"), item.get("output"), loc)
        elif kind == "mcp_call":
            cid = self.call(
                item.get("id"),
                item.get("name"),
                parse_arguments(item.get("arguments")),
                loc,
                "mcp_call",
            )
            error = item.get("error")
            if cid is not None and error:
                self.result(
                    cid, error if isinstance(error, str) else str(error), loc, is_error=True
                )
            elif cid is not None and item.get("output") is not None:
                self.result(cid, item.get("output"), loc)
        elif kind == "compaction":
            self.sink.compaction(self.key, loc)
        else:
            self.message(item, role, loc)

    def message(self, item: dict[str, Any], role: Any, loc: Loc) -> None:
        """A message, by its role: an assistant's calls, or the results of a tool, a legacy
        function or a user turn (Anthropic's ``tool_result`` blocks)."""
        if role == "assistant":
            self.turn(message_usage(item))
            self._assistant(item, loc)
        elif role == "user":
            content = item.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        self.result(
                            block.get("tool_use_id"),
                            block.get("content"),
                            loc,
                            is_error=block.get("is_error") is True,
                        )
        elif role == "tool":
            self.result(item.get("tool_call_id"), item.get("content"), loc)
        elif role == "function":
            name = item.get("name")
            ids = self.legacy.get(name) if isinstance(name, str) else None
            if ids:
                self.result(ids.pop(0), item.get("content"), loc)
            else:
                self.sink.problem(loc, "function result without a matching function_call")

    def _assistant(self, item: Mapping[str, Any], loc: Loc) -> None:
        calls = item.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if not isinstance(call, dict):
                    self.sink.problem(loc, "tool_calls entry is not an object")
                    continue
                function = call.get("function")
                spec = function if isinstance(function, dict) else call
                self.call(
                    call.get("id"),
                    spec.get("name"),
                    parse_arguments(spec.get("arguments")),
                    loc,
                    "tool call",
                )
        legacy = item.get("function_call")
        if isinstance(legacy, dict):
            cid = self.call(
                None,
                legacy.get("name"),
                parse_arguments(legacy.get("arguments")),
                loc,
                "function_call",
            )
            if cid is not None:
                self.legacy.setdefault(str(legacy.get("name")), []).append(cid)
        content = item.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    self.call(
                        block.get("id"), block.get("name"), block.get("input"), loc, "tool_use"
                    )


def _first_user_text(items: Iterable[Any]) -> str | None:
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            text = blocks_text(item.get("content"))
            if text.strip():
                return short_title(text)
    return None


def read(records: Iterable[tuple[Loc, Any]], sink: TraceSink, ctx: ReadContext) -> None:
    file_run: _Conversation | None = None
    conversations = 0
    for loc, record in records:
        if isinstance(record, list):
            conversations += 1
            _conversation(sink, ctx, {"messages": record}, loc, conversations)
        elif isinstance(record, dict) and is_conversation(record):
            conversations += 1
            _conversation(sink, ctx, record, loc, conversations)
        elif isinstance(record, dict) and is_item(record):
            if file_run is None:
                key = ctx.key("items")
                sink.begin_run(key, label=ctx.stem, line=loc)
                file_run = _Conversation(sink, key)
            file_run.item(record, loc)
        else:
            sink.problem(loc, "not a chat message, Responses item or conversation object")
    if file_run is not None:
        sink.end_run(file_run.key)


def _conversation(
    sink: TraceSink, ctx: ReadContext, record: Mapping[str, Any], loc: Loc, number: int
) -> None:
    ident = record.get("id")
    label = ident if isinstance(ident, str) and ident else f"{ctx.stem}#{number}"
    key = ctx.key(f"{label}\x1e{number}")
    lists: list[tuple[str, list[Any]]] = []
    for field in _LIST_KEYS:
        value = record.get(field)
        if isinstance(value, list):
            lists.append((field, value))
    session = record.get("conversation_id") or record.get("session_id")
    sink.begin_run(
        key,
        label=label,
        line=loc,
        session=session if isinstance(session, str) else None,
        tools=tool_names(record.get("tools")),
        title=_first_user_text(itertools.chain.from_iterable(value for _, value in lists)),
    )
    conversation = _Conversation(sink, key)
    conversation.turn(usage_tokens(record.get("usage")))  # a Responses object's usage
    item, message = conversation.item, conversation.message
    if isinstance(loc, int):  # a JSONL line: every item is at that line (no per-item path)
        for _, value in lists:
            for entry in value:
                if type(entry) is dict and entry.get("type") is None:
                    message(entry, entry.get("role"), loc)  # item()'s first branch, inline
                else:
                    item(entry, loc)
    else:
        for field, value in lists:
            for i, entry in enumerate(value):
                item(entry, _sub(loc, field, i))
    sink.end_run(key)


class RangeLabels:
    """Whole-file labels for the id-less conversations of a JSONL file read in ranges.

    A conversation without an id is labelled ``<stem>#<n>``, ``n`` its
    position in the file; a reader given one range of the file (fleet
    replay) numbers from 1 again, and only whoever sees the ranges in order
    knows how many came before. Feed the runs of each range, ranges in order
    (:meth:`next_range` first), and :meth:`label` gives the whole-file label.
    """

    def __init__(self) -> None:
        self._offset = 0
        self._seen = 0

    def next_range(self, first: bool) -> None:
        """The runs that follow come from the next range (``first``: of a new file)."""
        self._offset = 0 if first else self._offset + self._seen
        self._seen = 0

    def label(self, key: str, label: str, source: str) -> str:
        """The whole-file label of a run that a range reader labelled ``label``."""
        _, sep, number = key.rpartition("\x1e")
        if not sep or not number.isdigit():
            return label
        n = int(number)
        if n > self._seen:
            self._seen = n
        if self._offset and label == f"{file_stem(source)}#{n}":
            return f"{file_stem(source)}#{n + self._offset}"
        return label
