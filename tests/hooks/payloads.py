"""Hook events with the fields the real CLIs send (shared/notes/integrations.md, section 2).

Claude Code 2.1.332 and Codex CLI 0.169.0 were captured from the real CLIs;
Gemini CLI follows its hooks reference.
"""

from __future__ import annotations

from typing import Any

BASH_OUTPUT = {
    "stdout": "pending",
    "stderr": "",
    "interrupted": False,
    "isImage": False,
    "noOutputExpected": False,
}


def claude_pre(
    n: int,
    *,
    session: str = "1ec9a2f4-sess",
    prompt: str = "prompt-1",
    command: str = "echo pending",
    tool: str = "Bash",
    transcript: str = "",
) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": "/work/project",
        "prompt_id": prompt,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": command, "description": "poll job 42"},
        "tool_use_id": f"toolu_{n:04d}",
    }


def claude_post(n: int, response: Any = None, **kw: Any) -> dict[str, Any]:
    event = claude_pre(n, **kw)
    event["hook_event_name"] = "PostToolUse"
    event["tool_response"] = dict(BASH_OUTPUT) if response is None else response
    event["duration_ms"] = 11 + n
    return event


def claude_failure(n: int, error: str, **kw: Any) -> dict[str, Any]:
    event = claude_pre(n, **kw)
    event["hook_event_name"] = "PostToolUseFailure"
    event["error"] = error
    event["is_interrupt"] = False
    return event


def claude_pre_compact(
    *, session: str = "1ec9a2f4-sess", prompt: str = "prompt-1"
) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "",
        "cwd": "/work/project",
        "prompt_id": prompt,
        "hook_event_name": "PreCompact",
        "trigger": "auto",
        "custom_instructions": "",
    }


def claude_session_start(source: str, *, session: str = "1ec9a2f4-sess") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "",
        "cwd": "/work/project",
        "hook_event_name": "SessionStart",
        "source": source,
        "model": "claude-sonnet-4-5",
    }


def codex_pre(
    n: int, *, session: str = "019a-codex-sess", turn: str = "turn-1", transcript: str = ""
) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn_id": turn,
        "transcript_path": transcript,
        "cwd": "/work/project",
        "hook_event_name": "PreToolUse",
        "model": "gpt-5.1-codex",
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": "echo pending"},
        "tool_use_id": f"call_{n}",
    }


def codex_post(n: int, chunk: str, wall: str, **kw: Any) -> dict[str, Any]:
    event = codex_pre(n, **kw)
    event["hook_event_name"] = "PostToolUse"
    event["tool_response"] = (
        f"Chunk ID: {chunk}\nWall time: {wall} seconds\nProcess exited with code 0\n"
        "Original token count: 2\nOutput:\npending\n"
    )
    return event


def codex_compact(name: str, *, session: str = "019a-codex-sess", turn: str = "turn-1") -> Any:
    return {
        "session_id": session,
        "turn_id": turn,
        "transcript_path": "",
        "cwd": "/work/project",
        "hook_event_name": name,
        "model": "gpt-5.1-codex",
        "permission_mode": "default",
        "trigger": "auto",
    }


def gemini_event(name: str, *, session: str = "gem-sess-1", **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/home/u/.gemini/tmp/chats/session.json",
        "cwd": "/work/project",
        "hook_event_name": name,
        "timestamp": fields.pop("timestamp", "2026-11-29T18:00:00.000Z"),
        **fields,
    }


def gemini_before(command: str = "ls -la", **kw: Any) -> dict[str, Any]:
    return gemini_event(
        "BeforeTool", tool_name="run_shell_command", tool_input={"command": command}, **kw
    )


def gemini_after(
    command: str = "ls -la", output: str = "total 0", error: Any = None, **kw: Any
) -> dict[str, Any]:
    return gemini_event(
        "AfterTool",
        tool_name="run_shell_command",
        tool_input={"command": command},
        tool_response={"llmContent": output, "returnDisplay": output, "error": error},
        **kw,
    )
