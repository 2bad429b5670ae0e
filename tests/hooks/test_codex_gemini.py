"""``loopwarden hook codex`` and ``loopwarden hook gemini`` with their event shapes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.hooks import payloads as p
from tests.hooks.conftest import Hook

pytestmark = pytest.mark.usefixtures("small_config")


class TestCodex:
    def test_chunk_headers_do_not_hide_a_loop(self, hook_env: dict[str, str]) -> None:
        """Codex wraps shell output in a header whose chunk id and wall time always change."""
        hook = Hook(hook_env, "codex")
        answers = []
        for n, (chunk, wall) in enumerate(
            [("b6f16f", "0.0000"), ("0a93c1", "0.0012"), ("f00d42", "0.0031")], start=1
        ):
            answers.append(hook(p.codex_pre(n)).json)
            answers.append(hook(p.codex_post(n, chunk, wall)).json)
        assert answers[:5] == [{}, {}, {}, {}, {}]
        assert "WARNING" in answers[5]["hookSpecificOutput"]["additionalContext"]
        denied = hook(p.codex_pre(4)).json["hookSpecificOutput"]
        assert denied["permissionDecision"] == "deny"
        assert "blocked" in denied["permissionDecisionReason"]
        # Codex fails a PreToolUse hook that answers continue:false (and runs the call):
        # the stop is a deny, for this call and every later one of the turn.
        stop = hook(p.codex_pre(5)).json
        assert "continue" not in stop and "stopReason" not in stop
        reason = stop["hookSpecificOutput"]["permissionDecisionReason"]
        assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert "circuit breaker stopped this run" in reason
        assert "stop calling tools and tell the user what happened" in reason
        assert not reason.endswith(".")  # Codex adds ". Command: ..." itself
        # The stop's summary (onStop answer) for the person, who sees the deny reason.
        assert "loopwarden stopped this run (rule global_circuit_breaker" in reason
        later = hook(p.codex_pre(6)).json["hookSpecificOutput"]["permissionDecisionReason"]
        assert later.split("\n\n")[0] == reason.split("\n\n")[0]  # the same rule's text
        records = list(hook.state("019a-codex-sess", "turn-1").window)
        assert len({r.result_hash for r in records}) == 1

    def test_each_turn_is_a_run(self, hook_env: dict[str, str]) -> None:
        """Each Codex turn is a run of its own."""
        hook = Hook(hook_env, "codex")
        for n in range(1, 4):
            hook(p.codex_pre(n))
            hook(p.codex_post(n, f"c{n}", "0.001"))
        assert hook(p.codex_pre(4)).json["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert hook(p.codex_pre(5, turn="turn-2")).json == {}

    @pytest.mark.parametrize("event", ["PreCompact", "PostCompact"])
    def test_compaction_events_arm(self, hook_env: dict[str, str], event: str) -> None:
        """Codex PostCompact (and PreCompact, hooked by older installs) arms the guard."""
        hook = Hook(hook_env, "codex")
        hook(p.codex_pre(1))
        assert hook(p.codex_compact(event)).json == {}
        assert hook.state("019a-codex-sess", "turn-1").guard.remaining_attempts == 3

    def test_abort_after_compaction_denies_the_rest_of_the_turn(
        self, hook_env: dict[str, str]
    ) -> None:
        """The post-compaction abort replaces the call's output with the reason
        (continue:false on PostToolUse), then every later call of the turn is denied."""
        hook = Hook(hook_env, "codex")
        hook(p.codex_pre(1))
        hook(p.codex_compact("PostCompact"))
        answers = []
        for n in range(2, 5):
            hook(p.codex_pre(n))
            answers.append(hook(p.codex_post(n, f"c{n}", "0.001")).json)
        abort = answers[-1]
        assert abort == {"continue": False, "stopReason": abort["stopReason"]}
        assert "compaction" in abort["stopReason"]
        later = hook(p.codex_pre(5)).json["hookSpecificOutput"]
        assert later["permissionDecision"] == "deny"
        first = later["permissionDecisionReason"].split("\n\n")[0]
        assert first == abort["stopReason"].split("\n\n")[0]

    def test_unsupported_calls_in_the_rollout(
        self, hook_env: dict[str, str], tmp_path: Path
    ) -> None:
        """Unsupported calls found in the Codex rollout feed the unknown-tool rule."""
        rollout = tmp_path / "rollout-2026-11-29T18-00-00-019a.jsonl"
        lines = [{"timestamp": "t", "type": "session_meta", "payload": {"id": "019a"}}]
        for n in range(3):
            args = orjson.dumps({"x": n}).decode()
            lines.append(
                {
                    "type": "response_item",
                    "payload": {
                        "type": "function_call",
                        "call_id": f"call_{90 + n}",
                        "name": "no_such_tool",
                        "arguments": args,
                    },
                }
            )
            lines.append(
                {
                    "type": "response_item",
                    "payload": {
                        "type": "function_call_output",
                        "call_id": f"call_{90 + n}",
                        "output": "unsupported call: no_such_tool",
                    },
                }
            )
        rollout.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
        hook = Hook(hook_env, "codex")
        answer = hook(p.codex_pre(1, transcript=str(rollout))).json
        assert "no_such_tool" in answer["hookSpecificOutput"]["additionalContext"]
        assert "permissionDecision" not in answer["hookSpecificOutput"]
        records = list(hook.state("019a-codex-sess", "turn-1").window)
        assert [r.tool_name for r in records] == ["no_such_tool"] * 3 + ["Bash"]
        assert records[0].unknown_tool_name == "no_such_tool"


class TestGemini:
    def test_warn_deny_stop(self, hook_env: dict[str, str]) -> None:
        """A looping Gemini session is warned, denied with a top-level decision, then stopped."""
        hook = Hook(hook_env, "gemini")
        assert hook(p.gemini_event("BeforeAgent", prompt="list files")).json == {}
        answers = []
        for _ in range(3):
            answers.append(hook(p.gemini_before()).json)
            answers.append(hook(p.gemini_after()).json)
        assert answers[:5] == [{}, {}, {}, {}, {}]
        warn = answers[5]["hookSpecificOutput"]
        assert warn["hookEventName"] == "AfterTool" and "WARNING" in warn["additionalContext"]
        deny = hook(p.gemini_before()).json
        assert deny["decision"] == "deny" and "blocked" in deny["reason"]
        assert "continue" not in deny
        stop = hook(p.gemini_before()).json
        assert stop["decision"] == "deny"
        assert stop["continue"] is False and "circuit breaker" in stop["stopReason"]

    def test_before_agent_starts_a_new_run(self, hook_env: dict[str, str]) -> None:
        """Each Gemini BeforeAgent (a new prompt) starts a new run."""
        hook = Hook(hook_env, "gemini")
        hook(p.gemini_event("BeforeAgent", prompt="first", timestamp="2026-11-29T18:00:00Z"))
        for _ in range(3):
            hook(p.gemini_before())
            hook(p.gemini_after())
        assert hook(p.gemini_before()).json["decision"] == "deny"
        hook(p.gemini_event("BeforeAgent", prompt="again", timestamp="2026-11-29T18:05:00Z"))
        assert hook(p.gemini_before()).json == {}
        first = hook.state("gem-sess-1", "gem-sess-1@2026-11-29T18:00:00Z")
        second = hook.state("gem-sess-1", "gem-sess-1@2026-11-29T18:05:00Z")
        assert len(first.window) == 4 and len(second.window) == 1  # 3 calls + 1 veto

    def test_tool_errors_are_error_outcomes(self, hook_env: dict[str, str]) -> None:
        """Gemini tool errors are error outcomes; PreCompress before a request (trigger
        "auto", compressing or not) arms nothing, /compress ("manual") does."""
        hook = Hook(hook_env, "gemini")
        hook(p.gemini_before("cat nope"))
        error = {"message": "cat: nope: No such file or directory", "type": "EXECUTION_FAILED"}
        assert hook(p.gemini_after("cat nope", "", error=error)).json == {}
        assert hook(p.gemini_event("PreCompress", trigger="auto")).json == {}
        state = hook.state("gem-sess-1", "gem-sess-1")
        assert state.window.last.result_hash.startswith("error:")
        assert not state.guard.armed
        # /compress (trigger "manual", the only one install hooks) does arm.
        assert hook(p.gemini_event("PreCompress", trigger="manual")).json == {}
        assert hook.state("gem-sess-1", "gem-sess-1").guard.armed

    def test_shell_process_ids_are_not_progress(self, hook_env: dict[str, str]) -> None:
        """run_shell_command output carries a new process group id every time; the same
        output with another PGID is the same outcome."""
        hook = Hook(hook_env, "gemini")
        for pgid in (2189, 2301, 2417):
            output = f"Output: pending\nProcess Group PGID: {pgid}"
            hook(p.gemini_before("poll"))
            hook(p.gemini_after("poll", output))
        records = list(hook.state("gem-sess-1", "gem-sess-1").window)
        assert len({r.result_hash for r in records}) == 1
        assert hook(p.gemini_before("poll")).json["decision"] == "deny"

    def test_real_compression_arms_the_guard(
        self, hook_env: dict[str, str], tmp_path: Path
    ) -> None:
        """BeforeModel reads the session file: a history rewritten with fewer messages is a
        compression and arms the guard; the rewrites of a resume (after a new session
        header) are not."""
        transcript = tmp_path / "session-2026-11-29T18-00-abc.jsonl"
        messages = [{"id": f"m{i}", "type": "user", "content": []} for i in range(6)]
        header = {"sessionId": "gem-sess-1", "startTime": "t", "kind": "main"}
        transcript.write_bytes(orjson.dumps(header) + b"\n")
        hook = Hook(hook_env, "gemini")
        assert hook(p.gemini_model(transcript=str(transcript))).json == {}  # read from here
        # A resume: the header again, a first history of one message, then the whole.
        lines = [*messages, header, {"$set": {"messages": messages[:1]}}]
        lines.append({"$set": {"messages": messages}})
        with transcript.open("ab") as fh:
            fh.write(b"".join(orjson.dumps(x) + b"\n" for x in lines))
        assert hook(p.gemini_model(transcript=str(transcript))).json == {}
        assert hook.state("gem-sess-1", "gem-sess-1") is None  # nothing happened to the run
        compressed = {"$set": {"messages": messages[:2]}}
        with transcript.open("ab") as fh:
            fh.write(orjson.dumps(compressed) + b"\n")
        assert hook(p.gemini_model(transcript=str(transcript))).json == {}
        assert hook.state("gem-sess-1", "gem-sess-1").guard.remaining_attempts == 3

    def test_compress_arms_once(self, hook_env: dict[str, str], tmp_path: Path) -> None:
        """/compress arms the guard; its history rewrite, which Gemini may write to the
        transcript only a request later, does not arm it again (the window would restart)."""
        transcript = tmp_path / "session-2026-11-29T18-00-abc.jsonl"
        messages = [{"id": f"m{i}", "type": "user", "content": []} for i in range(6)]
        transcript.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in messages))
        hook = Hook(hook_env, "gemini")
        hook(p.gemini_model(transcript=str(transcript)))
        hook(p.gemini_event("PreCompress", trigger="manual"))
        hook(p.gemini_before("poll"))
        hook(p.gemini_after("poll", "same"))
        with transcript.open("ab") as fh:
            fh.write(orjson.dumps({"$set": {"messages": messages[:2]}}) + b"\n")
        hook(p.gemini_model(transcript=str(transcript)))
        assert hook.state("gem-sess-1", "gem-sess-1").guard.remaining_attempts == 2

    def test_missing_tools_before_the_next_request(
        self, hook_env: dict[str, str], tmp_path: Path
    ) -> None:
        """BeforeModel reads calls of missing tools from the session file (each record is
        written twice): past the threshold the request gets a note after its messages, at
        the circuit breaker the run ends before the request."""
        transcript = tmp_path / "session-2026-11-29T18-00-abc.jsonl"
        transcript.write_bytes(b'{"sessionId": "gem-sess-1", "startTime": "t"}\n')
        hook = Hook(hook_env, "gemini")
        assert hook(p.gemini_model(transcript=str(transcript))).json == {}
        error = 'Tool "NoSuchTool" not found. Did you mean one of: "glob"?'
        answers = []
        for n in range(1, 6):
            append(transcript, p.gemini_transcript_calls([(f"call_{n}", "NoSuchTool", error)]))
            answers.append(hook(p.gemini_model(transcript=str(transcript))).json)
        assert answers[:2] == [{}, {}]
        request = answers[2]["hookSpecificOutput"]["llm_request"]
        texts = [m["content"] for m in request["messages"][:2]]
        assert texts == ["<session_context>...", "Poll job 42."]
        note = request["messages"][2]
        assert note["role"] == "user"
        assert "no tool named 'NoSuchTool' here, and it has been called 3 times" in note["content"]
        assert "hookSpecificOutput" in answers[3]
        assert answers[4]["continue"] is False
        assert "no tool named 'NoSuchTool'" in answers[4]["stopReason"]
        records = list(hook.state("gem-sess-1", "gem-sess-1").window)
        assert [r.call_id for r in records] == [f"call_{n}" for n in range(1, 6)]

    def test_outcomes_come_from_the_transcript(
        self, hook_env: dict[str, str], tmp_path: Path
    ) -> None:
        """With BeforeTool and BeforeModel (what install hooks), each call's outcome is read
        from the session file before the next request: a repeated shell call with the same
        output (PGIDs aside) is warned in the next request, then denied, then stopped."""
        transcript = tmp_path / "session-2026-11-29T18-00-abc.jsonl"
        transcript.write_bytes(b'{"sessionId": "gem-sess-1", "startTime": "t"}\n')
        hook = Hook(hook_env, "gemini")
        hook(p.gemini_model(transcript=str(transcript)))
        answers = []
        for n in range(1, 4):
            answers.append(hook(p.gemini_before("poll", transcript=str(transcript))).json)
            output = f"Output: pending\nProcess Group PGID: {2000 + n}"
            append(
                transcript,
                p.gemini_transcript_calls([(f"c{n}", "run_shell_command", None)], output),
            )
            answers.append(hook(p.gemini_model(transcript=str(transcript))).json)
        assert answers[:5] == [{}, {}, {}, {}, {}]
        note = answers[5]["hookSpecificOutput"]["llm_request"]["messages"][-1]["content"]
        assert "WARNING: run_shell_command has been called" in note
        assert hook(p.gemini_before("poll")).json["decision"] == "deny"
        stop = hook(p.gemini_before("poll")).json
        assert stop["continue"] is False and "circuit breaker" in stop["stopReason"]
        records = list(hook.state("gem-sess-1", "gem-sess-1").window)
        assert len({r.result_hash for r in records}) == 1
        assert [r.call_id for r in records] == [None] * 5


def append(path: Path, lines: list[dict[str, object]]) -> None:
    with path.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(x) + b"\n" for x in lines))
