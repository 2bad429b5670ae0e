"""``loopwarden hook claude-code`` as a real subprocess, with Claude Code's event shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.hooks import payloads as p
from tests.hooks.conftest import SMALL, Hook


def script(hook: Hook, daemon: bool, **kw: Any) -> list[Any]:
    """Five identical Bash polls that keep printing "pending"; what the agent gets back."""
    answers: list[Any] = []
    for n in range(1, 6):
        pre = hook(p.claude_pre(n, **kw), daemon=daemon)
        assert pre.code == 0, pre.stderr
        answers.append(pre.json)
        if "hookSpecificOutput" in pre.json or "continue" in pre.json:
            continue  # denied: Claude Code runs no tool and sends no PostToolUse
        post = hook(p.claude_post(n, **kw), daemon=daemon)
        assert post.code == 0, post.stderr
        answers.append(post.json)
    return answers


@pytest.mark.usefixtures("small_config")
def test_warn_block_stop(hook_env: dict[str, str]) -> None:
    """A looping Claude Code session is warned on a result, then denied, then its turn is ended."""
    hook = Hook(hook_env, "claude-code")
    answers = script(hook, daemon=True)
    assert answers[:5] == [{}, {}, {}, {}, {}]  # calls 1-2 and call 3's check
    warn = answers[5]["hookSpecificOutput"]  # call 3's result gets the warning
    assert warn["hookEventName"] == "PostToolUse"
    assert "WARNING" in warn["additionalContext"] and "Bash" in warn["additionalContext"]
    deny = answers[6]["hookSpecificOutput"]  # call 4 is blocked
    assert deny["hookEventName"] == "PreToolUse"
    assert deny["permissionDecision"] == "deny"
    assert "blocked" in deny["permissionDecisionReason"]
    assert "continue" not in answers[6]
    stop = answers[7]  # call 5 trips the circuit breaker: the turn ends
    assert stop["continue"] is False
    assert "circuit breaker" in stop["stopReason"]
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert len(answers) == 8

    state = hook.state("1ec9a2f4-sess", "prompt-1")
    assert state.stopped is not None and state.stopped.detector == "global_circuit_breaker"
    records = list(state.window)
    assert [r.call_id for r in records] == [f"toolu_{n:04d}" for n in range(1, 6)]
    assert [r.veto for r in records] == [False, False, False, True, True]
    assert len({r.result_hash for r in records}) == 1  # vetoes repeat the stuck outcome

    again = hook(p.claude_pre(6))  # a stopped run stays stopped
    assert again.json["continue"] is False


@pytest.mark.usefixtures("small_config")
def test_helper_and_in_process_leave_the_same_state(hook_env: dict[str, str]) -> None:
    """Events handled in the hook process itself: the same answers and the same state."""
    hook = Hook(hook_env, "claude-code")
    via_helper = script(hook, True, session="s-helper")
    in_process = script(hook, False, session="s-local")
    assert via_helper == in_process

    def comparable(session: str) -> Any:
        state = hook.state(session, "prompt-1")
        return (
            [(r.tool_name, r.args_hash, r.call_id, r.result_hash, r.veto) for r in state.window],
            state.stopped,
            state.buckets,
        )

    assert comparable("s-helper") == comparable("s-local")


@pytest.mark.usefixtures("small_config")
def test_each_prompt_is_a_run(hook_env: dict[str, str]) -> None:
    """Each user prompt is a run of its own, and a subagent's calls are another run."""
    hook = Hook(hook_env, "claude-code")
    for n in range(1, 4):
        hook(p.claude_pre(n))
        hook(p.claude_post(n))
    assert hook(p.claude_pre(4)).json["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The user's next prompt starts afresh; a subagent has a loop of its own.
    assert hook(p.claude_pre(5, prompt="prompt-2")).json == {}
    sub = p.claude_pre(6)
    sub["agent_id"] = "agent-7"
    assert hook(sub).json == {}
    assert hook.state("1ec9a2f4-sess", "prompt-1/agent-7") is not None


@pytest.mark.usefixtures("small_config")
def test_failures_are_error_outcomes(hook_env: dict[str, str]) -> None:
    """PostToolUseFailure events are recorded as error outcomes and still warn on repeats."""
    hook = Hook(hook_env, "claude-code")
    error = "Exit code 2\nls: cannot access '/nope': No such file or directory"
    answers = []
    for n in range(1, 4):
        assert hook(p.claude_pre(n, command="ls /nope")).json == {}
        answers.append(hook(p.claude_failure(n, error, command="ls /nope")).json)
    assert answers[:2] == [{}, {}]
    assert answers[2]["hookSpecificOutput"]["hookEventName"] == "PostToolUseFailure"
    assert "WARNING" in answers[2]["hookSpecificOutput"]["additionalContext"]
    records = list(hook.state("1ec9a2f4-sess", "prompt-1").window)
    assert all(r.result_hash.startswith("error:") for r in records)


@pytest.mark.usefixtures("small_config")
@pytest.mark.parametrize("arm", ["PreCompact", "SessionStart"])
def test_compaction_arms_the_guard(hook_env: dict[str, str], arm: str) -> None:
    """PreCompact or SessionStart after compaction arms the post-compaction guard for the run."""
    hook = Hook(hook_env, "claude-code")
    # Varied calls first, so that the detectors alone would not stop the run.
    for n, command in enumerate(["ls", "pwd", "date"], start=1):
        hook(p.claude_pre(n, command=command))
        hook(p.claude_post(n, {"stdout": command}, command=command))
    event = p.claude_pre_compact() if arm == "PreCompact" else p.claude_session_start("compact")
    assert hook(event).json == {}
    state = hook.state("1ec9a2f4-sess", "prompt-1")
    assert state.guard.armed and state.guard.remaining_attempts == 3

    posts = []
    for n in range(4, 7):
        hook(p.claude_pre(n, command="cat log"))
        posts.append(hook(p.claude_post(n, {"stdout": "same"}, command="cat log")).json)
    assert posts[0] == {} and posts[1].get("continue") is not False
    assert posts[2]["continue"] is False
    assert "compaction" in posts[2]["stopReason"]
    assert "compaction" in posts[2]["hookSpecificOutput"]["additionalContext"]


def test_session_start_without_compaction_does_nothing(hook_env: dict[str, str]) -> None:
    """A SessionStart that is not after a compaction opens no state at all."""
    hook = Hook(hook_env, "claude-code")
    assert hook(p.claude_session_start("startup")).json == {}
    assert not hook.state_db.exists()  # nothing to do, nothing opened


def transcript_lines(names: list[str], start: int, prompt: str = "prompt-1") -> bytes:
    """Claude Code transcript records: a call of a missing tool and its error result."""
    out = b""
    for offset, name in enumerate(names):
        tid = f"toolu_9{start + offset:03d}"
        call = {
            "type": "assistant",
            "promptId": prompt,
            "message": {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tid, "name": name, "input": {"q": 1}}],
            },
        }
        result = {
            "type": "user",
            "promptId": prompt,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tid,
                        "is_error": True,
                        "content": f"<tool_use_error>Error: No such tool available: {name}"
                        "</tool_use_error>",
                    }
                ],
            },
            "toolUseResult": f"Error: No such tool available: {name}",
        }
        out += orjson.dumps(call) + b"\n" + orjson.dumps(result) + b"\n"
    return out


