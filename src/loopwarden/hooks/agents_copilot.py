"""GitHub Copilot CLI: its native hook events, fields and answers (observed with 1.0.102).

Copilot CLI sends camelCase events (``sessionId``, ``toolName``, ``toolArgs``,
``toolResult``) without the event's name, so each installed command names its
event (``--event preToolUse``) and :meth:`CopilotAdapter.normalize` renames the
fields to the ones the runner reads. There are no call ids and no prompt ids:
``userPromptSubmitted`` starts a run (as Gemini's ``BeforeAgent`` does) and a
call's outcome pairs with the call by its signature.

What Copilot does with the answers (docs/hooks.md has the captured texts):

* ``preToolUse`` ``permissionDecision: "deny"`` keeps the call from running; the
  model reads ``Denied by preToolUse hook: <reason>``. ``continue: false`` is
  ignored there: a hook cannot end the turn, so a stop denies this call and every
  later call of the run, and tells the model to stop.
* ``postToolUse`` ``additionalContext`` is appended to the tool result
  (``Additional guidance from postToolUse hooks:``): the warning channel.
* A call of a tool that does not exist still fires ``preToolUse``, then
  ``postToolUseFailure`` with ``Tool 'x' does not exist.``.
* ``preCompact`` fires before a real compaction only (auto or ``/compact``).
* A hook that exits non-zero denies the call (``hook errored``), so the
  installed command ends in ``|| true``: a broken or removed loopwarden must
  not stop every tool call.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .agents import Adapter, Call, Kind

__all__ = ["CopilotAdapter", "scrub_copilot_shell"]

# Copilot's bash result ends in "<shellId: N completed with exit code X>"; N is new on
# every run of the same command.
_SHELL_ID = re.compile(r"<shellId: [^\s>]+")
_STOP = (
    "No tool call will run again in this turn: stop calling tools and tell the user what happened."
)
# Copilot's field names -> the names the runner reads.
_FIELDS = (
    ("sessionId", "session_id"),
    ("toolName", "tool_name"),
    ("toolArgs", "tool_input"),
    ("toolResult", "tool_response"),
    ("transcriptPath", "transcript_path"),
    ("error", "error"),
    ("trigger", "trigger"),
    ("cwd", "cwd"),
)
_FAILED = frozenset({"failure", "error", "denied", "rejected"})


def scrub_copilot_shell(value: Any) -> Any:
    """``value`` (a tool result text, any shape) without the per-run shell id."""
    if isinstance(value, str):
        return _SHELL_ID.sub("<shellId: #", value) if "<shellId:" in value else value
    if isinstance(value, Mapping):
        return {k: scrub_copilot_shell(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_copilot_shell(v) for v in value]
    return value


class CopilotAdapter(Adapter):
    """GitHub Copilot CLI (``~/.copilot/hooks/*.json``, its native hook format)."""

    name = "copilot"
    title = "GitHub Copilot CLI"
    events: Mapping[str, Kind] = {
        "preToolUse": "pre",
        "postToolUse": "post",
        "postToolUseFailure": "failure",
        "preCompact": "compact",
        "userPromptSubmitted": "prompt",
    }
    install_events = (
        ("preToolUse", None),
        ("postToolUse", None),
        ("postToolUseFailure", None),
        ("preCompact", None),
        ("userPromptSubmitted", None),
    )
    fresh_settings: Mapping[str, Any] = {"version": 1}

    def settings_file(
        self, scope: str, home: Path, env: Mapping[str, str], project: Path
    ) -> Path | None:
        # A file of loopwarden's own: Copilot reads every *.json in these folders, and
        # never writes to them (it rewrites its config.json and settings.json itself).
        if scope == "project":
            return project / ".github" / "hooks" / "loopwarden.json"
        base = env.get("COPILOT_HOME")
        return (Path(base) if base else home / ".copilot") / "hooks" / "loopwarden.json"

    def hook_entry(self, event: str, matcher: str | None, command: str) -> dict[str, Any]:
        return {
            "type": "command",
            "bash": f"{command} --event {event} || true",
            "timeoutSec": self.timeout,
        }

    def normalize(self, event: dict[str, Any], event_name: str | None) -> dict[str, Any]:
        found: dict[str, Any] = {"hook_event_name": event_name or event.get("hook_event_name")}
        for theirs, ours in _FIELDS:
            if theirs in event:
                found[ours] = event[theirs]
        stamp = event.get("timestamp")
        if isinstance(stamp, (int, float, str)) and not isinstance(stamp, bool):
            found["timestamp"] = str(stamp)
        return found

    def probe_event(self, session: str) -> dict[str, Any]:
        return {
            "sessionId": session,
            "timestamp": 0,
            "cwd": os.getcwd(),
            "toolName": "loopwarden_doctor",
            "toolArgs": {"check": "doctor"},
        }

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        return None  # chosen per session by userPromptSubmitted (see the runner)

    def call(self, event: Mapping[str, Any]) -> Call | None:
        found = super().call(event)
        return None if found is None else Call(found.tool, found.params, None)

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        if kind == "failure":
            return super().outcome(kind, event)
        if "tool_response" not in event:
            return None
        response = event["tool_response"]
        if isinstance(response, Mapping):
            text = response.get("textResultForLlm")
            if response.get("resultType") in _FAILED:
                return {"error": text if isinstance(text, str) and text else "tool call failed"}
            if isinstance(text, str):
                return {"result": scrub_copilot_shell(text)}
        return {"result": scrub_copilot_shell(response)}

    # -- answers ------------------------------------------------------------
    def allow(self, kind: Kind, event_name: str, context: str | None) -> dict[str, Any]:
        if not context or kind not in ("pre", "post", "failure"):
            return {}
        return {"additionalContext": context}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        return {"permissionDecision": "deny", "permissionDecisionReason": reason}

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        """Copilot ends no turn for a hook (``continue: false`` is ignored): the call is
        denied, and so is every later call of the run (the guard stays stopped)."""
        reason = f"{reason} {_STOP}"
        if kind == "pre":
            return self.deny(event_name, reason)
        return self.allow(kind, event_name, reason)
