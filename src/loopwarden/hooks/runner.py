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

import argparse
import logging
import os
import stat
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from .._logging import logger
from ..config import Config, load_config
from ..errors import ConfigError, LoopAbort
from ..guard import LoopGuard, RunGuard
from ..stores import SideRecords
from ..stores.sqlite import SQLiteStore, default_state_path
from .agents import ADAPTERS, Adapter, Kind
from .transcript import Cursor, UnknownCall, scan

__all__ = [
    "HOOK_DEFAULT_CONFIG",
    "HookContext",
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

HOOK_DEFAULT_CONFIG: Mapping[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
"""Used when no config file is found: installing the hook is the opt-in to detection."""

_LOG_MAX_BYTES = 1024 * 1024


class Reply(NamedTuple):
    """What the hook prints and exits with."""

    code: int
    out: bytes
    err: str


class UsageError(Exception):
    """Bad command line (exit code 1: agents treat it as a non-blocking hook error)."""


class HookOptions(NamedTuple):
    agent: str
    config: str | None
    state: str | None
    agent_id: str | None
    no_daemon: bool
    stop_daemon: bool


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never exit 2: agents read that as "block"
        raise UsageError(f"{self.format_usage()}loopwarden hook: error: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="loopwarden hook",
        description=(
            "Coding-agent hook: reads one hook event as JSON on stdin and prints the answer "
            "the agent expects (allow, deny with a reason, a warning for the model, or the "
            "end of the turn). Install it with 'loopwarden install AGENT'."
        ),
    )
    parser.add_argument("agent", choices=sorted(ADAPTERS), nargs="?", help="the coding agent")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="loopwarden/OpenClaw config file (default: $LOOPWARDEN_CONFIG, then "
        "~/.config/loopwarden/config.json5 or config.json; none: detection on with defaults)",
    )
    parser.add_argument(
        "--state",
        metavar="URL_OR_PATH",
        help="state store: a SQLite file path or store URL (default: $LOOPWARDEN_STATE, then "
        "the config's loopwarden.store, then ~/.local/share/loopwarden/state.db)",
    )
    parser.add_argument(
        "--agent-id",
        help="agent id for per-agent config blocks (default: $LOOPWARDEN_AGENT_ID or the "
        "agent name)",
    )
    parser.add_argument(
        "--no-daemon",
        action="store_true",
        help="handle the event in this process; do not use or start the helper process",
    )
    parser.add_argument(
        "--stop-daemon", action="store_true", help="stop the running helper process and exit"
    )
    return parser


def parse_args(argv: list[str]) -> HookOptions:
    """Parse the hook's command line; raises :class:`UsageError` (``--help`` exits)."""
    key = tuple(argv)
    cached = _parsed.get(key)
    if cached is not None:
        return cached
    options = _parse_args(argv)
    if len(_parsed) < 64:  # the helper sees the same few command lines again and again
        _parsed[key] = options
    return options


_parsed: dict[tuple[str, ...], HookOptions] = {}


def _parse_args(argv: list[str]) -> HookOptions:
    ns = _parser().parse_args(argv)
    if ns.agent is None and not ns.stop_daemon:
        raise UsageError(
            f"{_parser().format_usage()}loopwarden hook: error: name the agent "
            f"({', '.join(sorted(ADAPTERS))})"
        )
    return HookOptions(
        ns.agent or "", ns.config, ns.state, ns.agent_id, ns.no_daemon, ns.stop_daemon
    )


# -- where things are -----------------------------------------------------------
def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def _absolute(path: str, env: Mapping[str, str], cwd: str) -> str:
    """``path`` made absolute: ``~`` is the event's home, relative is against ``cwd``."""
    if path == "~" or path.startswith("~/"):
        return os.path.join(_home(env), path[2:])
    return path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)


