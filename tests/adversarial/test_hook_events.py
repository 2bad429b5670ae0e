"""Hostile hook events: always valid JSON on stdout and exit 0, and loops still counted.

Issue 11, defect 13 (valid JSON that orjson rejects), issue 24 item 2 (a truncated
event that made the lenient re-parse quadratic), plus hypothesis-generated events
for all three agents through the real console script and hook helper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._wait import wait_until
from tests.adversarial._procs import LOOPWARDEN, cpu_seconds, run_bounded
from tests.adversarial._values import EXAMPLES
from tests.adversarial.conftest import (
    SMALL,
    base_env,
    claude_event,
    codex_event,
    gemini_event,
    hook,
    write_config,
)

pytestmark = pytest.mark.timeout(180)

# JSON that Python's json module (and the agents) accept, but orjson refuses.
ODD_NUMBERS = {
    "plain": b'"ls"',
    "overflowing-float": b"1e400",
    "400-digit-int": b"1" * 400,
    "nesting-1100": b"[" * 1100 + b"]" * 1100,
}


def raw_event(name: str, n: int, value: bytes, **extra: Any) -> bytes:
    """A Claude Code event whose ``tool_input.arg`` is the raw JSON text ``value``."""
    event = claude_event(name, n, tool_input={"command": "poll", "arg": "@@"}, **extra)
    return orjson.dumps(event).replace(b'"@@"', value)


@pytest.mark.parametrize("kind", sorted(ODD_NUMBERS))
def test_loop_with_unusual_json_arguments_is_caught(hook_env: dict[str, str], kind: str) -> None:
    """A loop whose arguments hold JSON numbers or nesting orjson refuses is still counted:
    with the small thresholds the fourth identical call is denied."""
    write_config(hook_env, SMALL)
    value = ODD_NUMBERS[kind]
    answers = []
    for n in range(4):
        answers.append(hook(hook_env, "claude-code", raw_event("PreToolUse", n, value)))
        post = raw_event("PostToolUse", n, value, tool_response={"stdout": "pending"})
        hook(hook_env, "claude-code", post)
    assert all(answer.code == 0 for answer in answers)
    assert [answer.denied for answer in answers] == [False, False, False, True]


def truncated_escapes(size: int) -> bytes:
    """A Claude Code event cut off inside a string of ``\\"`` escapes, ``size`` bytes long."""
    head = orjson.dumps(claude_event("PreToolUse", 1, tool_input={"command": "@@"}))
    head = head[: head.index(b'"@@"') + 1]
    return head + b'\\"' * ((size - len(head)) // 2)


def test_truncated_event_is_refused_in_one_pass(hook_env: dict[str, str]) -> None:
    """A 256 KB event cut off in a run of escaped quotes is answered (allowed) without
    the re-parse going quadratic: the hook finishes well inside a 10 s CPU limit (the
    quadratic scan needed minutes of CPU for this size)."""
    write_config(hook_env, SMALL)
    ran = run_bounded(
        [LOOPWARDEN, "hook", "claude-code", "--no-daemon"],
        stdin=truncated_escapes(256 * 1024),
        env=hook_env,
        timeout=120,
        max_cpu=10,
    )
    assert ran.code == 0, f"exit {ran.code} (killed by the CPU limit?) {ran.err[-500:]}"
    assert orjson.loads(ran.stdout) == {}
    assert "not JSON" in ran.err


def test_truncated_event_does_not_hold_the_helper(hook_env: dict[str, str]) -> None:
    """Through the helper, a 96 KB truncated event costs the helper a small fraction of
    a CPU second (it held the interpreter for 94 s, stalling every other session), and
    the next session's call is answered by the helper and counted."""
    write_config(hook_env, SMALL)
    hook(hook_env, "claude-code", claude_event("PreToolUse", 0, session="warm"), daemon=True)
    runtime = Path(hook_env["LOOPWARDEN_RUNTIME_DIR"])
    pid_file = wait_until(lambda: next(runtime.glob("*.pid"), None), what="the hook helper")
    pid = int(wait_until(lambda: pid_file.read_text().strip(), what="the helper's pid"))
    before = cpu_seconds(pid)
    poisoned = hook(hook_env, "claude-code", truncated_escapes(96 * 1024), daemon=True)
    spent = cpu_seconds(pid) - before
    assert poisoned.code == 0 and poisoned.json == {}
    assert spent < 5, f"the helper spent {spent:.1f} CPU seconds on one truncated event"
    denied = []
    for n in range(4):
        pre = claude_event("PreToolUse", n, session="other")
        denied.append(hook(hook_env, "claude-code", pre, daemon=True).denied)
        post = claude_event("PostToolUse", n, session="other", tool_response={"stdout": "x"})
        hook(hook_env, "claude-code", post, daemon=True)
    assert denied == [False, False, False, True]


# -- hypothesis: hostile events -------------------------------------------------------------------
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
_NAMES = {
    "claude-code": [
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PreCompact",
        "SessionStart",
        "UserPromptSubmit",
        "Stop",
    ],
    "codex": ["PreToolUse", "PostToolUse", "PreCompact", "PostCompact", "SessionStart"],
    "gemini": ["BeforeTool", "AfterTool", "BeforeAgent", "PreCompress", "SessionStart"],
}


@st.composite
def events(draw: st.DrawFn, agent: str, transcripts: list[str]) -> bytes:
    name = draw(st.sampled_from(_NAMES[agent]) | st.text(max_size=8) | st.integers(-9, 9))
    if agent == "claude-code":
        base = claude_event("PreToolUse", draw(st.integers(0, 5)))
    elif agent == "codex":
        base = codex_event("PreToolUse", draw(st.integers(0, 5)))
    else:
        base = gemini_event("BeforeTool")
    base["hook_event_name"] = name
    base["transcript_path"] = draw(st.sampled_from(transcripts))
    for key in ("session_id", "tool_name", "tool_input", "tool_use_id", "prompt_id", "turn_id"):
        if draw(st.booleans()):
            base[key] = draw(_JSON)
    if draw(st.booleans()):
        base["tool_response"] = draw(_JSON)
    if draw(st.booleans()):
        base["error"] = draw(_JSON)
    payload = orjson.dumps(base)
    mangle = draw(st.sampled_from(["none", "none", "truncate", "garbage", "bytes"]))
    if mangle == "truncate":
        payload = payload[: draw(st.integers(0, len(payload)))]
    elif mangle == "garbage":
        at = draw(st.integers(0, len(payload)))
        payload = payload[:at] + draw(st.binary(max_size=6)) + payload[at:]
    elif mangle == "bytes":
        payload = draw(st.binary(max_size=40))
    return payload


@pytest.fixture(name="fast_env")
def fixture_fast_env(tmp_path: Path, shared_runtime: Path) -> dict[str, str]:
    """This test's HOME with the session's shared helper (events answer in milliseconds)."""
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home, shared_runtime)
    write_config(env, SMALL)
    return env


@pytest.mark.parametrize("agent", sorted(_NAMES))
def test_hostile_events_get_valid_json_and_exit_0(
    fast_env: dict[str, str], tmp_path: Path, agent: str
) -> None:
    """Whatever the event, the hook exits 0 and prints one JSON object."""
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_bytes(
        b'{"type": "assistant", "message": {"content": [{"type": "tool_use"}]}}\n'
    )
    paths = ["", str(transcript), str(tmp_path / "missing.jsonl"), str(tmp_path), "/"]

    @settings(
        max_examples=EXAMPLES or 12,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(events(agent, paths), st.booleans())
    def check(payload: bytes, daemon: bool) -> None:
        answer = hook(fast_env, agent, payload, daemon=daemon)
        assert answer.code == 0, answer.stderr
        assert isinstance(answer.json, dict), answer.ran.stdout
        assert "Traceback" not in answer.stderr

    check()
