"""The secrets canary: a unique token in params, results and errors, through every path.

SPEC section 7 and docs/stores.md: raw params and results never reach disk,
logs or telemetry unless the user opts in. Each test puts a fresh token into
everything an agent hands loopwarden (arguments, results, error messages,
transcripts, upstream MCP results, trace files), drives a loop all the way to
a stop, and then searches every byte loopwarden wrote: state files (with their
WAL), Redis keys and values, run records, logs at DEBUG, stderr and reports.
A partial copy (any 8 characters of the token) counts as a leak.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import loopwarden as lw
from tests.adversarial import _traces as traces
from tests.adversarial._procs import LOOPWARDEN, run_bounded
from tests.adversarial.conftest import (
    SMALL,
    claude_event,
    codex_event,
    gemini_event,
    hook,
    leaks,
    state_dir,
    write_config,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(name="canary")
def fixture_canary() -> str:
    return f"CANARY{uuid.uuid4().hex[:16]}"


def files_holding(folder: Path, canary: str) -> list[str]:
    return [
        str(p.relative_to(folder))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and leaks(canary, p.read_bytes())
    ]


class Capture(logging.Handler):
    """Every record of every logger, formatted with its traceback, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(name="debug_log")
def fixture_debug_log() -> Iterator[Capture]:
    capture = Capture()
    root = logging.getLogger()
    ours = logging.getLogger("loopwarden")
    old = root.level, ours.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    ours.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(old[0])
        ours.setLevel(old[1])


# -- the Python API, on every store -------------------------------------------------------------
def drive(run: lw.RunGuard, canary: str, *, compact: bool = False) -> list[str]:
    """A loop with the canary everywhere, until the guard stops it (or, after a compaction,
    the post-compaction guard aborts it); the actions seen."""
    params = {"query": canary, "headers": {"Authorization": f"Bearer {canary}"}, "n": [canary]}
    actions: list[str] = []
    run.after_call("lookup", {"q": canary}, call_id="e1", error=RuntimeError(f"boom {canary}"))
    run.after_call("lookup", {"q": canary}, call_id="e2", error=f"tool lookup failed: {canary}")
    if compact:
        run.on_compaction()
    try:
        for n in range(40):
            decision = run.before_call("search", params, call_id=f"c{n}")
            actions.append(decision.action)
            if not decision.blocked:
                result = {"content": [{"type": "text", "text": f"found {canary}"}], "raw": canary}
                run.after_call("search", params, call_id=f"c{n}", result=result)
    except lw.LoopAbort as abort:
        actions.append(abort.code)
    return actions


async def adrive(run: lw.RunGuard, canary: str, store: Any) -> list[str]:
    """The async twin of :func:`drive`; closes the store's asyncio connections at the end."""
    params = {"query": canary}
    actions: list[str] = []
    try:
        for n in range(40):
            decision = await run.abefore_call("search", params, call_id=f"a{n}")
            actions.append(decision.action)
            if not decision.blocked:
                await run.aafter_call("search", params, call_id=f"a{n}", result=f"r {canary}")
    except lw.LoopAbort as abort:
        actions.append(abort.code)
    aclose = getattr(store, "aclose", None)
    if aclose is not None:  # connections bound to this event loop must not outlive it
        await aclose()
    return actions


def redis_values(url: str) -> bytes:
    """Every key and every value of every type on the server (not DUMP: it may compress)."""
    import redis

    client = redis.Redis.from_url(url.split("?")[0])
    out: list[bytes] = []
    try:
        for key in client.scan_iter("*"):
            out.append(key)
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"hash":
                for field, value in client.hgetall(key).items():
                    out += [field, value]
            elif kind == b"list":
                out += client.lrange(key, 0, -1)
            elif kind == b"set":
                out += list(client.smembers(key))
            elif kind == b"zset":
                out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
    finally:
        client.close()
    return b"\0".join(out)


@pytest.fixture(name="redis_url", scope="module")
def fixture_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server of this module (the Redis store tests' own server class)."""
    from tests.stores.redis._servers import Server, require_redis

    require_redis()
    server = Server(tmp_path_factory.mktemp("redis")).start()
    try:
        yield f"{server.url}?prefix=canary:"
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_python_api_keeps_no_secret(
    tmp_path: Path, canary: str, debug_log: Capture, store: str, request: pytest.FixtureRequest
) -> None:
    """Through ``LoopGuard``/``RunGuard`` (sync and async), nothing of the canary reaches the
    store, the run record (no logParams), events or any log record at DEBUG."""
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite://{tmp_path / 'state' / 'state.db'}",
        "redis": request.getfixturevalue("redis_url") if store == "redis" else "",
    }[store]
    events: list[lw.LoopEvent] = []
    config = {
        **SMALL,
        "loopwarden": {"store": url, "runRecord": str(tmp_path / "record" / "run.jsonl")},
    }
    guard = lw.LoopGuard(config, on_event=events.append, session_id=f"s-{canary[:6]}")
    actions = drive(guard.run("sync"), canary)
    actions += drive(guard.run("compacted"), canary, compact=True)
    actions += asyncio.run(adrive(guard.run("async"), canary, guard.store))  # closes the store
    at_rest = files_holding(tmp_path, canary)  # while the store is open: WAL included
    stored = redis_values(url) if store == "redis" else b""
    guard.close()
    assert {"warn", "block", "global_circuit_breaker", "compaction_loop_persisted"} <= set(actions)
    assert not at_rest + files_holding(tmp_path, canary)
    assert not leaks(canary, stored)
    assert not leaks(canary, "\n".join(debug_log.lines))
    assert not any(leaks(canary, orjson.dumps(event.to_dict())) for event in events)


