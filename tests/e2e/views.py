"""What the model was shown, read from the requests the fake API received.

Each scripted tool call has an id (``toolu_…``/``call_…``) handed out by the
fake API. Its result reaches the model in a later request of the main
conversation: a ``tool_result`` block (Anthropic), a ``function_call_output``
item (Responses, with hook context as developer messages next to it) or a
``functionResponse`` part (Gemini). A call whose result never reached the
model (the CLI stopped) has no :class:`Shown`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Shown", "classify", "results"]


@dataclass(frozen=True)
class Shown:
    """One tool result as the model received it."""

    call: str
    text: str
    """The tool result itself, with whatever the CLI appended to it."""
    is_error: bool | None
    context: str = ""
    """Messages the CLI put next to the result (Codex: developer messages)."""

    @property
    def everything(self) -> str:
        return f"{self.text}\n{self.context}" if self.context else self.text


_STOP = re.compile(
    r"loopwarden global circuit breaker stopped|loopwarden stopped this run|"
    r"loopwarden aborted the run"
)
_BLOCK = re.compile(r"loopwarden blocked this call")
_MISS = re.compile(r"loopwarden: there is no tool named")
_WARN = re.compile(
    r"WARNING: .*(has been called|has been polled|alternate between|repeat a cycle of|"
    r"repeat the same two|all failed)"
)


def classify(text: str) -> str | None:
    """``stop``, ``block``, ``miss`` (a note about calls of a tool that does not exist)
    or ``warn`` for loopwarden's own texts in ``text``, else None."""
    if _STOP.search(text):
        return "stop"
    if _BLOCK.search(text):
        return "block"
    if _MISS.search(text):
        return "miss"
    if _WARN.search(text):
        return "warn"
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c) for c in content)
    if isinstance(content, dict):
        for key in ("text", "output", "error", "content"):
            if key in content:
                return _text(content[key])
        return json.dumps(content)
    return "" if content is None else str(content)


def _anthropic(body: dict[str, Any], call: str) -> Shown | None:
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == call:
                # Hook context can also come as text blocks of the same message.
                others = [b["text"] for b in content if isinstance(b.get("text"), str)]
                return Shown(
                    call, _text(block.get("content")), block.get("is_error"), "\n".join(others)
                )
    return None


def _responses(body: dict[str, Any], call: str) -> Shown | None:
    items = body.get("input", [])
    started = False
    context: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call" and item.get("call_id") == call:
            started = True
        elif started and kind == "message" and item.get("role") in ("developer", "user"):
            context.append(_text(item.get("content")))
        elif kind == "function_call_output" and item.get("call_id") == call:
            return Shown(call, _text(item.get("output")), None, "\n".join(context))
    return None


def _gemini(body: dict[str, Any], call: str) -> Shown | None:
    contents = body.get("contents", [])
    for index, content in enumerate(contents):
        parts = content.get("parts") or []
        for part in parts:
            response = part.get("functionResponse")
            if isinstance(response, dict) and response.get("id") == call:
                data = response.get("response") or {}
                error = isinstance(data, dict) and "error" in data
                others = [p["text"] for p in parts if isinstance(p.get("text"), str)]
                # A hook's note before a model request comes as the next user content.
                for later in contents[index + 1 :]:
                    if later.get("role") != "user":
                        break
                    others += [p["text"] for p in later.get("parts") or [] if "text" in p]
                return Shown(call, _text(data), error, "\n".join(others))
    return None


_READERS = {
    "claude-code": _anthropic,
    "codex": _responses,
    "gemini": _gemini,
    "opencode": _anthropic,
    "cline": _anthropic,
    "copilot": _responses,  # Copilot CLI's BYOK provider speaks the Responses API here
    "qwen": _gemini,  # Qwen Code's Gemini client
}


def results(agent: str, main: list[dict[str, Any]]) -> list[Shown | None]:
    """For each main request: the result of the call it answered with, as later shown."""
    read = _READERS[agent]
    found: list[Shown | None] = []
    for i, request in enumerate(main):
        call = request.get("call")
        shown = None
        if call is not None:
            for later in main[i + 1 :]:
                shown = read(later["body"] or {}, call)
                if shown is not None:
                    break
        found.append(shown)
    return found
