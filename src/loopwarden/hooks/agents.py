"""What each coding agent sends to a hook and what it expects back.

Claude Code and Codex CLI share one vocabulary (``hookSpecificOutput`` with
``permissionDecision``, ``additionalContext``; ``continue``/``stopReason``);
Gemini CLI uses its own event names and a top-level ``decision``/``reason``.
Denials always use the JSON answer with exit code 0: exit code 2 would show
the hook's command line to the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._protocol import AGENTS

__all__ = ["ADAPTERS", "Adapter", "Call", "Kind"]

Kind = Literal["pre", "post", "failure", "compact", "prompt"]
"""What an event means for the guard: check a call, record an outcome (``failure``
for a failed call), arm the post-compaction guard, or a new user prompt."""


@dataclass(frozen=True)
class Call:
    """The tool call an event is about."""

    tool: str
    params: Any
    call_id: str | None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


class Adapter:
    """Claude Code's event names and answers (Codex and Gemini adjust them)."""

    name = "claude-code"
    transcript: Literal["claude", "codex"] | None = "claude"
    # event name -> kind
    events: Mapping[str, Kind] = {
        "PreToolUse": "pre",
        "PostToolUse": "post",
        "PostToolUseFailure": "failure",
        "PreCompact": "compact",
    }
    # (event, matcher) pairs that ``loopwarden install`` registers; None = no matcher key.
    install_events: tuple[tuple[str, str | None], ...] = (
        ("PreToolUse", ""),
        ("PostToolUse", ""),
        ("PostToolUseFailure", ""),
        ("PreCompact", ""),
        ("SessionStart", "compact"),
    )
    timeout: int = 30
    """Hook timeout written by ``install``, in the agent's unit (seconds here)."""

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = event.get("hook_event_name")
        if not isinstance(name, str):
            return None
        if name == "SessionStart":
            # Fires after the summary is installed: the best moment to arm.
            return "compact" if event.get("source") == "compact" else None
        return self.events.get(name)

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        """The run the event belongs to, if the event names one (one user prompt = one run)."""
        run = _text(event.get("prompt_id"))
        agent = _text(event.get("agent_id"))  # inside a subagent: its own loop, its own run
        if run is not None and agent is not None:
            return f"{run}/{agent}"
        return run

    def call(self, event: Mapping[str, Any]) -> Call | None:
        tool = _text(event.get("tool_name"))
        if tool is None:
            return None
        call_id = event.get("tool_use_id")
        return Call(
            tool,
            event.get("tool_input", {}),
            str(call_id) if isinstance(call_id, (str, int)) and str(call_id) else None,
        )

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{"result": ...}`` or ``{"error": ...}`` for ``after_call``; None if absent."""
        if kind == "failure":
            error = event.get("error")
            return {"error": error if error not in (None, "") else "tool call failed"}
        if "tool_response" not in event:
            return None
        return {"result": event["tool_response"]}

    # -- answers -----------------------------------------------------------
    def allow(self, kind: Kind, event_name: str, context: str | None) -> dict[str, Any]:
        if not context or kind not in ("pre", "post", "failure"):
            return {}
        return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        return {
            "hookSpecificOutput": {
                "hookEventName": event_name,
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        """End the agent's turn; a pending call is denied too."""
        answer = (
            self.deny(event_name, reason) if kind == "pre" else self.allow(kind, event_name, reason)
        )
        return {"continue": False, "stopReason": reason, **answer}


class CodexAdapter(Adapter):
    """Codex CLI: Claude Code's vocabulary; ``turn_id`` is the run, compaction has a
    post event, and shell calls arrive as ``Bash`` with a string result."""

    name = "codex"
    transcript = "codex"
    events: Mapping[str, Kind] = {
        "PreToolUse": "pre",
        "PostToolUse": "post",
        "PostToolUseFailure": "failure",
        "PreCompact": "compact",
        "PostCompact": "compact",
    }
    install_events = (
        ("PreToolUse", ""),
        ("PostToolUse", ""),
        ("PreCompact", ""),
        ("PostCompact", ""),
    )

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        return _text(event.get("turn_id"))


class GeminiAdapter(Adapter):
    """Gemini CLI: ``BeforeTool``/``AfterTool``, ``PreCompress``, ``BeforeAgent`` starts a
    run; no call ids; answers use a top-level ``decision``/``reason``."""

    name = "gemini"
    transcript = None  # Gemini's transcript is one JSON document, not an appendable log
    events: Mapping[str, Kind] = {
        "BeforeTool": "pre",
        "AfterTool": "post",
        "PreCompress": "compact",
        "BeforeAgent": "prompt",
    }
    install_events = (
        ("BeforeTool", None),
        ("AfterTool", None),
        ("PreCompress", None),
        ("BeforeAgent", None),
    )
    timeout = 30000  # Gemini's hook timeouts are milliseconds

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = event.get("hook_event_name")
        return self.events.get(name) if isinstance(name, str) else None

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        return None  # chosen per session by BeforeAgent (see the runner)

    def call(self, event: Mapping[str, Any]) -> Call | None:
        found = super().call(event)
        return None if found is None else Call(found.tool, found.params, None)

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        response = event.get("tool_response")
        if "tool_response" not in event:
            return None
        if isinstance(response, Mapping):
            error = response.get("error")
            if error not in (None, "", False):
                if isinstance(error, Mapping) and isinstance(error.get("message"), str):
                    return {"error": error["message"]}
                return {"error": error}
        return {"result": response}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        return {"decision": "deny", "reason": reason}


_BY_NAME = {cls.name: cls() for cls in (Adapter, CodexAdapter, GeminiAdapter)}
# Keyed by the one list of agents (hooks._protocol.AGENTS): an agent without an
# adapter fails at import, an adapter missing from the list is never offered.
ADAPTERS: Mapping[str, Adapter] = {name: _BY_NAME[name] for name in AGENTS}
