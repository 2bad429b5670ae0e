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
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from .._logging import logger
from .._util import valid_text
from ..engine.detectors import UNKNOWN_TOOL_REPEAT
from ..errors import ConfigError, LoopAbort
from ..guard import Decision, RunGuard
from . import onewait
from .agents import ADAPTERS, Adapter, BatchEntry, Kind
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
from .session import remember_stop, session_key, step_session
from .transcript import UnknownCall

__all__ = [
    "HOOK_DEFAULT_CONFIG",
    "Answer",
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


class Answer(NamedTuple):
    """An event's JSON answer, and (rarely) an exit code and text for stderr."""

    json: dict[str, Any]
    code: int = 0
    err: str = ""


def _miss_note(tool: str, decision: Decision) -> str:
    """What the model is told about a call of a missing tool, which the agent has
    already answered (loopwarden could not block it, so the note does not say so)."""
    det = decision.detection
    if det is not None and det.detector == UNKNOWN_TOOL_REPEAT:
        times = f"{det.count + 1} times in a row"
    else:
        times = "again and again"
    return (
        f"CRITICAL: loopwarden: there is no tool named {tool!r} here, and it has been "
        f"called {times}. Do not call it again; continue with the tools you have, or "
        "answer without it."
    )


def _stop_text(abort: LoopAbort) -> str:
    """The stop message; for a missing tool, with the name as the model wrote it."""
    if abort.detector == UNKNOWN_TOOL_REPEAT:
        return (
            f"CRITICAL: loopwarden stopped this run: there is no tool named "
            f"{abort.tool_name!r} here, and it was called {abort.count + 1} times in a row."
        )
    return abort.message


def _replay_unknown(run: RunGuard, calls: list[UnknownCall]) -> list[str]:
    """Feed unknown-tool calls (which fired no hook) to the guard; the note for the model.

    The agent has answered each of them already: only the latest note is kept.
    """
    note: str | None = None
    for call in calls:
        if onewait.spent():
            break  # the store failed for this event: the rest would only fail too
        decision = run.before_call(call.tool, call.params, call.call_id)
        if decision.blocked:
            note = _miss_note(call.tool, decision)
            continue
        note = run.after_call(call.tool, call.params, call.call_id, error=call.error) or note
    return [note] if note else []


def _record(run: RunGuard, entries: Iterable[BatchEntry], with_ids: bool) -> list[str]:
    """Record calls that ran (or missed) and their outcomes; the notes for the model.

    ``with_ids``: the calls were checked under these call ids (Claude Code's
    PostToolBatch); Gemini's BeforeTool has none, so its calls pair without them.
    """
    notes: list[str] = []
    for entry in entries:
        if onewait.spent():
            break  # the store failed for this event: one wait, not one per call
        call = entry.call
        if entry.missing:
            miss = UnknownCall(call.tool, call.params, call.call_id, str(entry.outcome["error"]))
            notes += _replay_unknown(run, [miss])
            continue
        call_id = call.call_id if with_ids else None
        note = run.after_call(call.tool, call.params, call_id, **entry.outcome)
        if note:
            notes.append(note)
    return notes


def _act(
    adapter: Adapter,
    kind: Kind,
    name: str,
    event: Mapping[str, Any],
    run: RunGuard,
    notes: list[str],
    calls: Iterable[BatchEntry] = (),
    skip: str | None = None,
) -> dict[str, Any]:
    """The answer to an event once the session step is done (may raise LoopAbort).

    ``skip``: the id of a call the person refused at the CLI's prompt (not recorded)."""
    if kind in ("compact", "prompt"):
        return {}
    if kind == "model":
        note = _join(*notes, *_record(run, calls, with_ids=False))
        return adapter.model_note(event, note) if note else {}
    if kind == "batch":
        entries = [e for e in adapter.batch(event) if skip is None or e.call.call_id != skip]
        notes += _record(run, entries, with_ids=True)
        return adapter.allow(kind, name, _join(*notes))
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


def _compaction_marker(
    adapter: Adapter, kind: Kind, event: Mapping[str, Any], env: Mapping[str, str]
) -> str | None:
    """The state of the file the agent rewrites at each compaction ("-": none yet), read
    before the state transaction; None where the agent says so by an event."""
    if kind not in ("pre", "post", "failure"):
        return None
    path = adapter.compaction_file(event, env)
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"


def _process(
    ctx: HookContext,
    opts: HookOptions,
    env: Mapping[str, str],
    cwd: str,
    event: Mapping[str, Any],
) -> Answer:
    adapter = ADAPTERS[opts.agent]
    kind = adapter.kind(event)
    if kind is None:
        return Answer({})  # an event loopwarden does not act on
    name = adapter.event_name(event) or ""
    session = adapter.session_id(event)
    if session is None:
        logger.warning("loopwarden hook: %s event without session_id; allowed", name)
        return Answer({})
    try:
        entry = ctx.guard_for(opts, env, cwd)
    except ConfigError as exc:
        if not exc.fail_closed:
            logger.error("loopwarden hook: %s; every call is allowed until this is fixed", exc)
            return Answer({})
        # failMode "closed" (as the broken file says): deny, as for any internal failure.
        logger.error("loopwarden hook: %s; failMode is closed: calls are denied until fixed", exc)
        if kind != "pre":
            return Answer({})
        return Answer(
            adapter.deny(
                name,
                "loopwarden: the loopwarden config is invalid and its failMode is "
                "closed, so this call is denied; the user must fix the config file.",
            )
        )
    agent_id = agent_id_for(opts, env)
    marker = _compaction_marker(adapter, kind, event, env)
    step = step_session(entry.side, adapter, kind, event, session, agent_id, marker)
    if onewait.spent() and kind != "pre":
        # The store already failed (and waited) once for this event: no second wait.
        # A PreToolUse still asks the guard, which answers at once, allowing the call
        # or, with failMode closed, denying it.
        return Answer({})
    if kind == "turn":  # the agent goes on with a turn: end it if its run was stopped
        return Answer(adapter.stop(kind, name, step.stopped) if step.stopped else {})
    if kind == "end":
        # A failing SessionEnd hook is the one thing `claude -p` prints in text mode.
        report = step.report
        if report and step.stop_report is not None:
            from .onstop import end_text

            report = end_text(adapter, event, step.stop_report) or report
        return Answer({}, 1, f"{report}\n") if report else Answer({})
    run = entry.guard.run(step.run, session_id=session, agent_id=agent_id)
    try:
        skip: str | None = None
        if step.asked is not None:  # a person answered a stop (onStop: ask)
            from .onstop import answered

            note, skip = answered(adapter, kind, event, run, step.asked)
            notes = [note] if note else []
        else:
            notes = []
        # Calls read from the transcript that ran before the compaction count before it.
        notes += _record(run, step.calls[: step.split], with_ids=False)
        if step.arm:
            run.on_compaction()
        notes += _replay_unknown(run, step.unknown) if step.unknown else []
        after = step.calls[step.split :]
        return Answer(_act(adapter, kind, name, event, run, notes, after, skip))
    except LoopAbort as abort:
        from .onstop import remember_ask, stop_answer

        message = _stop_text(abort)
        key = session_key(adapter.name, agent_id, session)
        configured = entry.guard.config.settings.on_stop
        answer, text, kept = stop_answer(adapter, kind, name, event, abort, message, configured)
        if kept is None:  # the person was asked
            remember_ask(entry.side, key, step.run, abort)
        else:
            remember_stop(entry.side, key, text, step.run, kept or None)
        return Answer(answer)


def _event_cwd(event: Mapping[str, Any]) -> str:
    """The agent's working directory as the event states it ("" if it does not)."""
    value = event.get("cwd")
    return value if isinstance(value, str) and os.path.isabs(value) else ""


def _answer(
    ctx: HookContext, argv: list[str], env: Mapping[str, str], cwd: str, payload: bytes
) -> tuple[Reply, str, str]:
    """The reply, the log context, and the working directory the event was handled in."""
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return Reply(1, b"", f"{exc}\n"), "hook", cwd
    except SystemExit:  # --help reached the helper; the hook process prints it itself
        return Reply(0, b"{}", ""), "hook", cwd
    context = f"hook {opts.agent}"
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        if len(payload) > LENIENT_MAX:
            logger.warning(
                "loopwarden hook: the event (%d bytes) is not JSON the fast parser takes (%s), "
                "and larger than %d bytes is not read again; allowed",
                len(payload),
                exc,
                LENIENT_MAX,
            )
            return Reply(0, b"{}", ""), context, cwd
        event = _lenient(payload)
        if event is None:
            logger.warning("loopwarden hook: the event on stdin is not JSON (%s); allowed", exc)
            return Reply(0, b"{}", ""), context, cwd
    if not isinstance(event, dict):
        logger.warning(
            "loopwarden hook: the event on stdin is a JSON %s, not an object; allowed",
            type(event).__name__,
        )
        return Reply(0, b"{}", ""), context, cwd
    # An HTTP hook has no working directory of its own: the event's is the agent's.
    cwd = cwd or _event_cwd(event)
    event = ADAPTERS[opts.agent].normalize(event, opts.event)
    session = ADAPTERS[opts.agent].session_id(event)
    if session:
        context = f"{context} session={session}"
    answer = _process(ctx, opts, env, cwd, event)
    return Reply(answer.code, orjson.dumps(answer.json), answer.err), context, cwd


# Valid JSON that orjson refuses: numbers beyond 64 bits or double range, nesting
# past 1024. Such an event is still counted: subtrees nested deeper than this are
# replaced by the digest of their text, numbers Python cannot hold become Decimals.
_LENIENT_DEPTH = 200
# Larger events that orjson refuses are allowed (and logged), not read again: the
# re-read holds the interpreter for a few milliseconds per megabyte.
LENIENT_MAX = 4 * 1024 * 1024
# A string, a bracket, or a quote that starts no complete string (the text ends inside
# it: not JSON). Possessive, and the scan stops at that quote: one pass over the text,
# whatever it holds. (A plain `"(?:[^"\\]|\\.)*"` retried every quote of an unterminated
# run of escapes to its end: quadratic, seconds of held GIL for a 48 KB event.)
# Compiled when needed (rarely): hook start-up.
_TOKENS = rb'"(?:[^"\\]++|\\[\s\S])*+"|[\[\]{}]|"'


def _number(kind: type[int | float]) -> Any:
    """A number as usual; one Python cannot hold (a 5,000-digit int, 1e400) as a Decimal."""
    import decimal

    def parse(text: str) -> Any:
        if len(text) <= 300:
            value = kind(text)
            if value - value == 0:  # not inf
                return value
        return decimal.Decimal(text)

    return parse


def _lenient(payload: bytes) -> Any:
    """The event as Python's json reads it (None if it is not JSON either)."""
    import hashlib
    import json

    parts: list[bytes] = []
    depth = 0
    start = done = 0
    for match in re.finditer(_TOKENS, payload):
        token = match[0]
        if token == b'"':
            return None  # an unterminated string
        if token in (b"[", b"{"):
            depth += 1
            if depth == _LENIENT_DEPTH + 1:
                start = match.start()
        elif token in (b"]", b"}"):
            if depth == _LENIENT_DEPTH + 1:
                deep = payload[start : match.end()]
                parts += [
                    payload[done:start],
                    b'"$deep:',
                    hashlib.sha256(deep).hexdigest().encode(),
                    b'"',
                ]
                done = match.end()
            depth -= 1
    parts.append(payload[done:])
    try:
        text = b"".join(parts).decode("utf-8")
        event = json.loads(text, parse_int=_number(int), parse_float=_number(float))
    except (ValueError, RecursionError):
        return None
    # json (unlike orjson) decodes a lone surrogate escape ("\ud800"); no store or
    # encoder takes one, so every such string of the event becomes valid text here.
    return _valid_text(event) if re.search(rb"\\u[dD][89a-fA-F]", payload) else event


def _valid_text(value: Any) -> Any:
    """``value`` with every string (keys too) made valid UTF-8 as the guard does it."""
    if isinstance(value, str):
        return value if value.isascii() else valid_text(value)
    if isinstance(value, list):
        return [_valid_text(item) for item in value]
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    return value


def handle(
    ctx: HookContext, argv: list[str], env: Mapping[str, str], cwd: str, payload: bytes
) -> Reply:
    """Answer one hook event. Never raises; internal failures allow the call (fail open).

    ``cwd`` is the hook process's working directory; "" (an HTTP hook): the event's.
    Log records of the request go to the hook log; problems (not guard events, which
    are for the model) are also summed up on stderr, which agents show the user.
    """
    capture = start_capture()
    onewait.begin()
    context = "hook"
    try:
        reply, context, cwd = _answer(ctx, argv, env, cwd, payload)
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
    if opts.http_port is not None:
        # Claude Code's HTTP hooks: the helper started here must listen before the
        # session's first tool call, so it is started before the answer is printed.
        from .httpstart import after_event

        out, err = after_event(argv, os.environ, reply.out, running=False)
        reply = reply._replace(out=out, err=reply.err + err)
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

        spawn(os.environ)  # (none when the HTTP set-up above started one)
    return reply.code
