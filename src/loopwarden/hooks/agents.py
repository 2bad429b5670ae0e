"""What each coding agent sends to a hook and what it expects back.

Claude Code and Codex CLI share one vocabulary (``hookSpecificOutput`` with
``permissionDecision``, ``additionalContext``; ``continue``/``stopReason``);
Gemini CLI uses its own event names and a top-level ``decision``/``reason``.
Denials always use the JSON answer with exit code 0: exit code 2 would show
the hook's command line to the model.

Each adapter answers only with what its CLI accepts (observed with the real
CLIs, see docs/hooks.md): Codex treats ``continue: false`` on ``PreToolUse`` as
a failed hook and runs the call, so a Codex stop is a deny of that call and of
every later call of the turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._util import guard_text
from ._protocol import AGENTS

__all__ = [
    "ADAPTERS",
    "Adapter",
    "BatchEntry",
    "Call",
    "HandlerKind",
    "Kind",
    "answered_calls",
    "scrub_gemini_shell",
]

Kind = Literal["pre", "post", "failure", "batch", "model", "compact", "prompt", "turn", "end"]
"""What an event means for the guard: check a call (``pre``), record an outcome
(``post``; ``failure`` for a failed call; ``batch`` for every call of a batch),
look at the conversation before a model request (``model``), arm the
post-compaction guard (``compact``), a new user prompt (``prompt``), the agent
going on with a turn (``turn``: end it when its run was stopped), or the end of
the session (``end``)."""


HandlerKind = Literal["command", "serve", "http"]
"""How ``install`` hooks an event: the hook ``command``; the command that also makes sure
the helper answers HTTP hooks (``serve``: ``--http-port``); or an ``http`` hook."""


@dataclass(frozen=True)
class Call:
    """The tool call an event is about."""

    tool: str
    params: Any
    call_id: str | None


@dataclass(frozen=True)
class BatchEntry:
    """One call of a batch event: its outcome, or the agent's "no such tool" answer."""

    call: Call
    outcome: dict[str, Any]
    missing: bool


def _text(value: Any) -> str | None:
    """A name or id of the event (session, run, tool), as the guard keeps it: valid
    UTF-8 and bounded (``_util.guard_text``), so side records and the store see the
    same text as the guard."""
    if isinstance(value, str) and value.strip():
        return guard_text(value.strip())
    return None


def _call_id(value: Any) -> str | None:
    return guard_text(str(value)) if isinstance(value, (str, int)) and str(value) else None


