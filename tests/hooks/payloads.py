"""Hook events with the fields the real CLIs send (shared/notes/integrations.md, section 2).

Claude Code 2.1.332, Codex CLI 0.171.0 and Gemini CLI 0.61.0 were captured from
the real CLIs (tests/e2e runs them).
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


def claude_base(
    name: str, *, session: str = "1ec9a2f4-sess", prompt: str = "prompt-1", transcript: str = ""
) -> dict[str, Any]:
    """The fields every Claude Code event of a prompt has."""
    return {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": "/work/project",
        "prompt_id": prompt,
        "permission_mode": "default",
        "hook_event_name": name,
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
        **claude_base("PreToolUse", session=session, prompt=prompt, transcript=transcript),
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


def claude_batch(
    calls: list[tuple[int, str, Any]],
    *,
    session: str = "1ec9a2f4-sess",
    prompt: str = "prompt-1",
    command: str = "echo pending",
) -> dict[str, Any]:
    """A PostToolBatch event: (call number, tool name, the text the model got) per call."""
    return {
        **claude_base("PostToolBatch", session=session, prompt=prompt),
        "tool_calls": [
            {
                "tool_name": tool,
                "tool_input": {"command": command, "description": "poll job 42"}
                if tool == "Bash"
                else {"job": 42},
                "tool_use_id": f"toolu_{n:04d}",
                "tool_response": response,
            }
            for n, tool, response in calls
        ],
    }


def claude_miss(n: int, name: str = "NoSuchTool", **kw: Any) -> dict[str, Any]:
    """The batch of one call of a tool that does not exist, as Claude Code 2.1.332 sends it."""
    error = f"<tool_use_error>Error: No such tool available: {name}</tool_use_error>"
    return claude_batch([(n, name, error)], **kw)


def claude_session_end(*, session: str = "1ec9a2f4-sess") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "",
        "cwd": "/work/project",
        "hook_event_name": "SessionEnd",
        "reason": "other",
    }


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
        "transcript_path": fields.pop("transcript", "/home/u/.gemini/tmp/x/chats/session.jsonl"),
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


def gemini_model(messages: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    """A BeforeModel event (Gemini sends the request's text messages only)."""
    texts = messages if messages is not None else ["<session_context>...", "Poll job 42."]
    request = {
        "model": "gemini-2.5-pro",
        "messages": [{"role": "user", "content": t} for t in texts],
        "config": {"temperature": 1},
    }
    return gemini_event("BeforeModel", llm_request=request, **kw)


def gemini_transcript_calls(
    calls: list[tuple[str, str, Any]], output: str = "pending"
) -> list[dict[str, Any]]:
    """Gemini session records: per call (id, name, error or None) a ``gemini`` record
    written twice (first without its tool calls) and the user record of its result."""
    lines: list[dict[str, Any]] = []
    for call_id, name, error in calls:
        message = {"id": f"m-{call_id}", "timestamp": "t", "type": "gemini", "content": ""}
        response = {"error": error} if error is not None else {"output": output}
        part = {"functionResponse": {"id": call_id, "name": name, "response": response}}
        tool_call = {
            "id": call_id,
            "name": name,
            "args": {"command": "poll"} if name == "run_shell_command" else {"job": 42},
            "result": [part],
            "status": "error" if error is not None else "success",
        }
        lines.append(message)
        lines.append({"$set": {"lastUpdated": "t"}})
        lines.append({**message, "toolCalls": [tool_call]})
        lines.append({"id": f"u-{call_id}", "timestamp": "t", "type": "user", "content": [part]})
    return lines