def test_run_record_with_opt_in_holds_params(tmp_path: Path, canary: str) -> None:
    """The opt-in works: with ``logParams`` the run record holds them (so the tests above
    would notice a leak)."""
    record = tmp_path / "run.jsonl"
    guard = lw.LoopGuard(SMALL, run_record=record, log_params=True)
    drive(guard.run("opt-in"), canary)
    guard.close()
    assert leaks(canary, record.read_bytes())


# -- hooks, all three agents ------------------------------------------------------------
def claude_transcript(path: Path, canary: str) -> None:
    """A transcript whose calls all have their results (and one unknown-tool miss)."""
    records = []
    for n, name in enumerate(["Bash", "NoSuchTool"]):
        records.append(
            {
                "type": "assistant",
                "sessionId": "sess-claude",
                "promptId": "prompt-1",
                "message": {
                    "content": [
                        {"type": "tool_use", "id": f"tu{n}", "name": name, "input": {"k": canary}}
                    ]
                },
            }
        )
        text = f"<tool_use_error>Error: No such tool available: {name}</tool_use_error>"
        records.append(
            {
                "type": "user",
                "sessionId": "sess-claude",
                "promptId": "prompt-1",
                "message": {
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"tu{n}",
                            "is_error": True,
                            "content": text,
                        }
                    ]
                },
            }
        )
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def codex_rollout(path: Path, canary: str) -> None:
    """A Codex rollout: a call of a missing tool (answered "unsupported call") and a call
    still waiting for its output, both with the canary in their arguments."""
    arguments = orjson.dumps({"k": canary}).decode()
    records = [{"type": "session_meta", "payload": {"id": "sess-codex"}}]
    for n, name in enumerate(["no_such_tool", "shell"]):
        records.append(
            {
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": name,
                    "arguments": arguments,
                    "call_id": f"call_{n}",
                },
            }
        )
    records.insert(
        2,
        {
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "call_0",
                "output": "unsupported call: no_such_tool",
            },
        },
    )
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def hook_loop(env: dict[str, str], agent: str, canary: str, transcript: str, daemon: bool) -> bool:
    """Pre/Post events of one looping call (canary in input, response, errors); True if stopped."""
    secret_input = {"command": f"curl -H 'X-Token: {canary}'", "env": {"TOKEN": canary}}
    for n in range(8):
        if agent == "claude-code":
            pre = claude_event("PreToolUse", n, tool_input=secret_input, transcript=transcript)
            post = claude_event(
                "PostToolUse" if n == 0 else "PostToolUseFailure",
                n,
                tool_input=secret_input,
                transcript=transcript,
                tool_response={"stdout": f"out {canary}", "stderr": canary},
                error=f"failed: {canary}",
            )
        elif agent == "codex":
            pre = codex_event("PreToolUse", n, tool_input=secret_input, transcript=transcript)
            post = codex_event(
                "PostToolUse", n, tool_input=secret_input, tool_response=f"Output:\n{canary}\n"
            )
        else:
            pre = gemini_event("BeforeTool", tool_input=secret_input)
            post = gemini_event(
                "AfterTool",
                tool_input=secret_input,
                tool_response={"llmContent": canary, "error": {"message": f"e {canary}"}},
            )
        answer = hook(env, agent, pre, daemon=daemon)
        assert answer.code == 0
        assert not leaks(canary, answer.stderr), answer.stderr
        if answer.json and answer.json.get("continue") is False:
            return True
        if answer.denied and "stopped this run" in str(answer.json):
            return True  # Codex: a stop is a deny (continue:false would fail the hook)
        if not answer.denied:
            assert not leaks(canary, hook(env, agent, post, daemon=daemon).stderr)
    return False


