"""Qwen Code: Claude Code's hook vocabulary with answers of its own (observed with 0.24.4).

Qwen Code started as a fork of Gemini CLI, but its hooks are Claude Code's, not
Gemini's: ``PreToolUse``, ``PostToolBatch``, ``PreCompact``/``PostCompact``,
``UserPromptSubmit`` and the ``hookSpecificOutput`` answers, in
``~/.qwen/settings.json``. Only the shell tool's result is Gemini's
(``run_shell_command``, with a process group id that changes every run).

What Qwen does with the answers (docs/hooks.md has the captured texts):

* ``PreToolUse`` deny: the call does not run; the model reads the reason as the
  tool's error, the user sees ``Tool "x" was not run: <reason>``. Its
  ``tool_use_id`` is Qwen's own; ``tool_call_id`` is the model's call id, the one
  ``PostToolBatch`` reports, so calls are checked under ``tool_call_id``.
* ``PostToolBatch`` ``additionalContext`` is appended to the batch's last result
  (the warning channel); calls of a missing tool fire no ``PreToolUse`` and show
  up here with ``Tool "x" not found in registry``.
* ``continue: false`` on a tool event only replaces that call's result; a hook
  ends a turn by blocking ``UserPromptSubmit``, which Qwen fires again (same
  ``prompt_id``, empty prompt) before each model request of the turn. So a stop
  denies the call, and the next ``UserPromptSubmit`` of that run ends the turn
  before the model is asked again.
* ``PostCompact`` fires after a compression that succeeded (``SessionStart``
  with source ``compact`` follows, but unawaited).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .agents import Adapter, BatchEntry, Call, Kind, answered_calls, scrub_gemini_shell

__all__ = ["QwenAdapter"]

_MISSING = re.compile(r'^\s*Tool "[^"]+" not found')


def _response_of(item: Mapping[str, Any]) -> Any:
    """The functionResponse ``response`` of a PostToolBatch call (its first part)."""
    response = item.get("tool_response")
    parts = response.get("response_parts") if isinstance(response, Mapping) else None
    if isinstance(parts, list):
        for part in parts:
            found = part.get("functionResponse") if isinstance(part, Mapping) else None
            if isinstance(found, Mapping) and "response" in found:
                return found["response"]
    return response


class QwenAdapter(Adapter):
    """Qwen Code (``~/.qwen/settings.json``, Claude Code's hook format)."""

    name = "qwen"
    title = "Qwen Code"
    events: Mapping[str, Kind] = {
        "PreToolUse": "pre",
        "PostToolBatch": "batch",
        "PostCompact": "compact",
        "UserPromptSubmit": "turn",
        # Not installed (PostToolBatch sees every call), still understood.
        "PostToolUse": "post",
        "PostToolUseFailure": "failure",
    }
    install_events = (
        ("PreToolUse", ""),
        ("PostToolBatch", None),
        ("PostCompact", None),
        ("UserPromptSubmit", None),
    )
    timeout = 30  # seconds (Qwen reads values of 1000 and more as milliseconds)

    def settings_file(
        self, scope: str, home: Path, env: Mapping[str, str], project: Path
    ) -> Path | None:
        if scope == "project":
            return project / ".qwen" / "settings.json"
        base = env.get("QWEN_HOME")
        return (Path(base) if base else home / ".qwen") / "settings.json"

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = event.get("hook_event_name")
        return self.events.get(name) if isinstance(name, str) else None

    def call(self, event: Mapping[str, Any]) -> Call | None:
        found = super().call(event)
        if found is None:
            return None
        api_id = event.get("tool_call_id")
        if isinstance(api_id, str) and api_id:
            return Call(found.tool, found.params, api_id)
        return found

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        found = super().outcome(kind, event)
        if found is not None and event.get("tool_name") == "run_shell_command":
            return {k: scrub_gemini_shell(v) for k, v in found.items()}
        return found

    def batch(self, event: Mapping[str, Any]) -> list[BatchEntry]:
        found: list[BatchEntry] = []
        for item, call in answered_calls(self, event):
            response = _response_of(item)
            if item.get("status") == "success":
                if call.tool == "run_shell_command":
                    response = scrub_gemini_shell(response)
                found.append(BatchEntry(call, {"result": response}, False))
                continue
            error = response.get("error") if isinstance(response, Mapping) else response
            text = error if isinstance(error, str) and error else "tool call failed"
            found.append(BatchEntry(call, {"error": text}, _MISSING.match(text) is not None))
        return found

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        """Deny the call; the run's next ``UserPromptSubmit`` is blocked (the turn ends)."""
        if kind == "pre":
            return self.deny(event_name, reason)
        if kind == "turn":
            return {"decision": "block", "reason": reason}
        return self.allow(kind, event_name, reason)
