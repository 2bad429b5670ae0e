"""Claude Code's HTTP hooks: real HTTP requests to a real helper process.

Each test installs loopwarden for Claude Code in its own HOME (its own port and
key), runs the session-start hook command the way Claude Code does (which
starts a helper in a private runtime directory and hands it the port), then
talks HTTP to that port as Claude Code would.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Self

import orjson
import pytest

from loopwarden.hooks import httpserve
from loopwarden.hooks._protocol import socket_path
from loopwarden.hooks.httpkeys import (
    HEADER_TOKEN,
    HttpKeys,
    data_dir,
    env_header,
    helper_name,
    load_keys,
    parse_hook_url,
    probe,
    record_path,
)
from loopwarden.hooks.options import UsageError, parse_args
from loopwarden.hooks.peeruid import PeerCheck
from loopwarden.stores.sqlite import SQLiteStore, default_state_path
from tests._wait import wait_until
from tests.hooks import payloads as p
from tests.hooks.conftest import SMALL, Answer, Hook, helper_ready, stop_helper
from tests.hooks.test_claude_code import compacted_then_looping, script
from tests.hooks.test_install import install, user_file

SETPRIV = shutil.which("setpriv")


@pytest.fixture(name="env")
def fixture_env(hook_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A HOME and a private runtime directory: each test starts and stops its own helper."""
    env = {**hook_env, "LOOPWARDEN_RUNTIME_DIR": str(tmp_path / "run")}
    yield env
    stop_helper(env)