@pytest.mark.usefixtures("small_config")
def test_unknown_tools_are_read_from_the_transcript(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """Calls of missing tools fire no hook; the transcript is the only trace of them."""
    hook = Hook(hook_env, "claude-code")
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(
        b'{"type":"summary","summary":"x"}\n'
        + transcript_lines(["NoSuchTool"] * 3, 0)
        + b'{"type":"assistant","message":{"role":"assis'  # still being written
    )
    first = hook(p.claude_pre(1, transcript=str(transcript)))
    context = first.json["hookSpecificOutput"]
    assert "permissionDecision" not in context  # the real call itself is fine
    assert context["hookEventName"] == "PreToolUse"
    assert "nosuchtool" in context["additionalContext"].lower()
    assert "not available" in context["additionalContext"]
    # The partial line is completed; nothing new about missing tools: no repeated
    # note, nothing counted twice.
    with transcript.open("ab") as fh:
        fh.write(b'tant","content":[{"type":"text","text":"ok"}]}}\n')
    second = hook(p.claude_pre(2, command="ls", transcript=str(transcript)))
    assert second.json == {}
    records = list(hook.state("1ec9a2f4-sess", "prompt-1").window)
    unknown = [r for r in records if r.tool_name == "NoSuchTool"]
    assert [r.call_id for r in unknown] == ["toolu_9000", "toolu_9001", "toolu_9002"]
    assert unknown[0].unknown_tool_name == "nosuchtool"
    assert [r.veto for r in unknown] == [False, False, True]  # blocked as a hook would have
    assert [r.tool_name for r in records[3:]] == ["Bash", "Bash"]


def test_other_prompts_in_the_transcript_are_not_counted(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """Unknown-tool calls of another prompt in the transcript do not count for this run."""
    hook = Hook(hook_env, "claude-code")
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(transcript_lines(["Ghost"] * 3, 0, prompt="older-prompt"))
    assert hook(p.claude_pre(1, transcript=str(transcript))).json == {}
    records = list(hook.state("1ec9a2f4-sess", "prompt-1", config={}).window)
    assert [r.tool_name for r in records] == ["Bash"]


def test_run_record_and_log(hook_env: dict[str, str], tmp_path: Path) -> None:
    """Events are logged to the hook log; a config's runRecord gets the calls.

    A relative runRecord is relative to the agent's working directory, also when
    the helper (which runs in /) handles the event.
    """
    project = tmp_path / "project"
    project.mkdir()
    config = tmp_path / "lw.json"
    config.write_bytes(orjson.dumps({**SMALL, "loopwarden": {"runRecord": "runs.jsonl"}}))
    hook = Hook(hook_env, "claude-code", "--config", str(config))
    for n in range(1, 5):
        hook(p.claude_pre(n), cwd=project, daemon=n != 2)
        hook(p.claude_post(n), cwd=project)
    lines = [orjson.loads(line) for line in (project / "runs.jsonl").read_bytes().splitlines()]
    assert [x["type"] for x in lines].count("call") == 4
    assert any(x["type"] == "event" and x["action"] == "block" for x in lines)
    log = (hook.state_db.parent / "hook.log").read_text()
    assert "loopwarden block: tool=Bash" in log and "session=1ec9a2f4-sess" in log
