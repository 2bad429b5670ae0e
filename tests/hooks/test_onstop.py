"""``loopwarden.onStop`` through the coding-agent hooks: real hook processes (and the
helper), with Claude Code's and Codex's event and transcript shapes (captured from
Claude Code 2.1.332 and Codex 0.171.0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.hooks import payloads as p
from tests.hooks.conftest import SMALL, Hook

SESSION = "1ec9a2f4-sess"
# Claude Code's tool result for a call refused at its prompt with a note ("Tab to amend").
REJECTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if "
    "it was a file edit, the new_string was NOT written to the file). To tell you how to "
    "proceed, the user said:\n"
)


def claude_transcript(path: Path, entrypoint: str, prompt: str = "prompt-1", turns: int = 5) -> str:
    """A Claude Code transcript: ``entrypoint`` on every line (``cli``: interactive,
    ``sdk-cli``: ``claude -p``), the prompt's user line, then ``turns`` assistant messages
    of 105 tokens each (each written twice, as Claude Code writes one line per block)."""
    base = {"entrypoint": entrypoint, "sessionId": SESSION, "userType": "external"}
    lines = [
        {**base, "type": "user", "promptId": "prompt-0", "message": {"role": "user"}},
        {**base, "type": "assistant", "message": {"id": "msg_old", "usage": {"input_tokens": 9}}},
        {**base, "type": "user", "promptId": prompt, "message": {"role": "user"}},
    ]
    usage = {"input_tokens": 100, "cache_read_input_tokens": 0, "output_tokens": 5}
    for n in range(turns):
        message = {"id": f"msg_{n:04d}", "role": "assistant", "usage": usage}
        lines += [{**base, "type": "assistant", "message": message}] * 2
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return str(path)


def write_config(env: dict[str, str], on_stop: str | None) -> None:
    config: dict[str, Any] = dict(SMALL)
    if on_stop is not None:
        config["loopwarden"] = {"onStop": on_stop}
    path = Path(env["HOME"]) / ".config" / "loopwarden" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(config))


def loop_to_stop(hook: Hook, transcript: str, first: int = 1) -> Any:
    """Identical Bash polls (each with its batch) until one is not simply allowed or
    denied: that answer (the stop, or the question)."""
    for n in range(first, first + 10):
        pre = hook(p.claude_pre(n, transcript=transcript)).json
        if "continue" in pre or pre.get("hookSpecificOutput", {}).get("permissionDecision") == (
            "ask"
        ):
            return n, pre
        response = "pending"
        if "hookSpecificOutput" in pre:
            reason = pre["hookSpecificOutput"]["permissionDecisionReason"]
            response = f"PreToolUse:Bash hook error: {reason}"
        hook(p.claude_batch([(n, "Bash", response)]))
    raise AssertionError("the loop was never stopped")


def batch(n: int, response: str, transcript: str) -> dict[str, Any]:
    event = p.claude_batch([(n, "Bash", response)])
    event["transcript_path"] = transcript
    return event


def test_claude_p_answer_shows_the_summary_with_tokens(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """In ``claude -p`` (transcript entrypoint ``sdk-cli``) the stop ends the turn and the
    person sees the rule's text and the summary; at SessionEnd with the run's tokens."""
    write_config(hook_env, None)
    transcript = claude_transcript(tmp_path / "t.jsonl", "sdk-cli")
    hook = Hook(hook_env, "claude-code")
    _, stop = loop_to_stop(hook, transcript)
    assert stop["continue"] is False
    rule, summary = stop["stopReason"].split("\n\n")
    assert "circuit breaker stopped this run" in rule
    assert summary.startswith("loopwarden stopped this run (rule global_circuit_breaker, tool Bash")
    assert "tokens" not in summary  # Claude Code's transcript is not all written yet
    assert stop["systemMessage"] == stop["stopReason"]
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
    claude_transcript(tmp_path / "t.jsonl", "sdk-cli", turns=7)  # written out by the end
    end = hook({**p.claude_session_end(), "transcript_path": transcript})
    # 7 turns of 105 tokens, the older prompt's not counted.
    assert end.code == 1 and end.stderr == f"{rule}\n\n{summary} It had used 735 tokens.\n"


def test_raise_keeps_the_rule_text_only(hook_env: dict[str, str], tmp_path: Path) -> None:
    """``onStop: raise`` answers a stop as before onStop: the rule's text, no summary."""
    write_config(hook_env, "raise")
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    _, stop = loop_to_stop(Hook(hook_env, "claude-code"), transcript)
    assert stop["continue"] is False and "\n\n" not in stop["stopReason"]
    assert stop["stopReason"].startswith("CRITICAL: the loopwarden global circuit breaker")


def test_interactive_session_asks_by_default(hook_env: dict[str, str], tmp_path: Path) -> None:
    """In an interactive session (entrypoint ``cli``) the stopped call is put to the person
    with ``permissionDecision: "ask"`` and the question; the turn is not ended."""
    write_config(hook_env, None)
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    hook = Hook(hook_env, "claude-code")
    _, asked = loop_to_stop(hook, transcript)
    out = asked["hookSpecificOutput"]
    assert set(asked) == {"hookSpecificOutput"}  # no continue: false
    assert out["permissionDecision"] == "ask"
    question = out["permissionDecisionReason"]
    assert question.startswith("loopwarden stopped this run (rule global_circuit_breaker)")
    assert question.endswith("continue with a note for the agent?")
    # Nothing is kept for SessionEnd: the person has seen the question.
    assert hook(p.claude_session_end()).code == 0