def settings(env: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(user_file(env, "claude-code").read_text())
    return data


def command_of(env: dict[str, str], event: str) -> str:
    [group] = settings(env)["hooks"][event]
    command: str = group["hooks"][0]["command"]
    return command


def installed(env: dict[str, str], *args: str) -> HttpKeys:
    """``loopwarden install claude-code`` (HTTP hooks): the user's port and key."""
    done = install(env, "claude-code", *args)
    assert done.returncode == 0, done.stderr
    keys = load_keys(env)
    assert keys is not None
    return keys


def run_command(env: dict[str, str], event: str, payload: dict[str, Any]) -> Answer:
    """Run the command installed for ``event`` as Claude Code does (a shell, JSON on stdin)."""
    done = subprocess.run(
        command_of(env, event),
        shell=True,
        input=orjson.dumps(payload),
        env=env,
        capture_output=True,
        timeout=120,
    )
    parsed = orjson.loads(done.stdout) if done.stdout.strip() else None
    return Answer(done.returncode, parsed, done.stdout, done.stderr.decode())


def session_start(env: dict[str, str], session: str = "1ec9a2f4-sess") -> Answer:
    answer = run_command(env, "SessionStart", p.claude_session_start("startup", session=session))
    assert answer.code == 0, answer.stderr
    return answer


class Reply(NamedTuple):
    status: int
    json: Any
    headers: dict[str, str]


def claude_headers(env: dict[str, str], keys: HttpKeys) -> dict[str, str]:
    """The headers Claude Code sends to loopwarden's hook (its settings, filled in)."""
    [group] = settings(env)["hooks"]["PreToolUse"]
    handler = group["hooks"][0]
    headers: dict[str, str] = {}
    for name, value in handler["headers"].items():
        if value.startswith("${"):
            value = env.get(value[2:-1], "")
        headers[name] = value
    assert headers[HEADER_TOKEN] == keys.token
    return headers


def request(
    keys: HttpKeys,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    conn: http.client.HTTPConnection | None = None,
) -> Reply:
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", keys.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return Reply(response.status, json.loads(data) if data else None, dict(response.headers))
    finally:
        if own:
            conn.close()


class HttpHook:
    """Claude Code's HTTP hook as a callable like ``conftest.Hook`` (one POST per event)."""

    def __init__(self, env: dict[str, str], keys: HttpKeys) -> None:
        self.env = env
        self.keys = keys
        [group] = settings(env)["hooks"]["PreToolUse"]
        url = group["hooks"][0]["url"]
        self.path = url.split(str(keys.port), 1)[1]
        self.headers = claude_headers(env, keys)
        self.conn = http.client.HTTPConnection("127.0.0.1", keys.port, timeout=30)

    def __call__(self, event: Any, daemon: bool = True) -> Answer:
        reply = request(self.keys, "POST", self.path, orjson.dumps(event), self.headers, self.conn)
        assert reply.status == 200, reply
        return Answer(0, reply.json, orjson.dumps(reply.json), "")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def test_install_writes_http_hooks_for_the_tool_call_events(env: dict[str, str]) -> None:
    """install (user scope) writes HTTP hooks for PreToolUse and PostToolBatch, with the
    user's port and key, and commands for the session's start, each prompt and its end."""
    keys = installed(env)
    data = settings(env)["hooks"]
    assert list(data) == [
        "PreToolUse",
        "PostToolBatch",
        "SessionStart",
        "UserPromptSubmit",
        "SessionEnd",
    ]
    for event in ("PreToolUse", "PostToolBatch"):
        [group] = data[event]
        [handler] = group["hooks"]
        assert handler["type"] == "http"
        assert handler["url"] == f"http://127.0.0.1:{keys.port}/loopwarden/v1/hook/claude-code"
        assert handler["headers"][HEADER_TOKEN] == keys.token
        assert handler["headers"][env_header("HOME")] == "${HOME}"
        assert "HOME" in handler["allowedEnvVars"]
        assert handler["onFailure"] == "continue"  # fail open when nothing answers
        assert handler["timeout"] == 10
    assert data["PreToolUse"][0]["matcher"] == ""
    for event in ("SessionStart", "UserPromptSubmit"):
        [group] = data[event]
        assert "matcher" not in group  # every source: startup, resume, clear, compact
        assert shlex.split(group["hooks"][0]["command"])[-3:] == [
            "claude-code",
            "--http-port",
            str(keys.port),
        ]
    assert shlex.split(data["SessionEnd"][0]["hooks"][0]["command"])[-1] == "claude-code"
    # The key is the user's alone: the key file and a settings file loopwarden creates.
    assert record_path(env).stat().st_mode & 0o777 == 0o600
    assert user_file(env, "claude-code").stat().st_mode & 0o777 == 0o600


def test_install_switches_between_http_and_command_hooks(env: dict[str, str]) -> None:
    """--command replaces the HTTP hooks by command hooks and --http brings them back, each
    time with the user's own hook kept; uninstall gives the file back byte for byte."""
    path = user_file(env, "claude-code")
    path.parent.mkdir()
    mine = {
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}]
        }
    }
    original = json.dumps(mine, indent=4)
    path.write_text(original)
    keys = installed(env)
    http_text = path.read_text()
    assert install(env, "claude-code").stdout.count("already installed") == 1
    assert installed(env) == keys  # the same port and key on every install
    done = install(env, "claude-code", "--command")
    assert done.returncode == 0, done.stderr
    data = settings(env)["hooks"]
    assert data["PreToolUse"][0] == mine["hooks"]["PreToolUse"][0]
    assert [h["type"] for g in data["PreToolUse"] for h in g["hooks"]] == ["command", "command"]
    assert data["SessionStart"][0]["matcher"] == "compact"
    assert "UserPromptSubmit" not in data
    assert "--http-port" not in path.read_text()
    assert installed(env, "--http") == keys
    assert json.loads(path.read_text()) == json.loads(http_text)  # (events in another order)
    removed = install(env, "claude-code", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert "loopwarden" not in path.read_text()
    assert json.loads(path.read_text()) == mine


def test_http_is_refused_where_it_does_not_belong(env: dict[str, str], tmp_path: Path) -> None:
    """--http with --project (a shared file) or for an agent without HTTP hooks is refused;
    a project install of Claude Code writes command hooks."""
    project = tmp_path / "project"
    project.mkdir()
    done = install(env, "claude-code", "--project", "--http", cwd=project)
    assert done.returncode != 0 and "shared settings file" in done.stderr
    done = install(env, "codex", "--http")
    assert done.returncode != 0 and "no HTTP hooks" in done.stderr
    done = install(env, "claude-code", "--project", cwd=project)
    assert done.returncode == 0, done.stderr
    text = (project / ".claude" / "settings.json").read_text()
    assert '"type": "command"' in text and '"type": "http"' not in text


def test_session_start_makes_the_helper_serve_the_port(env: dict[str, str]) -> None:
    """The session-start command starts a helper that answers on the user's port, for this
    installation, and a prompt's command finds it there."""
    keys = installed(env)
    assert probe(keys.port, keys.token).kind == "closed"
    assert session_start(env).json == {}
    found = probe(keys.port, keys.token)
    assert found.kind == "served" and found.helper == helper_name(socket_path(env))
    prompt = {**p.claude_base("UserPromptSubmit"), "prompt": "poll"}
    answer = run_command(env, "UserPromptSubmit", prompt)
    assert (answer.code, answer.json, answer.stderr) == (0, {}, "")


@pytest.mark.usefixtures("small_config")
def test_http_answers_are_the_command_hooks_answers(env: dict[str, str]) -> None:
    """The same loop gets the same warning, block and stop over HTTP as from the command
    hook, and leaves the same state."""
    keys = installed(env)
    session_start(env)
    with HttpHook(env, keys) as hook:
        over_http = script(hook, daemon=True, session="http-sess")
    by_command = script(Hook(env, "claude-code"), daemon=True, session="command-sess")
    assert over_http == by_command
    assert over_http[-1]["continue"] is False  # the loop was stopped
    hook = Hook(env, "claude-code")
    for session in ("http-sess", "command-sess"):
        state = hook.state(session, "prompt-1", SMALL)
        assert state.stopped is not None and state.stopped.code == "global_circuit_breaker"


class ClaudeHooks(HttpHook):
    """Every event the way an HTTP install delivers it: SessionStart to the command hook,
    the tool-call events over HTTP."""

    def __call__(self, event: Any, daemon: bool = True) -> Answer:
        if event.get("hook_event_name") == "SessionStart":
            return run_command(self.env, "SessionStart", event)
        return super().__call__(event, daemon)


@pytest.mark.usefixtures("small_config")
def test_compaction_armed_by_the_session_start_command_guards_http_events(
    env: dict[str, str],
) -> None:
    """SessionStart with source compact (a command hook) arms the post-compaction guard:
    the same call three times after it, over HTTP, aborts the next prompt's run."""
    keys = installed(env)
    session_start(env)
    with ClaudeHooks(env, keys) as hook:
        posts = compacted_then_looping(hook, "prompt-2")
    assert posts[2]["continue"] is False and "compaction" in posts[2]["stopReason"]


def test_the_environment_comes_from_the_request(env: dict[str, str], tmp_path: Path) -> None:
    """The helper answers with the environment Claude Code sends (here: a config file named
    by LOOPWARDEN_CONFIG in the session's environment), not with its own."""
    keys = installed(env)
    session_start(env)
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL))
    with HttpHook({**env, "LOOPWARDEN_CONFIG": str(config)}, keys) as hook:
        small = script(hook, daemon=True, session="small-sess")
    assert small[-1]["continue"] is False  # stopped at SMALL's circuit breaker
    with HttpHook(env, keys) as hook:  # no such variable: the defaults, no stop so soon
        default = script(hook, daemon=True, session="default-sess")
    assert len(default) == 10 and not any("continue" in answer for answer in default)


