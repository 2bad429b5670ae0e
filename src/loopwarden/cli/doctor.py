"""``loopwarden doctor``: what is installed, and does it work?

For every coding agent and scope it lists loopwarden's hook entries, runs a
synthetic ``PreToolUse``/``BeforeTool`` event through each installed command
as a real subprocess (the way the agent would), and checks that the config
loads and the state store can be written. Where the agent's CLI is on ``PATH``
it also checks the CLI's version against the one the hooks were tested with
and, for Codex, that Codex trusts and enables loopwarden's hooks (it skips
untrusted hooks silently). The test events start the hook helper if none was
running; doctor says so, how long it stays and how to stop it. Exit code 1 when
something is broken; every problem says what to do.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import orjson

from ..errors import ConfigError, LoopwardenError
from ..hooks import clistate, fileinstall, shellhook
from ..hooks._protocol import AGENTS
from ..hooks.agents import ADAPTERS
from ..hooks.settings import (
    AGENT_TITLES,
    SCOPES,
    SettingsError,
    hook_arguments,
    hook_command,
    installed_hooks,
    is_loopwarden_command,
    is_loopwarden_url,
    read_settings,
    settings_path,
    split_hook_command,
)
from ..stores import Inspectable
from ._clickutil import CONTEXT, EXIT_FAIL, EXIT_OK, run_command

__all__ = ["main"]


class _Report:
    def __init__(self) -> None:
        self.problems = 0

    def ok(self, text: str) -> None:
        click.echo(f"  [ok] {text}")

    def info(self, text: str) -> None:
        click.echo(f"  [--] {text}")

    def bad(self, text: str) -> None:
        self.problems += 1
        click.echo(f"  [!!] {text}")


def _pre_event(agent: str) -> str:
    """The agent's event before a tool call (``PreToolUse``, ``BeforeTool``)."""
    return next(name for name, kind in ADAPTERS[agent].events.items() if kind == "pre")


def _hook_words(command: str) -> list[str]:
    """The hook's own arguments (``AGENT [options]``) in an installed command."""
    return hook_arguments(command) or []


def _cleanup(
    agent: str, words: list[str], session: str, env: Mapping[str, str], run: str | None = None
) -> None:
    """Forget the synthetic session's state (same store the command used)."""
    from ..hooks.context import HookContext
    from ..hooks.options import agent_id_for, parse_args
    from ..hooks.runner import session_key

    ctx = HookContext()
    try:
        opts = parse_args(words)
        entry = ctx.guard_for(opts, env, os.getcwd())
        agent_id = agent_id_for(opts, env)
        for name in {run or f"doctor-{session}", session}:
            entry.guard.run(name, session_id=session, agent_id=agent_id).end()
        entry.side.delete_value(session_key(agent, agent_id, session))
    except Exception:
        pass  # leftovers expire with the TTL
    finally:
        ctx.close()


def _probe_event(agent: str, session: str) -> dict[str, object]:
    """The harmless pre-call event doctor sends through a hook."""
    event = ADAPTERS[agent].probe_event(session) or {
        "session_id": session,
        "transcript_path": "",
        "cwd": os.getcwd(),
        "hook_event_name": _pre_event(agent),
        "tool_name": "loopwarden_doctor",
        "tool_input": {"check": "doctor"},
    }
    if agent in ("claude-code", "qwen"):
        event.update(prompt_id=f"doctor-{session}", tool_use_id="doctor-1")
    elif agent == "codex":
        event.update(turn_id=f"doctor-{session}", tool_use_id="doctor-1")
    return event