@pytest.mark.parametrize("daemon", [False, True], ids=["in-process", "helper"])
@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini"])
def test_hooks_keep_no_secret(
    hook_env: dict[str, str], tmp_path: Path, canary: str, agent: str, daemon: bool
) -> None:
    """A looping agent's hooks leave nothing of the canary in state.db (and WAL), hook.log,
    the run record (no logParams) or stderr."""
    record = tmp_path / "records" / "run.jsonl"
    write_config(hook_env, {**SMALL, "loopwarden": {"runRecord": str(record)}})
    transcript = tmp_path / "transcript.jsonl"
    if agent == "codex":
        codex_rollout(transcript, canary)  # read by Codex's hooks: pending calls are kept
    else:
        claude_transcript(transcript, canary)
    path = str(transcript) if agent != "gemini" else ""
    stopped = hook_loop(hook_env, agent, canary, path, daemon)
    assert stopped, "the loop was never stopped: the test did not reach every path"
    assert record.exists() and (state_dir(hook_env) / "hook.log").exists()
    assert not files_holding(state_dir(hook_env), canary)
    assert not files_holding(record.parent, canary)


# -- the MCP proxy ---------------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["warning", "debug"])
async def test_mcp_proxy_keeps_no_secret(tmp_path: Path, canary: str, level: str) -> None:
    """Through the stdio proxy (real client, real upstream), the canary in arguments and
    results never reaches the proxy's log, even at DEBUG, nor its run record."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp.client.client import Client

    from tests.adversarial.test_mcp_proxy import proxied

    record = tmp_path / "run.jsonl"
    config = tmp_path / "config.json"
    config.write_text(orjson.dumps({**SMALL, "loopwarden": {"runRecord": str(record)}}).decode())
    log = tmp_path / "proxy.log"
    texts: list[str] = []
    async with Client(proxied(log, "--config", str(config), "--log-level", level)) as client:
        texts.append(str(await client.call_tool("echo", {"text": canary})))
        for _ in range(7):
            result = await client.call_tool("poll", {"job": canary})
            texts.append(str(result))
        texts.append(str(await client.call_tool("no_such_tool", {"x": canary})))
    assert any("stopped this" in text for text in texts), texts[-1]
    assert record.exists()
    assert not leaks(canary, log.read_bytes()), log.read_text()
    assert not leaks(canary, record.read_bytes())


# -- replay, every trace format --------------------------------------------------------------------
@pytest.mark.parametrize("fmt", traces.FORMATS)
def test_replay_reports_keep_no_secret(tmp_path: Path, canary: str, fmt: str) -> None:
    """Replaying a trace whose params and results hold the canary (a run record written
    with logParams too) puts none of it in text, JSON or HTML reports, nor on stderr."""
    calls = [("fetch", {"url": f"https://x/?token={canary}"}, {"body": f"secret {canary}"})] * 8
    calls += [(f"tool_{n}", {"k": canary}, f"Unknown tool: {canary}") for n in range(2)]
    trace = traces.write(tmp_path / f"trace-{fmt}.jsonl", fmt, calls)
    assert leaks(canary, trace.read_bytes())
    for output in ("text", "json", "html"):
        report = tmp_path / f"report.{output}"
        ran = run_bounded(
            [
                *(LOOPWARDEN, "replay", str(trace), "--format", output, "-o", str(report), "-v"),
                *("--set", "warningThreshold=2", "--set", "criticalThreshold=3"),
            ],
            timeout=120,
        )
        assert ran.code == 0, ran.err
        body = report.read_bytes()
        assert b"fetch" in body
        assert not leaks(canary, body), output
        assert not leaks(canary, ran.stderr), ran.err


def test_config_check_keeps_no_secret_from_the_config(tmp_path: Path, canary: str) -> None:
    """A store URL with a password is shown redacted by ``config check`` (text and JSON), as
    docs/stores-redis.md promises for every message (without the redis package too, where the
    check reports the missing extra)."""
    import importlib.util

    has_redis = importlib.util.find_spec("redis") is not None
    path = tmp_path / "config.json"
    path.write_text(
        orjson.dumps({"loopwarden": {"store": f"redis://user:{canary}@127.0.0.1:1/0"}}).decode()
    )
    for fmt in ("text", "json"):
        ran = run_bounded([LOOPWARDEN, "config", "check", str(path), "--format", fmt])
        assert ran.code == (0 if has_redis else 1), ran.out + ran.err
        assert has_redis or b"loopwarden[redis]" in ran.stdout, ran.out
        assert b"redis://***@127.0.0.1:1/0" in ran.stdout, ran.out
        assert not leaks(canary, ran.stdout + ran.stderr), ran.out


def test_nothing_leaks_into_module_state(canary: str) -> None:
    """Hashing the canary keeps no copy of it in any loopwarden module-level cache."""
    import gc
    import sys

    guard = lw.LoopGuard(SMALL)
    drive(guard.run("cache"), canary)
    guard.close()
    del guard
    gc.collect()
    for name, module in list(sys.modules.items()):
        if not name.startswith("loopwarden"):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, (dict, list, set, tuple, str, bytes)):
                assert not leaks(canary, repr(value)[:1_000_000]), f"{name}.{attr}"