def test_options_reach_the_helper_in_the_url(env: dict[str, str], tmp_path: Path) -> None:
    """install --config FILE puts the hook's options into the HTTP hooks' URL (made
    absolute); the helper answers with that config."""
    config = tmp_path / "small.json5"
    config.write_text(json.dumps(SMALL))
    keys = installed(env, "--config", str(config))
    [group] = settings(env)["hooks"]["PostToolBatch"]
    url = group["hooks"][0]["url"]
    assert parse_hook_url(url) == (keys.port, "claude-code", ["--config", str(config)])
    session_start(env)
    with HttpHook(env, keys) as hook:
        answers = script(hook, daemon=True)
    assert answers[-1]["continue"] is False  # SMALL's circuit breaker, not the defaults'


def test_requests_without_the_key_or_from_a_web_page_are_refused(env: dict[str, str]) -> None:
    """No key or a wrong one: 401; an Origin header or a foreign Host: 403; other paths and
    methods: 404/405. Every refusal names the helper; the hook log says why, once."""
    keys = installed(env)
    session_start(env)
    headers = claude_headers(env, keys)
    path = "/loopwarden/v1/hook/claude-code"
    event = orjson.dumps(p.claude_pre(1))
    without = {k: v for k, v in headers.items() if k != HEADER_TOKEN}
    assert request(keys, "POST", path, event, without).status == 401
    wrong = {**headers, HEADER_TOKEN: "0" * 64}
    refused = request(keys, "POST", path, event, wrong)
    assert refused.status == 401
    assert refused.headers["X-Loopwarden-Helper"] == helper_name(socket_path(env))
    assert (
        request(keys, "POST", path, event, {**headers, "Origin": "https://x.example"}).status == 403
    )
    assert request(keys, "POST", path, event, {**headers, "Host": "evil.example"}).status == 403
    assert request(keys, "POST", "/loopwarden/v1/other", event, headers).status == 404
    assert request(keys, "POST", "/loopwarden/v1/hook/cursor", event, headers).status == 404
    assert request(keys, "GET", path, None, headers).status == 405
    ping = request(keys, "GET", "/loopwarden/v1/ping", None, headers)
    assert ping.status == 200 and ping.json["helper"] == helper_name(socket_path(env))
    assert request(keys, "POST", path, event, headers).json == {}  # the right key: answered
    log = (data_dir(env) / "hook.log").read_text()
    assert log.count("without the right key refused (401)") == 1