class Adapter:
    """Claude Code's event names and answers (Codex and Gemini adjust them)."""

    name = "claude-code"
    transcript: Literal["codex", "gemini"] | None = None
    """Where unknown-tool calls are read from, if no event reports them (Claude: the batch)."""
    events: Mapping[str, Kind] = {
        "PreToolUse": "pre",
        "PostToolBatch": "batch",
        # Not installed any more (PostToolBatch sees every call), still understood.
        "PostToolUse": "post",
        "PostToolUseFailure": "failure",
        "SessionEnd": "end",
    }
    # (event, matcher) pairs that ``loopwarden install`` registers; None = no matcher key.
    # No PreCompact: Claude Code shows every PreCompact command line to the model
    # after /compact; SessionStart with source "compact" comes after every compaction.
    install_events: tuple[tuple[str, str | None], ...] = (
        ("PreToolUse", ""),
        ("PostToolBatch", None),
        ("SessionStart", "compact"),
        ("SessionEnd", None),
    )
    # With HTTP hooks (``install --http``): the tool-call events are HTTP hooks, answered
    # by the helper without a process. Claude Code runs no HTTP hook at SessionStart; the
    # command there (and at each prompt) makes sure the helper answers, and SessionEnd
    # stays a command: a failing command's stderr is what `claude -p` shows the user.
    http_install_events: tuple[tuple[str, str | None, HandlerKind], ...] = (
        ("PreToolUse", "", "http"),
        ("PostToolBatch", None, "http"),
        ("SessionStart", None, "serve"),
        ("UserPromptSubmit", None, "serve"),
        ("SessionEnd", None, "command"),
    )
    timeout: int = 30
    """Hook timeout written by ``install``, in the agent's unit (seconds here)."""
    title = "Claude Code"
    can_ask = True
    """The CLI puts a call to the person when a hook answers :meth:`ask` (``onStop: ask``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "http_install_events" not in cls.__dict__:
            cls.http_install_events = ()  # HTTP hooks are Claude Code's: none unless declared
        if "can_ask" not in cls.__dict__:
            cls.can_ask = (
                False  # a permission prompt for hooks is Claude Code's: none unless declared
            )

    # -- settings files (``install``/``doctor``); None: the shared layout in hooks.settings
    def settings_file(
        self, scope: str, home: Path, env: Mapping[str, str], project: Path
    ) -> Path | None:
        """Where ``install`` writes for ``scope``; None: :func:`hooks.settings.settings_path`."""
        return None

    def hook_entry(self, event: str, matcher: str | None, command: str) -> dict[str, Any] | None:
        """The entry ``install`` adds under ``event``; None: the shared group shape."""
        return None

    fresh_settings: Mapping[str, Any] = {}
    """Members of a settings file that ``install`` creates, before ``hooks``."""

    def normalize(self, event: dict[str, Any], event_name: str | None) -> dict[str, Any]:
        """The event in the field names the runner reads (``event_name``: from ``--event``)."""
        return event

    def probe_event(self, session: str) -> dict[str, Any] | None:
        """The harmless pre-call event ``doctor`` sends; None: the Claude-shaped default."""
        return None

    def event_name(self, event: Mapping[str, Any]) -> str | None:
        """The event's name, as the answer and the log call it."""
        name = event.get("hook_event_name")
        return name if isinstance(name, str) else None

    def session_id(self, event: Mapping[str, Any]) -> str | None:
        """The session the event belongs to (every guard state is keyed by it)."""
        return _text(event.get("session_id"))

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
        return Call(tool, event.get("tool_input", {}), _call_id(event.get("tool_use_id")))

    def outcome(self, kind: Kind, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{"result": ...}`` or ``{"error": ...}`` for ``after_call``; None if absent."""
        if kind == "failure":
            error = event.get("error")
            return {"error": error if error not in (None, "") else "tool call failed"}
        if "tool_response" not in event:
            return None
        return {"result": event["tool_response"]}

    def batch(self, event: Mapping[str, Any]) -> list[BatchEntry]:
        """The calls of a ``PostToolBatch`` event (each with the text the model got)."""
        found: list[BatchEntry] = []
        for item, call in answered_calls(self, event):
            response = item["tool_response"]
            text = response if isinstance(response, str) else None
            error = _claude_error(text) if text is not None else None
            if error is None:
                found.append(BatchEntry(call, {"result": response}, False))
            else:
                missing = _CLAUDE_MISSING.search(error) is not None
                found.append(BatchEntry(call, {"error": error}, missing))
        return found

    # -- answers -----------------------------------------------------------
    def allow(self, kind: Kind, event_name: str, context: str | None) -> dict[str, Any]:
        if not context or kind not in ("pre", "post", "failure", "batch"):
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
        """End the agent's turn; a pending call is denied too.

        ``claude -p`` shows ``stopReason`` nowhere (an interactive session shows it);
        ``systemMessage`` reaches the user in stream-json output and in an interactive
        session (text mode: see the SessionEnd report)."""
        answer: dict[str, Any] = {"continue": False, "stopReason": reason, "systemMessage": reason}
        if kind == "pre":
            answer.update(self.deny(event_name, reason))
        return answer

    def ask(self, event_name: str, question: str) -> dict[str, Any]:
        """Put the call to the person (where :attr:`can_ask`): the CLI's permission prompt."""
        return {
            "hookSpecificOutput": {
                "hookEventName": event_name,
                "permissionDecision": "ask",
                "permissionDecisionReason": question,
            }
        }

    def model_note(self, event: Mapping[str, Any], note: str) -> dict[str, Any]:
        """Show ``note`` to the model with its next request (only where a CLI allows it)."""
        return {}

    def compaction_file(self, event: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
        """A file the agent rewrites at each compaction, where no event says so (Cline)."""
        return None


# What Claude Code answers the model for a call it could not make, as the
# PostToolBatch event reports it ("<tool_use_error>Error: ...</tool_use_error>"),
# and for a failed shell command ("Exit code N\n...").
_CLAUDE_TOOL_ERROR = re.compile(r"^\s*<tool_use_error>(.*)</tool_use_error>\s*$", re.DOTALL)
_CLAUDE_EXIT = re.compile(r"^Exit code \d+\b")
_CLAUDE_MISSING = re.compile(r"No such tool available:")


def _claude_error(text: str) -> str | None:
    match = _CLAUDE_TOOL_ERROR.match(text)
    if match is not None:
        return match.group(1).strip()
    return text if _CLAUDE_EXIT.match(text) else None


_CODEX_STOP = (
    "No tool call will run again in this turn: stop calling tools and tell the user what happened."
)


class CodexAdapter(Adapter):
    """Codex CLI: Claude Code's vocabulary; ``turn_id`` is the run, compaction has a
    post event, and shell calls arrive as ``Bash`` with a string result."""

    name = "codex"
    title = "Codex CLI"
    transcript = "codex"
    events: Mapping[str, Kind] = {
        "PreToolUse": "pre",
        "PostToolUse": "post",
        "PostToolUseFailure": "failure",
        "PreCompact": "compact",  # installed by older loopwarden versions
        "PostCompact": "compact",
    }
    install_events = (
        ("PreToolUse", ""),
        ("PostToolUse", ""),
        ("PostCompact", ""),
    )

    def run_id(self, event: Mapping[str, Any]) -> str | None:
        return _text(event.get("turn_id"))

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        # Codex shows "Command blocked by PreToolUse hook: <reason>. Command: ...".
        return super().deny(event_name, reason.rstrip().removesuffix("."))

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        """Codex ends no turn for a hook: on ``PreToolUse`` only a deny is accepted
        (``continue: false`` there fails the hook and the call runs). After a call,
        ``continue: false`` replaces the call's output with the reason."""
        # The model is not stopped, so it is told to stop: this is the one turn it has.
        reason = f"{reason} {_CODEX_STOP}"
        if kind == "pre":
            return self.deny(event_name, reason)
        return {"continue": False, "stopReason": reason}


# Gemini CLI's run_shell_command result: the process group id and the ids of
# background processes are new on every run of the same command.
_GEMINI_SHELL_VOLATILE = (
    (re.compile(r"Process Group PGID: \d+"), "Process Group PGID: #"),
    (re.compile(r"Background PIDs: \d+(?:, \d+)*"), "Background PIDs: #"),
    (re.compile(r"\(PID: \d+\)"), "(PID: #)"),
)


def answered_calls(
    adapter: Adapter, event: Mapping[str, Any]
) -> Iterator[tuple[Mapping[str, Any], Call]]:
    """The items of a batch event's ``tool_calls`` that are calls and carry a
    ``tool_response``, each with its call (malformed items are skipped)."""
    calls = event.get("tool_calls")
    if not isinstance(calls, list):
        return
    for item in calls:
        if not isinstance(item, Mapping):
            continue
        call = adapter.call(item)
        if call is not None and "tool_response" in item:
            yield item, call


def scrub_gemini_shell(value: Any) -> Any:
    """``value`` (a shell result, any shape) without Gemini's per-run process ids."""
    if isinstance(value, str):
        for pattern, replacement in _GEMINI_SHELL_VOLATILE:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, list):
        return [scrub_gemini_shell(v) for v in value]
    if isinstance(value, Mapping):
        return {k: scrub_gemini_shell(v) for k, v in value.items()}
    return value


class GeminiAdapter(Adapter):
    """Gemini CLI: ``BeforeTool``/``AfterTool``, ``BeforeModel`` before every model
    request, ``BeforeAgent`` starts a run; no call ids; answers use a top-level
    ``decision``/``reason``."""

    name = "gemini"
    title = "Gemini CLI"
    transcript = "gemini"
    events: Mapping[str, Kind] = {
        "BeforeTool": "pre",
        "AfterTool": "post",  # installed by older loopwarden versions
        "BeforeModel": "model",
        "BeforeAgent": "prompt",
    }
    # BeforeModel comes before every model request and reads what the calls since
    # the last one returned from the session transcript (Gemini writes them there
    # before it sends them): no AfterTool hook, one process less per tool call.
    # Gemini 0.61 fires PreCompress (trigger "auto") before every model request,
    # whether or not it compresses: BeforeModel sees a real compression in the
    # transcript instead. Only /compress (trigger "manual") is hooked, through a
    # matcher, so the other PreCompress events start no process at all.
    install_events = (
        ("BeforeTool", None),
        ("BeforeModel", None),
        ("BeforeAgent", None),
        ("PreCompress", "manual"),
    )
    timeout = 30000  # Gemini's hook timeouts are milliseconds

    def kind(self, event: Mapping[str, Any]) -> Kind | None:
        name = event.get("hook_event_name")
        if name == "PreCompress":
            return "compact" if event.get("trigger") == "manual" else None
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
        if event.get("tool_name") == "run_shell_command":
            response = scrub_gemini_shell(response)
        return {"result": response}

    def deny(self, event_name: str, reason: str) -> dict[str, Any]:
        return {"decision": "deny", "reason": reason}

    def stop(self, kind: Kind, event_name: str, reason: str) -> dict[str, Any]:
        """``continue: false`` ends the run (before a tool: instead of it; before a
        model request: instead of the request); Gemini prints the reason on stderr."""
        answer: dict[str, Any] = {"continue": False, "stopReason": reason}
        if kind == "pre":
            answer.update(self.deny(event_name, reason))
        return answer

    def model_note(self, event: Mapping[str, Any], note: str) -> dict[str, Any]:
        """The request's text messages as they are, plus ``note`` as a last user message.

        Gemini merges the returned messages back into the request by position (tool
        calls and results are kept); the note is sent with this request only.
        """
        request = event.get("llm_request")
        messages = request.get("messages") if isinstance(request, Mapping) else None
        if not isinstance(messages, list):
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "BeforeModel",
                "llm_request": {"messages": [*messages, {"role": "user", "content": note}]},
            }
        }


class _Registry(Mapping[str, Adapter]):
    """The adapters by agent name, in the order of the one list of agents
    (hooks._protocol.AGENTS). The agents in modules of their own build on
    :class:`Adapter`, so they are imported at the first lookup: either module may
    be imported first. An agent without an adapter fails at that lookup."""

    def __init__(self) -> None:
        self._table: dict[str, Adapter] | None = None

    def _get(self) -> dict[str, Adapter]:
        if self._table is None:
            from .agents_cline import ClineAdapter
            from .agents_copilot import CopilotAdapter
            from .agents_opencode import OpenCodeAdapter
            from .agents_qwen import QwenAdapter

            classes = (
                *(Adapter, CodexAdapter, GeminiAdapter, OpenCodeAdapter, ClineAdapter),
                *(CopilotAdapter, QwenAdapter),
            )
            by_name = {cls.name: cls() for cls in classes}
            self._table = {name: by_name[name] for name in AGENTS}
        return self._table

    def __getitem__(self, name: str) -> Adapter:
        return self._get()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


ADAPTERS: Mapping[str, Adapter] = _Registry()