def _run_hook(agent: str, command: str, report: _Report, env: Mapping[str, str]) -> None:
    words = shlex.split(command)
    exe = words[0] if words else ""
    if not (os.path.isabs(exe) and os.access(exe, os.X_OK)) and shutil.which(exe) is None:
        report.bad(f"command not found: {exe!r} (reinstall with 'loopwarden install {agent}')")
        return
    session = f"loopwarden-doctor-{uuid.uuid4().hex[:12]}"
    adapter = ADAPTERS[agent]
    event = _probe_event(agent, session)
    serves = "--http-port" in _hook_words(command)
    if serves:  # the session-start command: what Claude Code sends it
        event = {"session_id": session, "transcript_path": "", "cwd": os.getcwd()}
        event.update(hook_event_name="SessionStart", source="startup")
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            shell=True,
            input=orjson.dumps(event),
            capture_output=True,
            timeout=60,
            env=dict(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        report.bad("the hook did not answer within 60 s")
        return
    finally:
        _cleanup(agent, _hook_words(command), session, env, adapter.run_id(event))
    elapsed = (time.perf_counter() - start) * 1000
    err = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        report.bad(f"the hook exited with code {done.returncode}: {err or 'no message'}")
        return
    try:
        answer = orjson.loads(done.stdout or b"{}")
    except orjson.JSONDecodeError:
        report.bad(f"the hook printed something that is not JSON: {done.stdout[:200]!r}")
        return
    if not isinstance(answer, dict):
        report.bad(f"the hook printed JSON that is not an object: {answer!r}")
        return
    if serves and answer.get("systemMessage"):
        report.bad(str(answer["systemMessage"]))
        return
    if answer:
        report.bad(f"a harmless test call was not simply allowed: {answer}")
        return
    if err:
        report.bad(f"the hook allowed the test call but reported: {err}")
        return
    if serves:
        report.ok(f"test SessionStart event answered in {elapsed:.0f} ms (HTTP hooks served)")
        return
    report.ok(f"test {_pre_event(agent)} event allowed in {elapsed:.0f} ms")


def _check_files(agent: str, project: Path, env: Mapping[str, str], report: _Report) -> bool:
    """OpenCode's plugin file, Cline's hook files: present, ours, and working."""
    found_any = False
    for scope in SCOPES:
        directory = fileinstall.target_dir(agent, scope, env, project)
        files = fileinstall.find_own(directory)
        if not files:
            report.info(f"{scope}: not installed ({directory})")
            continue
        found_any = True
        report.ok(f"{scope}: installed in {directory}: {', '.join(p.name for p in files)}")
        try:
            names = {own.path.name for own in fileinstall.wanted(agent, directory, [])}
        except SettingsError as exc:
            report.bad(str(exc))
            names = set()
        missing = sorted(names - {p.name for p in files})
        if missing:
            report.bad(
                f"{scope}: missing {', '.join(missing)}; run "
                f"'loopwarden install {agent} --{scope}' again"
            )
        for path in files:
            words = fileinstall.own_command(path)
            if not words:
                report.bad(f"{path}: no hook command found in it; install again")
                continue
            command = shlex.join(words)
            report.info(f"command: {command}")
            _other_installation(agent, command, report)
            _run_hook(agent, command, report, env)
            if agent == "opencode":
                _check_plugin_module(path, report)
    if found_any and agent == "opencode" and env.get("OPENCODE_PURE", "").lower() in ("1", "true"):
        report.bad("OPENCODE_PURE is set: OpenCode loads no plugin, loopwarden's included")
    if found_any:
        _check_cli(agent, project, env, report)
    return found_any


def _check_plugin_module(path: Path, report: _Report) -> None:
    """The module the plugin file imports must exist (it moves with the virtualenv)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    for line in text.splitlines():
        if line.startswith("import { loopwarden } from "):
            module = line.removeprefix("import { loopwarden } from ").rstrip(";")
            try:
                target = Path(orjson.loads(module))
            except orjson.JSONDecodeError:
                break
            if not target.is_file():
                report.bad(f"{path} imports {target}, which does not exist; install again")
            return
    report.bad(f"{path}: it imports no loopwarden module; install again")


def _check_agent(agent: str, project: Path, env: Mapping[str, str], report: _Report) -> bool:
    if agent in fileinstall.FILE_AGENTS:
        return _check_files(agent, project, env, report)
    found_any = False
    for scope in SCOPES:
        path = settings_path(agent, scope, env, project)
        try:
            data = read_settings(path)
            hooks = installed_hooks(data, agent, path)
        except SettingsError as exc:
            report.bad(str(exc))
            continue
        if data is None or not hooks:
            report.info(f"{scope}: not installed ({path})")
            continue
        found_any = True
        urls = sorted({c for cs in hooks.values() for c in cs if is_loopwarden_url(c, agent)})
        if urls:
            wanted = [event for event, _, _ in ADAPTERS[agent].http_install_events]
        else:
            wanted = [event for event, _ in ADAPTERS[agent].install_events]
        report.ok(f"{scope}: installed in {path}: {', '.join(sorted(hooks))}")
        missing = [event for event in wanted if event not in hooks]
        if missing:
            report.bad(
                f"{scope}: missing events {', '.join(missing)}; run "
                f"'loopwarden install {agent} --{scope}' again"
            )
        duplicated = [event for event, commands in hooks.items() if len(commands) > 1]
        if duplicated:
            report.bad(f"{scope}: loopwarden runs twice for {', '.join(duplicated)}")
        commands = sorted({c for cs in hooks.values() for c in cs if is_loopwarden_command(c)})
        for command in [c for c in commands if _tests_a_call(agent, c)]:
            report.info(f"command: {command}")
            _other_installation(agent, command, report)
            _run_hook(agent, command, report, env)
            if shellhook.SCRIPT.name in command:
                _check_shell_hook(env, report)
        if urls and data is not None:
            _check_http(agent, path, data, env, report)
    if found_any:
        _check_cli(agent, project, env, report)
    return found_any


def _check_shell_hook(env: Mapping[str, str], report: _Report) -> None:
    """The shell hook reaches the helper (the test event above set its port up)."""
    from ..hooks._protocol import socket_path
    from ..hooks.httpkeys import KeysError, helper_name, load_keys, probe

    try:
        keys = load_keys(env)
    except KeysError as exc:
        report.bad(f"{exc}; the shell hook runs the Python command for every event")
        return
    if keys is None:
        report.bad(
            "no HTTP hook key file: the shell hook runs the Python command for every event; "
            "install again"
        )
        return
    found = probe(keys.port, keys.token)
    if found.kind == "served" and found.helper == helper_name(socket_path(env)):
        report.ok(f"the shell hook reaches the helper at http://127.0.0.1:{keys.port}")
        return
    report.bad(
        f"the shell hook cannot reach this installation's helper at 127.0.0.1:{keys.port} "
        f"({found.kind}: {found.helper or found.detail or 'nothing'}): it runs the Python "
        "command for every event (slower). 'loopwarden install' again moves to a free port"
    )


def _http_handlers(data: Mapping[str, Any], agent: str) -> list[dict[str, Any]]:
    """loopwarden's HTTP hook handlers in a settings object."""
    found = []
    hooks = data.get("hooks")
    for groups in hooks.values() if isinstance(hooks, dict) else []:
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                if (
                    isinstance(handler, dict)
                    and handler.get("type") == "http"
                    and is_loopwarden_url(handler.get("url"), agent)
                ):
                    found.append(handler)
    return found


def _interpolate(value: str, allowed: list[str], env: Mapping[str, str]) -> str:
    """A header value as Claude Code fills it in: ``$VAR`` and ``${VAR}`` of the allowed
    variables, others empty."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, "") if name in allowed else ""

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)", fill, value)


def _check_http(
    agent: str, path: Path, data: Mapping[str, Any], env: Mapping[str, str], report: _Report
) -> None:
    """Claude Code's HTTP hooks: the port and key match the user's key file, the helper
    answers there, and a test event sent the way Claude Code sends it is allowed."""
    from ..hooks._protocol import socket_path
    from ..hooks.httpkeys import (
        HEADER_TOKEN,
        KeysError,
        helper_name,
        load_keys,
        parse_hook_url,
        probe,
        record_path,
    )
    from ..hooks.peeruid import PeerCheck

    try:
        keys = load_keys(env)
    except KeysError as exc:
        report.bad(str(exc))
        return
    if keys is None:
        report.bad(
            f"the HTTP hooks' key file {record_path(env)} is missing: every HTTP hook is "
            f"refused; run 'loopwarden install {agent}' again"
        )
        return
    handlers = _http_handlers(data, agent)
    for handler in handlers:
        found = parse_hook_url(handler.get("url"))
        headers = handler.get("headers")
        token = headers.get(HEADER_TOKEN) if isinstance(headers, dict) else None
        if found is not None and found[0] != keys.port:
            report.bad(
                f"an HTTP hook goes to port {found[0]}, but loopwarden serves port {keys.port} "
                f"({record_path(env)}): run 'loopwarden install {agent}' again"
            )
            return
        if token != keys.token:
            report.bad(
                f"an HTTP hook sends another key than the one in {record_path(env)}: the helper "
                f"refuses it (tool calls are not checked); run 'loopwarden install {agent}' again"
            )
            return
    report.info(f"HTTP hooks: http://127.0.0.1:{keys.port} (key in {record_path(env)})")
    if path.stat().st_mode & 0o044:
        report.info(
            f"other users can read {path}, which holds the key ('chmod 600' keeps it yours)"
        )
    check = PeerCheck.create()
    if check.kind == "none":
        report.info("the helper cannot tell which user connects here: only the key protects it")
    else:
        report.info(f"the helper refuses connections from other users (checked with {check.kind})")
    check.close()
    answering = probe(keys.port, keys.token)
    own = helper_name(socket_path(env))
    if answering.kind != "served" or answering.helper != own:
        who = answering.helper or answering.detail or "nothing"
        report.bad(
            f"port {keys.port} is not answered by this installation's helper ({answering.kind}: "
            f"{who}); Claude Code's tool calls go unchecked. 'loopwarden install {agent}' moves "
            "the hooks to a free port"
        )
        return
    handler = handlers[0]
    _post_test_event(agent, handler, env, report)


def _post_test_event(
    agent: str, handler: Mapping[str, Any], env: Mapping[str, str], report: _Report
) -> None:
    """Send doctor's harmless pre-call event to an HTTP hook, as Claude Code would."""
    import http.client
    from urllib.parse import urlsplit

    from ..hooks.httpkeys import parse_hook_url

    url = str(handler.get("url"))
    parsed = parse_hook_url(url)
    allowed = handler.get("allowedEnvVars")
    allowed = [str(v) for v in allowed] if isinstance(allowed, list) else []
    raw = handler.get("headers")
    headers = {str(k): _interpolate(str(v), allowed, env) for k, v in (raw or {}).items()}
    headers["Content-Type"] = "application/json"
    session = f"loopwarden-doctor-{uuid.uuid4().hex[:12]}"
    event = _probe_event(agent, session)
    parts = urlsplit(url)
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", target, body=orjson.dumps(event), headers=headers)
        response = conn.getresponse()
        status, body = response.status, response.read()
    except OSError as exc:
        report.bad(f"the HTTP hook did not answer: {exc}")
        return
    finally:
        conn.close()
        words = [agent, *(parsed[2] if parsed is not None else [])]
        _cleanup(agent, words, session, env, ADAPTERS[agent].run_id(event))
    elapsed = (time.perf_counter() - start) * 1000
    if status != 200:
        report.bad(f"the HTTP hook answered {status}: {body[:200]!r}")
        return
    try:
        answer = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        answer = body
    if answer != {}:
        report.bad(f"a harmless test call over HTTP was not simply allowed: {answer!r}")
        return
    report.ok(f"test {_pre_event(agent)} event over HTTP allowed in {elapsed:.0f} ms")


def _tests_a_call(agent: str, command: str) -> bool:
    """Whether doctor's test call goes through ``command``: all of them, except the
    commands of an agent's other events when each names its own (``--event``)."""
    words = _hook_words(command)
    if "--event" not in words:
        return True
    index = words.index("--event") + 1
    name = words[index] if index < len(words) else ""
    return ADAPTERS[agent].events.get(name) == "pre"


def _launcher(command: str) -> str:
    """The part of a hook command before the hook's own arguments."""
    found = split_hook_command(command)
    return shlex.join(found[0]) if found is not None else command


def _other_installation(agent: str, command: str, report: _Report) -> None:
    """Say so when the hook runs another loopwarden than this one (another virtualenv)."""
    mine, theirs = _launcher(hook_command(agent)), _launcher(command)
    if theirs != mine:
        trust = " (Codex then asks to trust the new command: /hooks)" if agent == "codex" else ""
        report.info(
            f"this hook runs {theirs}, not this installation ({mine}); "
            f"'loopwarden install {agent}' switches it{trust}"
        )


def _check_cli(agent: str, project: Path, env: Mapping[str, str], report: _Report) -> None:
    """The CLI's version, and (Codex) whether it trusts and runs loopwarden's hooks."""
    cli = clistate.TESTED[agent]
    title = AGENT_TITLES[agent]
    tested = ".".join(map(str, cli.tested))
    exe = clistate.find_cli(agent, env)
    if exe is None:
        report.info(f"{cli.binary} is not on PATH: its version and hook state are not checked")
        return
    found = clistate.version(exe, env)
    if found is None:
        report.bad(f"{exe} --version gave no version; is {title} installed correctly?")
    elif found < cli.tested:
        shown = ".".join(map(str, found))
        report.bad(
            f"{title} {shown} is older than {tested}, the version loopwarden's hooks are "
            f"tested with (they need {cli.needs}); upgrade {title}"
        )
    else:
        shown = ".".join(map(str, found))
        note = "" if found == cli.tested else f" (tested with {tested})"
        report.ok(f"{title} {shown}{note}")
    if agent == "codex":
        _check_codex_trust(exe, project, env, report)


def _check_codex_trust(exe: str, project: Path, env: Mapping[str, str], report: _Report) -> None:
    hooks = clistate.codex_hooks(exe, env, str(project))
    if isinstance(hooks, str):
        report.info(f"could not ask Codex whether it trusts the hooks: {hooks}")
        return
    ours = [h for h in hooks if is_loopwarden_command(h.get("command"), "codex")]
    if not ours:
        report.bad(
            "Codex does not list loopwarden's hooks for this project; check hooks.json "
            "and that hooks are not disabled in config.toml"
        )
        return
    untrusted = [h for h in ours if h.get("trustStatus") != "trusted"]
    disabled = [h for h in ours if h.get("enabled") is False]
    if untrusted:
        events = ", ".join(sorted({str(h.get("eventName")) for h in untrusted}))
        report.bad(
            f"Codex does not trust {len(untrusted)} of loopwarden's {len(ours)} hooks "
            f"({events}; status {untrusted[0].get('trustStatus')}): it skips them without "
            "a word. Start codex in this project and approve them with /hooks (needed after "
            "every install that changes the command, e.g. from another virtualenv)"
        )
    if disabled:
        report.bad(
            f"{len(disabled)} of loopwarden's hooks are disabled in Codex; enable them with /hooks"
        )
    if not untrusted and not disabled:
        report.ok(f"Codex trusts and runs loopwarden's {len(ours)} hooks")


def _check_store(
    config: str | None, state: str | None, env: Mapping[str, str], report: _Report
) -> None:
    from ..hooks.context import HookContext
    from ..hooks.options import HookOptions, config_path, log_path

    opts = HookOptions("doctor", config, state, None, True, False)
    cwd = os.getcwd()
    path = config_path(opts, env, cwd)
    ctx = HookContext()
    try:
        try:
            entry = ctx.guard_for(opts, env, cwd)
        except ConfigError as exc:
            report.bad(f"config: {exc}")
            return
        if path is None:
            report.ok("config: none found; the hook uses the defaults with detection on")
        else:
            report.ok(f"config: {path}")
        store = entry.guard.store
        report.info(f"state store: {getattr(store, 'url', store)!r}")
        effective = entry.guard.config_for("doctor")
        key = f"doctor\x1f{uuid.uuid4().hex}"
        try:
            store.transact(key, effective, lambda st: st.window.capacity)
            store.delete(key)
            if isinstance(store, Inspectable):
                store.check()
        except LoopwardenError as exc:
            report.bad(f"state store: {exc}")
        except Exception as exc:
            report.bad(f"state store: {type(exc).__name__}: {exc}")
        else:
            report.ok("state store: writable and consistent")
        report.info(f"hook log: {log_path(env)}")
    finally:
        ctx.close()


def _check_helper(env: Mapping[str, str], report: _Report, before: int | None) -> None:
    """The hook helper, and whether the test events above started it (``before``: its pid
    before them)."""
    from ..hooks._protocol import HELLO_TIMEOUT, socket_path
    from ..hooks.daemon import idle_text, silent_helper, wait_for_start

    pid = wait_for_start(env)  # a test event above may have just started one
    silent = silent_helper(env) if pid is None else None
    if silent is not None:
        report.bad(
            f"hook helper: pid {silent} listens but does not answer (stopped, or stuck); each "
            f"hook call waits {HELLO_TIMEOUT:g} s for it, then handles its event itself. "
            "End it with 'loopwarden hook --stop-daemon'"
        )
        return
    if pid is None:
        report.info("hook helper: not running (the next hook call starts it)")
        return
    started = " (started by the test events above)" if before != pid else ""
    report.ok(f"hook helper: running{started}, pid {pid}, socket {socket_path(env)}")
    report.info(
        f"it stays running to answer hook calls, and exits after {idle_text(env)} without "
        "one ($LOOPWARDEN_HOOK_IDLE seconds; at least an hour while it serves HTTP hooks); "
        "stop it now with 'loopwarden hook --stop-daemon'"
    )


@click.command(
    name="doctor",
    help=(
        "Show which loopwarden hooks are installed for each coding agent (Claude Code, "
        "Codex CLI, Gemini CLI, OpenCode, Cline CLI, GitHub Copilot CLI, Qwen Code), run a "
        "test event through each, and check the config and the state store."
    ),
    context_settings=CONTEXT,
)
@click.option("--agent", type=click.Choice(sorted(AGENTS)), help="Check only this agent.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="Project directory (default: current directory).",
)
@click.option("--config", metavar="FILE", help="As for 'loopwarden hook'.")
@click.option("--state", metavar="URL_OR_PATH", help="As for 'loopwarden hook'.")
def doctor_command(
    agent: str | None, directory: Path | None, config: str | None, state: str | None
) -> int:
    from ..hooks.daemon import ping

    env = dict(os.environ)
    project = (directory or Path.cwd()).resolve()
    report = _Report()
    helper = ping(env)
    click.echo("loopwarden doctor")
    click.echo("configuration and state:")
    _check_store(config, state, env, report)
    installed = False
    for name in AGENTS if agent is None else [agent]:
        click.echo(f"{AGENT_TITLES[name]}:")
        installed = _check_agent(name, project, env, report) or installed
    click.echo("helper:")
    _check_helper(env, report, helper)
    if report.problems:
        click.echo(f"{report.problems} problem(s) found.")
        return EXIT_FAIL
    if not installed:
        click.echo("No loopwarden hooks installed; add them with 'loopwarden install AGENT'.")
    else:
        click.echo("Everything works.")
    return EXIT_OK


def main(argv: list[str]) -> int:
    return run_command(doctor_command, argv, "loopwarden doctor")
