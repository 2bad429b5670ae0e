"""Token usage and outcome labels, read from the raw records on their way to the reader.

The trace readers turn records into calls and drop everything else, so a tap
sees each record first and tells the tune replayer which model turn the calls
that follow belong to, and what that turn cost when the trace records it:

* Claude Code: ``message.usage`` of an assistant record (one API response can
  span several records with the same ``message.id``: counted once);
* Codex: ``token_count`` events (``info.last_token_usage``), which follow the
  calls of the response they count;
* OpenClaw: ``message.usage`` of assistant messages;
* Chat/Responses exports: ``usage`` / ``usage_metadata`` /
  ``response_metadata.token_usage`` of an assistant message, or the ``usage``
  of a whole Responses object.

Nothing is estimated: a run whose trace records no usage counts as "not
recorded".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from ..traces._sink import Loc

__all__ = ["LABEL_WORDS", "UsageTap", "label_word", "usage_tokens"]

_INPUT = ("input_tokens", "prompt_tokens", "inputTokens", "promptTokens", "input")
_OUTPUT = ("output_tokens", "completion_tokens", "outputTokens", "completionTokens", "output")
# Anthropic and OpenClaw count cache reads/writes outside the input figure.
_CACHE = (
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cacheRead",
    "cacheWrite",
)
_TOTAL = ("total_tokens", "totalTokens")

LABEL_WORDS = {
    "good": "good",
    "healthy": "good",
    "ok": "good",
    "success": "good",
    "succeeded": "good",
    "resolved": "good",
    "pass": "good",
    "passed": "good",
    "true": "good",
    "bad": "bad",
    "stuck": "bad",
    "loop": "bad",
    "looped": "bad",
    "fail": "bad",
    "failed": "bad",
    "failure": "bad",
    "unresolved": "bad",
    "false": "bad",
}


def label_word(value: Any) -> str | None:
    """``good``, ``bad`` or None (unknown) for a label value from a file or a trace."""
    if isinstance(value, bool):
        return "good" if value else "bad"
    if isinstance(value, (int, float)) and value in (0, 1):
        return "good" if value == 1 else "bad"
    if isinstance(value, str):
        return LABEL_WORDS.get(value.strip().lower())
    return None


def _count(usage: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def usage_tokens(usage: Any) -> int | None:
    """Tokens of one model response from a usage object, or None if it has no figures."""
    if not isinstance(usage, Mapping):
        return None
    total = _count(usage, _TOTAL)
    if total is not None:
        return total
    parts = [_count(usage, _INPUT), _count(usage, _OUTPUT)]
    if all(part is None for part in parts):
        return None
    cache = sum(_count(usage, (key,)) or 0 for key in _CACHE)
    return sum(part or 0 for part in parts) + cache


def _message_usage(message: Mapping[str, Any]) -> int | None:
    for key in ("usage", "usage_metadata"):
        found = usage_tokens(message.get(key))
        if found is not None:
            return found
    meta = message.get("response_metadata")
    if isinstance(meta, Mapping):
        return usage_tokens(meta.get("token_usage") or meta.get("usage"))
    return None


class TurnSink(Protocol):
    """What the tap tells the tune replayer."""

    def turn_usage(self, turn: int, tokens: int) -> None:
        """The tokens of ``turn``, known only after its calls (Codex)."""
        ...

    def trace_label(self, value: Any) -> None:
        """An outcome label read from the trace, for the run this record belongs to."""
        ...

    def record_done(self) -> None:
        """The reader has finished with the record the tap passed on last."""
        ...


class UsageTap:
    """Watches raw records; ``turn``/``tokens`` describe the calls the reader emits now."""

    def __init__(self, sink: TurnSink, label_field: str | None = None) -> None:
        self.sink = sink
        self.turn = 0
        self.tokens: int | None = None
        self.by_call: dict[str, tuple[int, int | None]] = {}
        """Turns of calls inside a whole conversation record (Chat objects)."""
        self._message_id: Any = None
        self._label_path = tuple(label_field.split(".")) if label_field else ()

    def __call__(self, fmt: str, records: Iterable[tuple[Loc, Any]]) -> Iterator[tuple[Loc, Any]]:
        watch = {
            "claude-code": self._claude,
            "codex": self._codex,
            "openclaw": self._openclaw,
            "chat": self._chat,
        }.get(fmt)
        label_path = self._label_path
        sink = self.sink
        for loc, record in records:
            if record.__class__ is dict:
                if watch is not None:
                    watch(record)
                if label_path:
                    value = _dig(record, label_path)
                    if value is not None:
                        sink.trace_label(value)
            yield loc, record
            sink.record_done()

    def _new_turn(self, tokens: int | None) -> None:
        self.turn += 1
        self.tokens = tokens

    def _claude(self, record: Mapping[str, Any]) -> None:
        if record.get("type") != "assistant":
            return
        message = record.get("message")
        if not isinstance(message, Mapping):
            return
        ident = message.get("id")
        if ident is not None and ident == self._message_id:
            return  # another content block of the same response
        self._message_id = ident
        self._new_turn(usage_tokens(message.get("usage")))

    def _codex(self, record: Mapping[str, Any]) -> None:
        payload = record.get("payload")
        if not isinstance(payload, Mapping) or record.get("type") != "event_msg":
            return
        if payload.get("type") != "token_count":
            return
        info = payload.get("info")
        tokens = usage_tokens(info.get("last_token_usage")) if isinstance(info, Mapping) else None
        if tokens is not None:
            self.sink.turn_usage(self.turn, tokens)
        self._new_turn(None)

    def _openclaw(self, record: Mapping[str, Any]) -> None:
        message = record.get("message")
        if (
            record.get("type") == "message"
            and isinstance(message, Mapping)
            and message.get("role") == "assistant"
        ):
            self._new_turn(usage_tokens(message.get("usage")))

    def _chat(self, record: Mapping[str, Any]) -> None:
        role = record.get("role")
        if role == "assistant":
            self._new_turn(_message_usage(record))
            return
        if role is not None or record.get("type") is not None:
            return  # a tool result or a Responses item: the current turn goes on
        items: list[Any] = []
        for key in ("messages", "input", "items", "output"):
            value = record.get(key)
            if isinstance(value, list):
                items.extend(value)
        if not items:
            return
        # A whole conversation: map its call ids to the assistant turn that made them.
        whole = usage_tokens(record.get("usage"))
        self.by_call.clear()
        self._new_turn(whole)
        turn, tokens = self.turn, whole
        for item in items:
            if not isinstance(item, Mapping):
                continue
            if item.get("role") == "assistant":
                self._new_turn(_message_usage(item))
                turn, tokens = self.turn, self.tokens
                for call_id in _chat_call_ids(item):
                    self.by_call[call_id] = (turn, tokens)
            elif item.get("type") in ("function_call", "custom_tool_call", "mcp_call"):
                item_id = item.get("call_id") or item.get("id")
                if isinstance(item_id, str):
                    self.by_call[item_id] = (turn, tokens)


def _chat_call_ids(message: Mapping[str, Any]) -> Iterator[str]:
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            ident = call.get("id") if isinstance(call, Mapping) else None
            if isinstance(ident, str):
                yield ident
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            ident = block.get("id") if isinstance(block, Mapping) else None
            if isinstance(ident, str) and block.get("type") == "tool_use":
                yield ident


def _dig(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