@pytest.mark.parametrize("daemon", [True, False])
def test_yes_lets_the_call_run_once(hook_env: dict[str, str], tmp_path: Path, daemon: bool) -> None:
    """ "Yes" at the prompt: the batch brings the call's result, the guard lifts the stop
    (allow_once) and records it; the next repeat is stopped (asked) again."""
    write_config(hook_env, "ask")
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    hook = Hook(hook_env, "claude-code")
    n, _ = loop_to_stop(hook, transcript)
    assert hook.state(SESSION, "prompt-1").stopped is not None
    after = hook(batch(n, "pending", transcript), daemon=daemon)
    assert after.code == 0, after.stderr
    state = hook.state(SESSION, "prompt-1")
    assert state.stopped is None
    assert [r.call_id for r in state.window][-1] == f"toolu_{n:04d}"  # its outcome recorded
    again = hook(p.claude_pre(n + 1, transcript=transcript), daemon=daemon).json
    assert again["hookSpecificOutput"]["permissionDecision"] == "ask"


def test_no_with_a_note_lets_the_run_go_on(hook_env: dict[str, str], tmp_path: Path) -> None:
    """ "No" with a note: the batch brings Claude Code's rejection with the note; the run
    goes on from a clean slate (continue) and the model is told the person's note."""
    write_config(hook_env, None)
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    hook = Hook(hook_env, "claude-code")
    n, _ = loop_to_stop(hook, transcript)
    answer = hook(batch(n, REJECTED + "read the status file instead", transcript)).json
    note = answer["hookSpecificOutput"]["additionalContext"]
    assert 'They said: "read the status file instead"' in note
    assert "do not repeat the call that was looping" in note
    state = hook.state(SESSION, "prompt-1")
    assert state.stopped is None and list(state.window) == []  # the refused call not recorded
    # The loop the model falls back into is caught again from the start.
    assert hook(p.claude_pre(n + 1, transcript=transcript)).json == {}


def test_no_or_escape_leaves_the_run_stopped(hook_env: dict[str, str], tmp_path: Path) -> None:
    """ "No" or Esc: Claude Code ends the turn without a batch; the run stays stopped, and
    the next prompt is a new run."""
    write_config(hook_env, None)
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    hook = Hook(hook_env, "claude-code")
    loop_to_stop(hook, transcript)
    assert hook.state(SESSION, "prompt-1").stopped is not None
    fresh = hook(p.claude_pre(40, prompt="prompt-2", transcript=transcript)).json
    assert fresh == {}
    assert hook.state(SESSION, "prompt-1").stopped is not None


def test_the_compaction_abort_is_never_asked(hook_env: dict[str, str], tmp_path: Path) -> None:
    """The post-compaction abort ends the turn even in an interactive session under ask."""
    write_config(hook_env, "ask")
    transcript = claude_transcript(tmp_path / "t.jsonl", "cli")
    hook = Hook(hook_env, "claude-code")
    hook(p.claude_pre(1, transcript=transcript))
    hook(p.claude_session_start("compact"))
    answers = []
    for n in range(2, 6):
        pre = hook(p.claude_pre(n, transcript=transcript)).json
        answers.append(pre)
        if "continue" in pre:
            break
        answers.append(hook(batch(n, "pending", transcript)).json)
    ended = answers[-1]
    assert ended["continue"] is False and "compaction" in ended["stopReason"]
    assert all(a.get("hookSpecificOutput", {}).get("permissionDecision") != "ask" for a in answers)


def test_codex_deny_carries_the_summary_with_the_turns_tokens(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    """Codex cannot ask (ask acts as answer): the stop's deny reason, which Codex shows,
    holds the summary with the tokens of the turn's ``token_count`` events."""
    write_config(hook_env, "ask")
    rollout = tmp_path / "rollout.jsonl"
    events = [
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "turn-0"}},
        {"type": "event_msg", "payload": {"type": "token_count", "info": None}},
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "turn-1"}},
    ]
    for _ in range(4):
        usage = {"input_tokens": 1000, "output_tokens": 20, "total_tokens": 1020}
        info = {"last_token_usage": usage, "total_token_usage": usage}
        events.append({"type": "event_msg", "payload": {"type": "token_count", "info": info}})
    rollout.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    hook = Hook(hook_env, "codex")
    for n in range(1, 10):
        pre = hook(p.codex_pre(n, transcript=str(rollout))).json
        reason = pre.get("hookSpecificOutput", {}).get("permissionDecisionReason", "")
        if "stopped this run" in reason:
            break
        hook(p.codex_post(n, "c", "0.001", transcript=str(rollout)))
    else:
        raise AssertionError("the loop was never stopped")
    assert pre["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "loopwarden stopped this run (rule " in reason
    assert "It had used 4,080 tokens." in reason


def test_gemini_tokens_are_the_prompts_answers(tmp_path: Path) -> None:
    """Gemini's session file: each answer's ``tokens`` count once (a record written again
    as its calls complete), results of calls do not start a run, a prompt does."""
    from loopwarden.hooks.onstop import gemini_facts

    tokens = {"input": 95, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 100}
    records: list[dict[str, Any]] = [
        {"id": "u0", "type": "user", "content": [{"text": "an older prompt"}]},
        {"id": "g0", "type": "gemini", "tokens": {**tokens, "input": 995}},
        {"id": "u1", "type": "user", "content": [{"text": "Poll job 42 until it is done."}]},
        {"$set": {"messages": []}},
    ]
    for n in range(3):
        answer = {"id": f"g{n + 1}", "type": "gemini", "content": "", "tokens": tokens}
        result = {"functionResponse": {"id": f"call_{n}", "name": "run_shell_command"}}
        records += [answer, {**answer, "toolCalls": []}]
        records.append({"id": f"r{n}", "type": "user", "content": [result]})
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    facts = gemini_facts(str(path))
    assert (facts.person, facts.tokens, facts.turns) == (False, 300, 3)
