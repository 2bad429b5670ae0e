"""Cline CLI: its hook files' events and the answers they accept.

Cline runs every executable file named after an event in its hooks
directories (``~/.cline/hooks``, ``.clinerules/hooks`` of the project),
passing the event as JSON on stdin and reading one JSON object from stdout.
``loopwarden install cline`` adds ``PreToolUse.sh`` and ``PostToolUse.sh``
there, which run the same hook command as the other agents.

What Cline 3.0 accepts (observed, see docs/hooks.md):

* ``contextModification`` reaches the model as a ``<hook_context>`` block after
  the tool result: warnings;
* ``cancel: true`` ends the run before the call runs, and nothing more is sent to
  the model. A hook file cannot skip one call and let the run go on, so a block
  is a stop on Cline;
* no hook sees calls of missing tools, and Cline's ``PreCompact`` files are never
  run: a compaction is noticed at the next tool call, when the session's
  ``<id>.compaction.json`` (written by each compaction) has changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .agents import Adapter, Call, Kind, _call_id, _text

__all__ = ["ClineAdapter"]


def _plain(name: str | None) -> str | None:
    """``name`` if it can be a file name (a session id from the event), else None."""
    if name is None or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        return None
    return name


class ClineAdapter(Adapter):
    """Cline CLI hook files: ``tool_call``/``tool_result``; one agent's run is one run."""

    name = "cline"
    title = "Cline CLI"
    events: Mapping[str, Kind] = {"tool_call": "pre", "tool_result": "post"}
    install_events = ()  # hook files, not settings entries (see hooks.fileinstall)

    def event_name(self, event: Mapping[str, Any]) -> str | None:
        name = event.get("hookName")
        return name if isinstance(name, str) else None

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = self.event_name(event)
        found = self.events.get(name) if name is not None else None
        if found == "post":
            result = event.get("tool_result")
            if isinstance(result, Mapping) and result.get("error") not in (None, "", False):
                return "failure"
        return found

    def session_id(self, event: Mapping[str, Any]) -> str | None:
        context = event.get("sessionContext")
        if isinstance(context, Mapping):
            root = _text(context.get("rootSessionId"))
            if root is not None:
                return root
        return _text(event.get("taskId"))

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        # One Cline agent works one prompt (a subagent has its own agent id: its own run).
        task = _text(event.get("taskId"))
        agent = _text(event.get("agent_id"))
        if task is None:
            return agent
        return f"{task}/{agent}" if agent is not None else task

    def _record(self, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        key = "tool_call" if self.event_name(event) == "tool_call" else "tool_result"
        record = event.get(key)
        return record if isinstance(record, Mapping) else None

    def call(self, event: Mapping[str, Any]) -> Call | None:
        record = self._record(event)
        if record is None:
            return None
        tool = _text(record.get("name"))
        if tool is None:
            return None
        return Call(tool, record.get("input", {}), _call_id(record.get("id")))

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        record = self._record(event)
        if record is None:
            return None
        if kind == "failure":
            return {"error": record.get("error") or "tool call failed"}
        if "output" not in record:
            return None
        return {"result": record["output"]}

    def compaction_file(self, event: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
        """The session's compaction record, which Cline rewrites at every compaction."""
        session = _plain(self.session_id(event))
        if session is None:
            return None
        sessions = env.get("CLINE_SESSION_DATA_DIR")
        if not sessions:
            data = env.get("CLINE_DATA_DIR")
            if not data:
                home = env.get("HOME") or os.path.expanduser("~")
                data = os.path.join(env.get("CLINE_DIR") or os.path.join(home, ".cline"), "data")
            sessions = os.path.join(data, "sessions")
        return os.path.join(sessions, session, f"{session}.compaction.json")

    # -- answers ---------------------------------------------------------------------
    def allow(self, kind: Kind, event_name: str, context: str | None) -> dict[str, Any]:
        return {"contextModification": context} if context else {}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        # Cline has no "skip this call": cancel ends the run before the call runs.
        return {"cancel": True, "errorMessage": reason}

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        return {"cancel": True, "errorMessage": reason}

    def probe_event(self, session: str) -> dict[str, Any]:
        """A harmless ``tool_call`` as Cline sends it (``loopwarden doctor``)."""
        return {
            "hookName": "tool_call",
            "taskId": f"doctor-{session}",
            "sessionContext": {"rootSessionId": session},
            "agent_id": "doctor",
            "tool_call": {"id": "doctor-1", "name": "loopwarden_doctor", "input": {}},
        }