def _config_file(opts: HookOptions, env: Mapping[str, str], cwd: str) -> tuple[str | None, Any]:
    """The config file and an identity that changes whenever the file does (os.path and
    one stat per candidate: this runs for every event)."""
    chosen = opts.config or env.get("LOOPWARDEN_CONFIG")
    if chosen:
        path = _absolute(chosen, env, cwd)
        try:
            st = os.stat(path)
        except OSError:
            return path, (path,)  # load_config reports the problem
        return path, (path, st.st_mtime_ns, st.st_size, st.st_ino)
    xdg = env.get("XDG_CONFIG_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(_home(env), ".config")
    for name in ("config.json5", "config.json"):
        candidate = os.path.join(base, "loopwarden", name)
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return candidate, (candidate, st.st_mtime_ns, st.st_size, st.st_ino)
    return None, ()


def config_path(opts: HookOptions, env: Mapping[str, str], cwd: str) -> Path | None:
    """The config file the hook uses, or None for :data:`HOOK_DEFAULT_CONFIG`."""
    path, _ = _config_file(opts, env, cwd)
    return None if path is None else Path(path)


_default_paths: dict[tuple[str | None, str | None], str] = {}


def _default_state(env: Mapping[str, str]) -> str:
    key = (env.get("HOME"), env.get("XDG_DATA_HOME"))
    found = _default_paths.get(key)
    if found is None:
        found = _default_paths[key] = str(default_state_path(env))
    return found


def store_url(opts: HookOptions, env: Mapping[str, str], cwd: str, config: Config) -> str:
    """The state store URL, with relative SQLite paths made absolute against ``cwd``."""
    spec = opts.state or env.get("LOOPWARDEN_STATE") or config.settings.store
    if not spec:
        return f"sqlite://{_default_state(env)}"
    if "://" not in spec:
        return f"sqlite://{_absolute(spec, env, cwd)}"
    if spec.startswith("memory://"):
        logger.warning(
            "loopwarden hook: the memory:// store forgets everything when the hook process "
            "exits; using the default SQLite store %s instead",
            default_state_path(env),
        )
        return f"sqlite://{default_state_path(env)}"
    if spec.startswith("sqlite://"):
        rest = spec[len("sqlite://") :]
        path, sep, query = rest.partition("?")
        if path and path != "/":
            return f"sqlite://{_absolute(path, env, cwd)}{sep}{query}"
    return spec


def log_path(env: Mapping[str, str], cwd: str = "") -> Path:
    """The hook's log file: ``$LOOPWARDEN_LOG``, else ``hook.log`` next to the default state."""
    chosen = env.get("LOOPWARDEN_LOG")
    if chosen:
        return Path(_absolute(chosen, env, cwd))
    return Path(_default_state(env)).parent / "hook.log"


# -- per-request log capture ------------------------------------------------------
class _Capture(logging.Handler):
    """Collects the ``loopwarden`` log records of the current thread's request."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.local = threading.local()
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        lines: list[tuple[int, str, bool]] | None = getattr(self.local, "lines", None)
        if lines is not None:
            try:
                is_event = hasattr(record, "loopwarden_event")
                lines.append((record.levelno, self.format(record), is_event))
                if record.exc_info and record.exc_info[1] is not None and not is_event:
                    # For stderr: the cause in one line (the log file has the traceback).
                    self.local.causes[len(lines) - 1] = str(record.exc_info[1])
            except Exception:
                self.handleError(record)


_capture: _Capture | None = None
_capture_lock = threading.Lock()


def _start_capture() -> _Capture:
    global _capture
    with _capture_lock:
        if _capture is None:
            _capture = _Capture()
            logger.addHandler(_capture)
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                logger.setLevel(logging.INFO)
    _capture.local.lines = []
    _capture.local.causes = {}
    return _capture


def write_log(
    env: Mapping[str, str], lines: list[tuple[int, str, bool]], context: str, cwd: str = ""
) -> None:
    path = log_path(env, cwd)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    text = "".join(f"{stamp} {context} {line}\n" for _, line, _ in lines)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.stat().st_size > _LOG_MAX_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass  # logging must never break the hook


# -- guards and stores, cached in the helper ---------------------------------------
class _Entry(NamedTuple):
    guard: LoopGuard
    side: SideRecords


class HookContext:
    """Guards by (config file version, store URL); the helper keeps one for its lifetime."""

    def __init__(self, max_guards: int = 8) -> None:
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._sides: dict[str, SQLiteStore] = {}
        self._lock = threading.Lock()
        self._max = max_guards

    def guard_for(self, opts: HookOptions, env: Mapping[str, str], cwd: str) -> _Entry:
        path, ident = _config_file(opts, env, cwd)
        # Everything the store choice depends on besides the config file itself.
        state = opts.state or env.get("LOOPWARDEN_STATE") or ""
        state_key: Any = state
        if state and "://" not in state:
            state_key = _absolute(state, env, cwd)
        elif state.startswith("sqlite://") and not state.startswith(("sqlite:///", "sqlite://~")):
            state_key = (state, cwd)  # a relative SQLite path
        key: tuple[Any, ...] = (ident, state_key, _default_state(env))
        with self._lock:
            for candidate in (key, (*key, cwd)):  # the second: a config with a relative path
                entry = self._entries.get(candidate)
                if entry is not None:
                    self._entries.move_to_end(candidate)
                    return entry
        config = load_config(path if path is not None else dict(HOOK_DEFAULT_CONFIG))
        record = config.settings.run_record
        if record is not None and not os.path.isabs(record):
            # Relative to where the agent runs, as in process (the helper runs in /).
            record = _absolute(record, env, cwd)
            key = (*key, cwd)
        guard = LoopGuard(config, store=store_url(opts, env, cwd, config), run_record=record)
        store = guard.store
        side: SideRecords
        if isinstance(store, SideRecords):
            side = store
        else:  # e.g. redis: the small side records still live in the local SQLite file
            side_path = _default_state(env)
            with self._lock:
                side = self._sides.get(side_path) or SQLiteStore(side_path)
                self._sides[side_path] = side
        entry = _Entry(guard, side)
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self._max:
                # Dropped, not closed: another thread may still be using it; its
                # connections close when it is garbage collected.
                self._entries.popitem(last=False)
        return entry

    def close(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
            sides, self._sides = list(self._sides.values()), {}
        for entry in entries:
            entry.guard.close()
        for side in sides:
            side.close()


# -- one event ----------------------------------------------------------------------
def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _join(*parts: str | None) -> str | None:
    texts = [p for p in parts if p]
    return "\n\n".join(texts) if texts else None


def agent_id_for(opts: HookOptions, env: Mapping[str, str]) -> str:
    """The agent id for per-agent config blocks: ``--agent-id``, env, or the agent's name."""
    return opts.agent_id or _str(env.get("LOOPWARDEN_AGENT_ID")) or opts.agent


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
    capture = _start_capture()
    context = "hook"
    try:
        reply, context = _answer(ctx, argv, env, cwd, payload)
    except Exception:
        logger.exception("loopwarden hook: internal error; the call is allowed")
        reply = Reply(0, b"{}", "")
    lines: list[tuple[int, str, bool]] = capture.local.lines
    capture.local.lines = None
    if lines:
        write_log(env, lines, context, cwd)
        causes: dict[int, str] = capture.local.causes
        problems: list[str] = []
        for index, (level, text, is_event) in enumerate(lines):
            if level < logging.WARNING or is_event:
                continue
            line = text.splitlines()[0]
            cause = causes.get(index)
            if cause and all(cause not in seen for seen in problems):
                line = f"{line}: {cause}"
            problems.append(line)
        if problems:
            reply = reply._replace(err=reply.err + "".join(f"{p}\n" for p in problems))
    return reply


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
