"""Token usage as traces record it: what one model response cost, never an estimate.

Claude Code and OpenClaw keep a ``usage`` object on each assistant message,
Codex a ``token_count`` event after each response, and Chat/Responses/LangChain
exports ``usage`` / ``usage_metadata`` / ``response_metadata.token_usage`` on
assistant messages (or one ``usage`` on a whole Responses object). The
readers pass the figure on with :meth:`~loopwarden.traces.TraceSink.model_turn`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["message_usage", "usage_tokens"]

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


def _count(usage: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def usage_tokens(usage: Any) -> int | None:
    """Tokens of one model response from a usage object, or None if it has no figures."""
    if not isinstance(usage, dict):
        return None
    total = _count(usage, _TOTAL)
    if total is not None:
        return total
    parts = [_count(usage, _INPUT), _count(usage, _OUTPUT)]
    if all(part is None for part in parts):
        return None
    cache = sum(_count(usage, (key,)) or 0 for key in _CACHE)
    return sum(part or 0 for part in parts) + cache


def message_usage(message: Mapping[str, Any]) -> int | None:
    """Tokens recorded on a Chat/LangChain assistant message, or None."""
    if (
        "usage" not in message
        and "usage_metadata" not in message
        and "response_metadata" not in message
    ):
        return None  # most messages: no figures (what the lookups below find too)
    for key in ("usage", "usage_metadata"):
        found = usage_tokens(message.get(key))
        if found is not None:
            return found
    meta = message.get("response_metadata")
    if isinstance(meta, dict):
        return usage_tokens(meta.get("token_usage") or meta.get("usage"))
    return None
