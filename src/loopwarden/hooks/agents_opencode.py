"""OpenCode: the events loopwarden's OpenCode plugin sends, and the answers it acts on.

OpenCode has no command hooks; it loads JavaScript plugins into its own
process (``~/.config/opencode/plugins/*.js``). ``loopwarden install opencode``
writes one that hands each moment to the same hook code as the other agents,
over the hook helper's socket (a hook process only when no helper runs), as
JSON in Claude Code's field names:

* ``tool.execute.before`` (``pre``): the plugin throws the ``deny`` text, so the
  tool does not run and the model gets it as the call's error;
* ``tool.execute.after`` (``post``): ``context`` is appended to the tool's output;
* ``tool.failed`` (``failure``): a tool that threw (OpenCode skips the after hook);
* ``session.compacted`` (``compact``): OpenCode compacted the session.

A ``stop`` is thrown like a deny, and the plugin then refuses the session's
next model request (``chat.params``) until the user's next prompt.

OpenCode answers a call of a tool it does not have through its own ``invalid``
tool, whose arguments name the tool the model asked for: that call is checked
and recorded under that name, so repeated calls of a missing tool can be blocked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .agents import Adapter, Call, Kind, _text

__all__ = ["OpenCodeAdapter"]

# OpenCode's stand-in for a call of a tool it does not have (or with bad arguments).
_INVALID = "invalid"


class OpenCodeAdapter(Adapter):
    """OpenCode through loopwarden's plugin; the run is the user's prompt (message id)."""

    name = "opencode"
    title = "OpenCode"
    events: Mapping[str, Kind] = {
        "tool.execute.before": "pre",
        "tool.execute.after": "post",
        "tool.failed": "failure",
        "session.compacted": "compact",
    }
    install_events = ()  # a plugin file, not settings entries (see hooks.fileinstall)

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = event.get("hook_event_name")
        return self.events.get(name) if isinstance(name, str) else None

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        return _text(event.get("run_id"))

    def call(self, event: Mapping[str, Any]) -> Call | None:
        found = super().call(event)
        if found is None or found.tool != _INVALID or not isinstance(found.params, Mapping):
            return found
        asked = _text(found.params.get("tool"))
        if asked is None:
            return found
        # The model's own arguments are not kept by OpenCode: a missing tool is
        # counted by its name (the unknown-tool rules ignore arguments anyway).
        return Call(asked, {}, found.call_id)

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        if event.get("tool_name") == _INVALID:
            params = event.get("tool_input")
            error = params.get("error") if isinstance(params, Mapping) else None
            return {"error": error if isinstance(error, str) and error else "invalid tool call"}
        return super().outcome(kind, event)

    # -- answers (read by the plugin, not by OpenCode) -------------------------------
    def allow(self, kind: Kind, event_name: str, context: str | None) -> dict[str, Any]:
        return {"context": context} if context else {}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        return {"deny": reason}

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        return {"stop": reason}

    def probe_event(self, session: str) -> dict[str, Any]:
        """A harmless call as the plugin would send it (``loopwarden doctor``)."""
        return {
            "hook_event_name": "tool.execute.before",
            "session_id": session,
            "run_id": f"doctor-{session}",
            "tool_name": "loopwarden_doctor",
            "tool_input": {"check": "doctor"},
            "tool_use_id": "doctor-1",
        }