def raw_request(port: int, token: str) -> bytes:
    return (
        f"GET /loopwarden/v1/ping HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"{HEADER_TOKEN}: {token}\r\nConnection: close\r\n\r\n"
    ).encode()


CLIENT = """
import socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
sock.sendall(sys.stdin.buffer.read())
data = b""
while chunk := sock.recv(65536):
    data += chunk
sys.stdout.buffer.write(data)
"""


# The client another user runs: bash's /dev/tcp, so that it needs nothing that user may
# not be able to read (a Python built with a shared libpython under /root cannot start).
BASH_CLIENT = 'exec 3<>"/dev/tcp/127.0.0.1/$1" && cat >&3 && cat <&3'
BASH_HOLD = 'exec 3<>"/dev/tcp/127.0.0.1/$1" && cat >/dev/null'


def as_nobody(argv: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as the user nobody (needs root and setpriv)."""
    assert SETPRIV is not None
    return subprocess.run(
        [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
        input=stdin,
        capture_output=True,
        timeout=60,
        cwd="/",
    )


needs_other_user = pytest.mark.skipif(
    SETPRIV is None or os.geteuid() != 0 or not sys.platform.startswith("linux"),
    reason="running a client as another user needs Linux, root and setpriv",
)


@needs_other_user
def test_connections_of_other_users_are_refused(env: dict[str, str]) -> None:
    """A client running as another user is refused (403) even with the right key; the
    same request from the user is answered."""
    keys = installed(env)
    session_start(env)
    request_bytes = raw_request(keys.port, keys.token)
    other = as_nobody(["/bin/bash", "-c", BASH_CLIENT, "client", str(keys.port)], request_bytes)
    assert other.returncode == 0, other.stderr
    assert other.stdout.startswith(b"HTTP/1.1 403 "), other.stdout[:200]
    mine = subprocess.run(
        [sys.executable, "-I", "-c", CLIENT, str(keys.port)],
        input=request_bytes,
        capture_output=True,
        timeout=60,
    )
    assert mine.stdout.startswith(b"HTTP/1.1 200 "), mine.stdout[:200]
    assert "refused (403: only uid" in (data_dir(env) / "hook.log").read_text()


@needs_other_user
@pytest.mark.parametrize("kind", ["netlink", "proc"])
def test_peer_check_tells_the_connecting_user(kind: str) -> None:
    """Both ways of asking the kernel name the owner of a loopback client socket: this
    process's uid for its own connection, nobody's for one made as nobody."""
    check = PeerCheck.create()
    if kind == "proc" and check.kind == "netlink":
        check.close()
        check = PeerCheck("proc", os.open("/proc/self/net/tcp", os.O_RDONLY | os.O_CLOEXEC))
    assert check.kind == kind
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(60)  # a client that could not start fails the test, not the session
    port = server.getsockname()[1]
    try:
        mine = socket.create_connection(("127.0.0.1", port))
        conn, peer = server.accept()
        assert check.uid(peer, ("127.0.0.1", port)) == os.getuid()
        assert SETPRIV is not None
        nobody = subprocess.Popen(
            [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash",
             "-c", BASH_HOLD, "client", str(port)],
            stdin=subprocess.PIPE,
            cwd="/",
        )  # fmt: skip
        try:
            other, other_peer = server.accept()
        except BaseException:
            nobody.kill()
            nobody.communicate()
            raise
        try:
            assert check.uid(other_peer, ("127.0.0.1", port)) == 65534
        finally:
            assert nobody.stdin is not None
            nobody.stdin.close()
            nobody.wait(30)
            other.close()
        assert check.uid(("127.0.0.1", 1), ("127.0.0.1", port)) is None  # no such socket
        mine.close()
        conn.close()
    finally:
        server.close()
        check.close()


def test_bad_requests_are_refused_without_stalling_anyone(env: dict[str, str]) -> None:
    """A client that sends half a request holds up no one; an oversized body (413), an
    oversized head (431) and a chunked body (501) are refused and the connection closed."""
    keys = installed(env)
    session_start(env)
    headers = claude_headers(env, keys)
    path = "/loopwarden/v1/hook/claude-code"
    with (
        socket.create_connection(("127.0.0.1", keys.port)) as slow,
        HttpHook(env, keys) as hook,
    ):
        slow.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
        assert hook(p.claude_pre(1)).json == {}  # answered while the slow one is pending
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        with socket.create_connection(("127.0.0.1", keys.port), timeout=30) as big:
            big.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{keys.port}\r\n{head}"
                f"Content-Length: {httpserve.MAX_BODY + 1}\r\n\r\n{{".encode()
            )
            assert big.recv(65536).startswith(b"HTTP/1.1 413 ")
        long_head = {**headers, "X-Padding": "x" * (httpserve.MAX_HEAD + 1)}
        assert request(keys, "POST", path, b"{}", long_head).status == 431
        with socket.create_connection(("127.0.0.1", keys.port), timeout=30) as chunked:
            chunked.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{keys.port}\r\n{head}"
                "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n".encode()
            )
            answer = chunked.recv(65536)
        assert answer.startswith(b"HTTP/1.1 501 ")
        assert hook(p.claude_pre(2)).json == {}  # the kept-alive connection still works


def test_more_connections_than_the_bound(env: dict[str, str]) -> None:
    """With every connection slot held by an idle client, a new client is still answered
    (the connection idle longest is closed for it)."""
    keys = installed(env)
    session_start(env)
    headers = claude_headers(env, keys)
    idle = []
    try:
        for _ in range(httpserve.MAX_CONNECTIONS):
            conn = http.client.HTTPConnection("127.0.0.1", keys.port, timeout=30)
            assert request(keys, "GET", "/loopwarden/v1/ping", None, headers, conn).status == 200
            idle.append(conn)
        late = request(keys, "GET", "/loopwarden/v1/ping", None, headers)
        assert late.status == 200
    finally:
        for conn in idle:
            conn.close()


@contextlib.contextmanager
def other_program(port: int) -> Iterator[None]:
    """Another program on ``port``: it answers every request 404."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
        server.close()


def test_a_port_taken_by_another_program_is_reported_and_install_moves(
    env: dict[str, str],
) -> None:
    """When another program listens on the port, the session's hooks tell the user (a
    systemMessage, and the hook log), and installing again moves to a free port."""
    keys = installed(env)
    with other_program(keys.port):
        answer = session_start(env)
        message = answer.json["systemMessage"]
        assert f"port {keys.port} on 127.0.0.1 is used by another program" in message
        assert "not checked" in message
        assert f"port {keys.port}" in (data_dir(env) / "hook.log").read_text()
        done = install(env, "claude-code")
        assert done.returncode == 0, done.stderr
        assert f"port {keys.port} is taken" in done.stdout
        moved = load_keys(env)
        assert moved is not None and moved.port != keys.port and moved.token == keys.token
        assert f"127.0.0.1:{moved.port}/" in user_file(env, "claude-code").read_text()
        assert session_start(env).json == {}
        assert probe(moved.port, moved.token).kind == "served"


def test_without_a_helper_the_user_is_told(env: dict[str, str]) -> None:
    """With the helper switched off nothing can answer HTTP hooks: the session's hooks say
    so (Claude Code then runs every call unchecked)."""
    keys = installed(env)
    off = {**env, "LOOPWARDEN_HOOK_DAEMON": "0"}
    answer = run_command(off, "SessionStart", p.claude_session_start("startup"))
    assert "switched off" in answer.json["systemMessage"]
    assert "--command" in answer.json["systemMessage"]
    assert probe(keys.port, keys.token).kind == "closed"


def test_a_stopped_helper_is_back_at_the_next_prompt(env: dict[str, str]) -> None:
    """After the helper exits (idle, upgrade, --stop-daemon) nothing answers the port; the
    next prompt's command starts a helper that serves it again."""
    keys = installed(env)
    session_start(env)
    stop_helper(env)
    wait_until(lambda: probe(keys.port, keys.token).kind == "closed", what="the port to close")
    prompt = {**p.claude_base("UserPromptSubmit"), "prompt": "poll"}
    assert run_command(env, "UserPromptSubmit", prompt).json == {}
    assert probe(keys.port, keys.token).kind == "served"


def test_a_new_key_reaches_the_running_helper(env: dict[str, str]) -> None:
    """When the key file changes (a new key), the next session start gives the running
    helper the new key: the new one is accepted, the old one refused."""
    keys = installed(env)
    session_start(env)
    new = "f" * 64
    path = record_path(env)
    path.write_text(json.dumps({"port": keys.port, "token": new, "proof": keys.proof}))
    assert probe(keys.port, new).kind == "refused"
    assert session_start(env).json == {}
    assert probe(keys.port, new).kind == "served"
    assert probe(keys.port, keys.token).kind == "refused"


def test_a_key_file_others_can_read_is_refused(env: dict[str, str]) -> None:
    """A key file with group or world permissions is not trusted: the session is told."""
    installed(env)
    record_path(env).chmod(0o644)
    answer = session_start(env)
    assert "readable by you only" in answer.json["systemMessage"]


def test_data_dir_is_where_the_state_lives(tmp_path: Path) -> None:
    """The key file sits next to the default state file, whatever the environment says."""
    for env in (
        {"HOME": str(tmp_path)},
        {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")},
        {"HOME": str(tmp_path), "XDG_DATA_HOME": "relative/ignored"},
    ):
        assert data_dir(env) == default_state_path(env).parent


def test_http_port_option() -> None:
    """--http-port takes a port number; anything else is a usage error (exit 1)."""
    assert parse_args(["claude-code", "--http-port", "27431"]).http_port == 27431
    assert parse_args(["codex", "--http-port", "auto"]).http_port == 0  # the key file's
    assert parse_args(["claude-code"]).http_port is None
    for bad in ("0", "70000", "http"):
        with pytest.raises(UsageError, match="--http-port"):
            parse_args(["claude-code", "--http-port", bad])


def test_doctor_checks_the_http_hooks(env: dict[str, str]) -> None:
    """doctor sends a test event over HTTP the way Claude Code does, and reports a key in
    the settings that the helper refuses, and a port another program holds."""
    from tests.hooks.test_doctor import doctor

    keys = installed(env)
    done = doctor(env, "--agent", "claude-code")
    assert done.returncode == 0, done.stdout
    assert "[ok] test SessionStart event answered" in done.stdout
    assert "[ok] test PreToolUse event over HTTP allowed" in done.stdout
    assert f"HTTP hooks: http://127.0.0.1:{keys.port}" in done.stdout
    store = SQLiteStore(Hook(env, "claude-code").state_db)
    try:
        assert store.keys() == []  # the test sessions (command and HTTP) left nothing behind
    finally:
        store.close()

    path = user_file(env, "claude-code")
    path.write_text(path.read_text().replace(keys.token, "0" * 64))
    done = doctor(env, "--agent", "claude-code")
    assert done.returncode == 1
    assert "sends another key" in done.stdout

    installed(env)  # the settings' key back
    stop_helper(env)
    wait_until(lambda: probe(keys.port, keys.token).kind == "closed", what="the port to close")
    with other_program(keys.port):
        done = doctor(env, "--agent", "claude-code")
    assert done.returncode == 1
    assert "used by another program" in done.stdout
    assert f"port {keys.port} is not answered by this installation's helper" in done.stdout


def test_a_port_that_accepts_but_never_answers_is_reported(env: dict[str, str]) -> None:
    """A listener that takes connections and says nothing (a stopped helper, a stuck
    program) is reported as such, without waiting for it more than once."""
    keys = installed(env)
    with socket.create_server(("127.0.0.1", keys.port)):
        answer = session_start(env)
    message = answer.json["systemMessage"]
    assert f"something listens on 127.0.0.1:{keys.port} but does not answer" in message


def test_a_prompt_hook_imports_nothing_more_when_the_port_is_served(env: dict[str, str]) -> None:
    """Each prompt's command checks the port with builtins only: when this helper answers
    there, it imports no more of loopwarden than any hook call."""
    keys = installed(env)
    session_start(env)
    assert helper_ready(env) and probe(keys.port, keys.token).kind == "served"
    prompt = {**p.claude_base("UserPromptSubmit"), "prompt": "poll"}
    done = subprocess.run(
        command_of(env, "UserPromptSubmit"),
        shell=True,
        input=orjson.dumps(prompt),
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
        capture_output=True,
        timeout=60,
    )
    assert done.stdout == b"{}"
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    ours = {name for name in imported if name.split(".")[0] == "loopwarden"}
    assert ours == {"loopwarden", "loopwarden.hooks", "loopwarden.hooks._protocol"}


def test_on_stop_ask_and_answer_over_http(env: dict[str, str], tmp_path: Path) -> None:
    """The HTTP hooks share the command hooks' stop path: an interactive session is asked
    ("Yes" lifts the stop for the call), ``claude -p`` gets the stop with its summary."""
    from tests.hooks.test_onstop import batch, claude_transcript, loop_to_stop, write_config

    keys = installed(env)
    write_config(env, None)
    session_start(env)
    interactive = claude_transcript(tmp_path / "cli.jsonl", "cli")
    with HttpHook(env, keys) as hook:
        n, asked = loop_to_stop(hook, interactive)
        assert asked["hookSpecificOutput"]["permissionDecision"] == "ask"
        hook(batch(n, "pending", interactive))
        assert Hook(env, "claude-code").state("1ec9a2f4-sess", "prompt-1", SMALL).stopped is None
        printed = claude_transcript(tmp_path / "p.jsonl", "sdk-cli", prompt="prompt-2")
        for m in range(50, 60):
            stop = hook(p.claude_pre(m, prompt="prompt-2", transcript=printed)).json
            if "continue" in stop:
                break
            hook(p.claude_batch([(m, "Bash", "pending")], prompt="prompt-2"))
    assert stop["continue"] is False
    assert "loopwarden stopped this run (rule global_circuit_breaker" in stop["systemMessage"]
