"""``loopwarden hook claude-code`` as a real subprocess, with Claude Code's event shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loopwarden.hooks.options import HOOK_DEFAULT_CONFIG
from tests.hooks import payloads as p
from tests.hooks.conftest import SMALL, Hook


def script(hook: Hook, daemon: bool, **kw: Any) -> list[Any]:
    """Five identical Bash polls that keep printing "pending"; what the agent gets back
    (PreToolUse, then the PostToolBatch of the call, as Claude Code 2.1.332 sends them)."""
    answers: list[Any] = []
    for n in range(1, 6):
        pre = hook(p.claude_pre(n, **kw), daemon=daemon)
        assert pre.code == 0, pre.stderr
        answers.append(pre.json)
        if "continue" in pre.json:
            break  # the turn has ended: no batch, no later call
        response = "pending"
        if "hookSpecificOutput" in pre.json:  # denied: the model gets the reason as an error
            reason = pre.json["hookSpecificOutput"]["permissionDecisionReason"]
            response = f"PreToolUse:Bash hook error: {reason}"
        batch_kw = {k: v for k, v in kw.items() if k in ("session", "prompt", "command")}
        post = hook(p.claude_batch([(n, "Bash", response)], **batch_kw), daemon=daemon)
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
    assert warn["hookEventName"] == "PostToolBatch"
    assert "WARNING" in warn["additionalContext"] and "Bash" in warn["additionalContext"]
    deny = answers[6]["hookSpecificOutput"]  # call 4 is blocked
    assert deny["hookEventName"] == "PreToolUse"
    assert deny["permissionDecision"] == "deny"
    assert "blocked" in deny["permissionDecisionReason"]
    assert "continue" not in answers[6]
    assert answers[7] == {}  # the denied call's batch: nothing more to say
    stop = answers[8]  # call 5 trips the circuit breaker: the turn ends
    assert stop["continue"] is False
    assert "circuit breaker" in stop["stopReason"]
    assert stop["systemMessage"] == stop["stopReason"]  # shown in stream-json output
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert len(answers) == 9

    state = hook.state("1ec9a2f4-sess", "prompt-1")
    assert state.stopped is not None and state.stopped.code == "global_circuit_breaker"
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
        hook(p.claude_batch([(n, "Bash", "pending")]))
    assert hook(p.claude_pre(4)).json["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The user's next prompt starts afresh; a subagent has a loop of its own.
    assert hook(p.claude_pre(5, prompt="prompt-2")).json == {}
    sub = p.claude_pre(6)
    sub["agent_id"] = "agent-7"
    assert hook(sub).json == {}
    assert hook.state("1ec9a2f4-sess", "prompt-1/agent-7") is not None


@pytest.mark.usefixtures("small_config")
def test_failed_commands_in_a_batch_are_error_outcomes(hook_env: dict[str, str]) -> None:
    """A failed Bash call ("Exit code N" in the batch) is an error outcome and still warns."""
    hook = Hook(hook_env, "claude-code")
    error = "Exit code 2\nls: cannot access '/nope': No such file or directory"
    answers = []
    for n in range(1, 4):
        assert hook(p.claude_pre(n, command="ls /nope")).json == {}
        answers.append(hook(p.claude_batch([(n, "Bash", error)], command="ls /nope")).json)
    assert answers[:2] == [{}, {}]
    assert "WARNING" in answers[2]["hookSpecificOutput"]["additionalContext"]
    records = list(hook.state("1ec9a2f4-sess", "prompt-1").window)
    assert all(r.result_hash.startswith("error:") for r in records)


@pytest.mark.usefixtures("small_config")
def test_failures_are_error_outcomes(hook_env: dict[str, str]) -> None:
    """PostToolUseFailure events (hooked by older installs) are error outcomes and warn."""
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


def compacted_then_looping(hook: Hook, prompt: str) -> list[Any]:
    """Varied calls, a compaction (SessionStart source compact), then the same call
    three times in ``prompt``; the batch answers of those three."""
    for n, command in enumerate(["ls", "pwd", "date"], start=1):
        hook(p.claude_pre(n, command=command))
        hook(p.claude_batch([(n, "Bash", command)], command=command))
    assert hook(p.claude_session_start("compact")).json == {}
    posts = []
    for n in range(4, 7):
        hook(p.claude_pre(n, command="cat log", prompt=prompt))
        posts.append(
            hook(p.claude_batch([(n, "Bash", "same")], command="cat log", prompt=prompt)).json
        )
    return posts


@pytest.mark.usefixtures("small_config")
def test_compaction_arms_the_guard(hook_env: dict[str, str]) -> None:
    """SessionStart after a compaction arms the post-compaction guard of the run."""
    hook = Hook(hook_env, "claude-code")
    posts = compacted_then_looping(hook, "prompt-1")
    assert posts[0] == {} and posts[1].get("continue") is not False
    assert posts[2]["continue"] is False
    assert "compaction" in posts[2]["stopReason"]


@pytest.mark.usefixtures("small_config")
def test_compact_then_a_new_prompt_is_guarded(hook_env: dict[str, str]) -> None:
    """/compact is a prompt of its own: the compaction arms the session's next run."""
    hook = Hook(hook_env, "claude-code")
    posts = compacted_then_looping(hook, "prompt-2")
    assert posts[2]["continue"] is False and "compaction" in posts[2]["stopReason"]
    assert hook.state("1ec9a2f4-sess", "prompt-2").stopped is not None


