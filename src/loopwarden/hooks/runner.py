"""One hook event through the guard, whether in the hook process or in the helper.

:func:`handle` is the single implementation: the hook process calls it when
no helper is running, and the helper calls it for every forwarded event, with
the hook's own argv, environment and working directory. So both paths give
the same answers and leave the same state in the SQLite store.

Runs and sessions (the state key is agent id + session id + run id):

* Claude Code: the session id from the event; one user prompt is one run
  (``prompt_id``; a subagent's calls are a run of their own).
* Codex CLI: the session id; one turn is one run (``turn_id``).
* Gemini CLI: the session id; each ``BeforeAgent`` (a new user prompt) starts a run.

Events without a run id (compaction events) apply to the session's latest run,
remembered in a small side record next to the transcript offset.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from .._logging import logger
from ..errors import ConfigError, LoopAbort
from ..guard import RunGuard
from ..stores import SideRecords
from .agents import ADAPTERS, Adapter, Kind
from .context import HookContext, HookEntry
from .hooklog import start_capture, write_log
from .options import (
    HOOK_DEFAULT_CONFIG,
    HookOptions,
    UsageError,
    agent_id_for,
    config_path,
    log_path,
    parse_args,
    store_url,
)
from .transcript import Cursor, UnknownCall, scan

__all__ = [
    "HOOK_DEFAULT_CONFIG",
    "HookContext",
    "HookEntry",
    "HookOptions",
    "Reply",
    "UsageError",
    "agent_id_for",
    "config_path",
    "handle",
    "log_path",
    "parse_args",
    "run_cli",
    "session_key",
    "store_url",
    "write_log",
]
# (Options, log and context moved to their own modules; their names stay importable here.)


class Reply(NamedTuple):
    """What the hook prints and exits with."""

    code: int
    out: bytes
    err: str


# -- one event ----------------------------------------------------------------------
def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _join(*parts: str | None) -> str | None:
    texts = [p for p in parts if p]
    return "\n\n".join(texts) if texts else None


def session_key(agent: str, agent_id: str, session: str) -> str:
    """Key of a session's side record (latest run, transcript offset) in the SQLite file."""
    return f"hook\x1f{agent}\x1f{agent_id}\x1f{session}"


def _session_step(
    side: SideRecords,
    adapter: Adapter,
    kind: Kind,
    event: Mapping[str, Any],
    session: str,
    agent_id: str,
) -> tuple[str, list[UnknownCall]]:
    """Find the run, remember it for later events, and read new transcript lines."""
    explicit = adapter.run_id(event)
    transcript = _str(event.get("transcript_path"))
    fmt = adapter.transcript
    scan_now = fmt is not None and transcript is not None and kind in ("pre", "post", "failure")

    def step(old: bytes | None) -> tuple[bytes, tuple[str, list[UnknownCall]]]:
        data: dict[str, Any] = {}
        if old:
            try:
                loaded = orjson.loads(old)
                data = loaded if isinstance(loaded, dict) else {}
            except orjson.JSONDecodeError:
                data = {}
        if kind == "prompt":
            stamp = _str(event.get("timestamp")) or str(time.time_ns())
            data["run"] = f"{session}@{stamp}"
        elif explicit is not None:
            data["run"] = explicit
        run = explicit or _str(data.get("run")) or session
        found: list[UnknownCall] = []
        if scan_now and fmt is not None and transcript is not None:
            cursor = Cursor.load(data.get("t"), transcript)
            found = scan(fmt, cursor, _str(event.get("prompt_id")))
            data["t"] = cursor.dump()
        return orjson.dumps(data), (run, found)

    try:
        return side.transact_value(session_key(adapter.name, agent_id, session), step)
    except Exception:
        logger.exception("loopwarden hook: could not read the session record; continuing")
        return explicit or session, []


def _replay_unknown(run: RunGuard, calls: list[UnknownCall]) -> list[str]:
    """Feed unknown-tool calls (which fired no hook) to the guard; returns notes for the model."""
    notes: list[str] = []
    for call in calls:
        decision = run.before_call(call.tool, call.params, call.call_id)
        if decision.blocked:
            notes.append(decision.message or "")
            continue
        note = run.after_call(call.tool, call.params, call.call_id, error=call.error)
        if note:
            notes.append(note)
    return notes