@pytest.mark.usefixtures("small_config")
def test_pre_compact_does_not_arm(hook_env: dict[str, str]) -> None:
    """PreCompact (hooked by older installs) is not an arming event any more."""
    hook = Hook(hook_env, "claude-code")
    hook(p.claude_pre(1))
    assert hook(p.claude_pre_compact()).json == {}
    assert not hook.state("1ec9a2f4-sess", "prompt-1").guard.armed


def test_session_start_without_compaction_does_nothing(hook_env: dict[str, str]) -> None:
    """A SessionStart that is not after a compaction opens no state at all."""
    hook = Hook(hook_env, "claude-code")
    assert hook(p.claude_session_start("startup")).json == {}
    assert not hook.state_db.exists()  # nothing to do, nothing opened


@pytest.mark.usefixtures("small_config")
def test_missing_tools_in_batches(hook_env: dict[str, str]) -> None:
    """Calls of a missing tool come in PostToolBatch events: past the unknown-tool
    threshold each gets a note naming the tool as the model wrote it, and at the circuit
    breaker the turn ends."""
    hook = Hook(hook_env, "claude-code")
    answers = [hook(p.claude_miss(n)).json for n in range(1, 6)]
    assert answers[:2] == [{}, {}]  # unknownToolThreshold 2
    for count, answer in zip((3, 4), answers[2:4], strict=True):
        note = answer["hookSpecificOutput"]["additionalContext"]
        assert f"no tool named 'NoSuchTool' here, and it has been called {count} times" in note
        assert "blocked this call" not in note
    stop = answers[4]
    assert stop["continue"] is False and "hookSpecificOutput" not in stop
    assert "there is no tool named 'NoSuchTool' here" in stop["stopReason"]
    assert "5 times in a row" in stop["stopReason"]
    records = list(hook.state("1ec9a2f4-sess", "prompt-1").window)
    assert [r.tool_name for r in records] == ["NoSuchTool"] * 5
    assert records[0].unknown_tool_name == "nosuchtool"
    # After the stop the run stays stopped: a real call is refused the same way.
    again = hook(p.claude_pre(6)).json
    assert again["continue"] is False
    # The same rule's text; the summary below it counts the refused call too.
    assert again["stopReason"].split("\n\n")[0] == stop["stopReason"].split("\n\n")[0]
    assert "4 of its 6 tool calls were not run" in again["stopReason"]


@pytest.mark.usefixtures("small_config")
def test_session_end_reports_a_stop_once(hook_env: dict[str, str]) -> None:
    """After a stop, the SessionEnd hook exits 1 with the reason (Claude Code prints a
    failing SessionEnd hook's stderr, also in text mode); only once."""
    hook = Hook(hook_env, "claude-code")
    answers = script(hook, daemon=True)
    reason = answers[-1]["stopReason"]
    end = hook(p.claude_session_end())
    assert end.code == 1 and end.stderr == f"{reason}\n" and end.json == {}
    again = hook(p.claude_session_end())
    assert again.code == 0 and again.stderr == ""
    quiet = hook(p.claude_session_end(session="no-stop-here"))
    assert quiet.code == 0 and quiet.json == {}


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
        hook(p.claude_batch([(n, "Bash", "pending")]), cwd=project)
    lines = [orjson.loads(line) for line in (project / "runs.jsonl").read_bytes().splitlines()]
    assert [x["type"] for x in lines].count("call") == 4
    assert any(x["type"] == "event" and x["action"] == "block" for x in lines)
    log = (hook.state_db.parent / "hook.log").read_text()
    assert "loopwarden block: tool=Bash" in log and "session=1ec9a2f4-sess" in log


@pytest.mark.parametrize("before", range(8))
def test_a_loop_through_a_compaction_ends_with_the_seed_abort(
    hook_env: dict[str, str], before: int
) -> None:
    """The hook's defaults (every rule on): identical calls, a compaction after ``before`` of
    them, more of the same; the turn ends with the post-compaction abort, never with another
    rule's stop (the library sweep in tests/core/test_precedence.py has the call numbers)."""
    hook = Hook(hook_env, "claude-code")
    session = f"sweep-{before}"
    ended: dict[str, Any] | None = None
    for n in range(1, 21):
        if n == before + 1:
            assert hook(p.claude_session_start("compact", session=session)).json == {}
        pre = hook(p.claude_pre(n, command="cat log", session=session)).json
        if pre.get("continue") is False:
            ended = pre
            break
        post = hook(p.claude_batch([(n, "Bash", "same")], command="cat log", session=session))
        if post.json.get("continue") is False:
            ended = post.json
            break
    assert ended is not None, "the loop was never ended"
    assert "compaction" in ended["stopReason"], ended["stopReason"]
    state = hook.state(session, "prompt-1", config=dict(HOOK_DEFAULT_CONFIG))
    assert state.stopped is not None and state.stopped.code == "compaction_loop_persisted"