def _process(
    ctx: HookContext,
    opts: HookOptions,
    env: Mapping[str, str],
    cwd: str,
    event: Mapping[str, Any],
) -> dict[str, Any]:
    adapter = ADAPTERS[opts.agent]
    kind = adapter.kind(event)
    if kind is None:
        return {}  # an event loopwarden does not act on
    name = str(event["hook_event_name"])
    session = _str(event.get("session_id"))
    if session is None:
        logger.warning("loopwarden hook: %s event without session_id; allowed", name)
        return {}
    try:
        entry = ctx.guard_for(opts, env, cwd)
    except ConfigError as exc:
        logger.error("loopwarden hook: %s; every call is allowed until this is fixed", exc)
        return {}
    agent_id = agent_id_for(opts, env)
    run_id, unknown = _session_step(entry.side, adapter, kind, event, session, agent_id)
    run = entry.guard.run(run_id, session_id=session, agent_id=agent_id)
    try:
        notes = _replay_unknown(run, unknown) if unknown else []
        if kind == "compact":
            run.on_compaction()
            return {}
        if kind == "prompt":
            return {}
        call = adapter.call(event)
        if call is None:
            logger.warning("loopwarden hook: %s event without tool_name; allowed", name)
            return adapter.allow(kind, name, _join(*notes))
        if kind == "pre":
            decision = run.before_call(call.tool, call.params, call.call_id)
            if decision.blocked:
                return adapter.deny(name, _join(decision.message, *notes) or "")
            return adapter.allow(kind, name, _join(*notes))
        outcome = adapter.outcome(kind, event)
        if outcome is None:
            logger.warning("loopwarden hook: %s event without tool_response; not recorded", name)
            return adapter.allow(kind, name, _join(*notes))
        note = run.after_call(call.tool, call.params, call.call_id, **outcome)
        return adapter.allow(kind, name, _join(note, *notes))
    except LoopAbort as abort:
        return adapter.stop(kind, name, abort.message)


def _answer(
    ctx: HookContext, argv: list[str], env: Mapping[str, str], cwd: str, payload: bytes
) -> tuple[Reply, str]:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return Reply(1, b"", f"{exc}\n"), "hook"
    except SystemExit:  # --help reached the helper; the hook process prints it itself
        return Reply(0, b"{}", ""), "hook"
    context = f"hook {opts.agent}"
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        logger.warning("loopwarden hook: the event on stdin is not JSON (%s); allowed", exc)
        return Reply(0, b"{}", ""), context
    if not isinstance(event, dict):
        logger.warning(
            "loopwarden hook: the event on stdin is a JSON %s, not an object; allowed",
            type(event).__name__,
        )
        return Reply(0, b"{}", ""), context
    session = _str(event.get("session_id"))
    if session:
        context = f"{context} session={session}"
    return Reply(0, orjson.dumps(_process(ctx, opts, env, cwd, event)), ""), context


def handle(
    ctx: HookContext, argv: list[str], env: Mapping[str, str], cwd: str, payload: bytes
) -> Reply:
    """Answer one hook event. Never raises; internal failures allow the call (fail open).

    Log records of the request go to the hook log; problems (not guard events, which
    are for the model) are also summed up on stderr, which agents show the user.
    """
    capture = start_capture()
    context = "hook"
    try:
        reply, context = _answer(ctx, argv, env, cwd, payload)
    except Exception:
        logger.exception("loopwarden hook: internal error; the call is allowed")
        reply = Reply(0, b"{}", "")
    problems = capture.finish(env, context, cwd)
    return reply._replace(err=reply.err + problems) if problems else reply


def run_cli(argv: list[str], payload: bytes | None) -> int:
    """The hook command in this process (no helper running, ``--no-daemon``, or ``--help``)."""
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    if opts.stop_daemon:
        from .daemon import stop

        stopped = stop(os.environ)
        print(
            "loopwarden: hook helper stopped" if stopped else "loopwarden: no hook helper running"
        )
        return 0
    if payload is None:
        try:
            payload = sys.stdin.buffer.read()
        except (AttributeError, OSError, ValueError):
            payload = b""
    ctx = HookContext()
    try:
        reply = handle(ctx, argv, os.environ, os.getcwd(), payload)
    finally:
        ctx.close()
    if reply.err:
        sys.stderr.write(reply.err)
        sys.stderr.flush()
    sys.stdout.buffer.write(reply.out)
    sys.stdout.flush()
    if not opts.no_daemon and os.environ.get("LOOPWARDEN_HOOK_DAEMON", "1").lower() not in (
        "0",
        "off",
        "no",
        "false",
    ):
        from .daemon import spawn

        spawn(os.environ)
    return reply.code
