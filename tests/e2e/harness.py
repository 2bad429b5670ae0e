"""Drive a real coding-agent CLI, with loopwarden's hook installed, against a scripted model.

A :class:`Workspace` is one test's world: a HOME that already holds the user's
own settings and hook, a project directory, the loopwarden config in force and
a private helper runtime directory. ``install()`` runs the real ``loopwarden
install AGENT`` from this virtualenv; ``run()`` starts the CLI once per prompt
inside a network namespace with only ``lo`` (``sandbox.py``) and returns an
:class:`Outcome`: every request the model received, the CLI's output, and how
often the shell command really ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwarden import LoopGuard, load_config
from loopwarden.engine.detectors.loopwarden import ConsecutiveRepeatSettings
from loopwarden.stores.sqlite import SQLiteStore, default_state_path

from . import views

HERE = Path(__file__).resolve().parent
PINS: dict[str, dict[str, str]] = json.loads((HERE / "clis.json").read_text())
LOOPWARDEN = Path(sys.executable).with_name("loopwarden")
SANDBOX = HERE / "sandbox.py"
REQUIRED = os.environ.get("LOOPWARDEN_E2E_REQUIRED", "") == "1"
"""Set in CI: a missing CLI or namespace fails the suite instead of skipping it."""

# The user's own hook: appends to a log so a test can see it still runs (prints nothing).
USER_HOOK = "sh -c 'cat >/dev/null; echo ran >> \"$HOME/user-hook.log\"'"
# Nothing may leave the machine: updates, telemetry, error reports off.
QUIET_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "GEMINI_CLI_NO_RELAUNCH": "true",
    "NO_COLOR": "1",
}


def cache_root() -> Path:
    chosen = os.environ.get("LOOPWARDEN_E2E_CACHE")
    return Path(chosen) if chosen else Path.home() / ".cache" / "loopwarden-e2e"


def cli_path(agent: str) -> Path:
    """Where ``scripts/e2e-cli-setup`` puts the pinned CLI of ``agent``."""
    pin = PINS[agent]
    return cache_root() / f"{agent}-{pin['version']}" / "node_modules" / ".bin" / pin["bin"]


def netns_prefix() -> list[str] | None:
    """The command prefix that runs a process in a fresh network namespace, if any works."""
    if shutil.which("unshare") is None:
        return None
    candidates = [["unshare", "-n", "--"]] if os.geteuid() == 0 else []
    candidates.append(["unshare", "-r", "-n", "--"])
    for prefix in candidates:
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return None


@dataclass(frozen=True)
class Thresholds:
    """The loop thresholds of the config in force, as call numbers of a no-progress loop."""

    warning: int
    critical: int
    breaker: int
    unknown: int
    window: int

    @property
    def first_warning(self) -> int:
        return self.warning + 1

    @property
    def first_block(self) -> int:
        return self.critical + 1

    @property
    def stop(self) -> int:
        return self.breaker + 1


def hook_default_config() -> dict[str, Any]:
    """The config the hook uses when there is no config file (wherever the runner keeps it)."""
    for module in ("loopwarden.hooks.options", "loopwarden.hooks.runner"):
        try:
            found = getattr(__import__(module, fromlist=["x"]), "HOOK_DEFAULT_CONFIG", None)
        except ImportError:
            continue
        if found is not None:
            return json.loads(json.dumps(found))
    raise RuntimeError("cannot find the hook's default config (HOOK_DEFAULT_CONFIG)")


@dataclass
class Run:
    argv: list[str]
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    cpu: float = 0.0
    """CPU seconds of the CLI and the processes it waited for (its hooks)."""

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines of a ``stream-json``/``--json`` output."""
        found = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found


@dataclass
class Outcome:
    agent: str
    requests: list[dict[str, Any]]
    runs: list[Run]
    executions: int
    user_hook_runs: int
    hook_log: str

    @property
    def main(self) -> list[dict[str, Any]]:
        """Requests of the main conversation (each took one scripted step)."""
        return [r for r in self.requests if r["kind"] == "main"]

    def results(self) -> list[views.Shown | None]:
        """What the model was shown after each main request's call (None: never shown)."""
        return views.results(self.agent, self.main)

    def text(self) -> str:
        """Everything the model received, as one string (for 'never shown' checks)."""
        return "\n".join(json.dumps(r["body"]) for r in self.requests)

    def hook_events(self) -> list[tuple[str, str]]:
        """(action, detector) of each loop event in the hook log, in order."""
        return hook_events(self.hook_log)


@dataclass
class Workspace:
    """One test's HOME, project and loopwarden state, and the CLI it drives."""

    agent: str
    root: Path
    runtime: Path
    netns: list[str]
    extra_settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    """More environment variables for the CLI (and so for its hooks)."""
    api_port: int = 0
    """A fixed port for the fake API (0: the CLI's own, or any free one)."""

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.work = self.root / "work"
        self.count_file = self.root / "executions"
        self.home.mkdir(parents=True)
        self.work.mkdir()
        self.settings = AGENTS[self.agent].user_settings(self)
        self.original = self.settings.read_bytes()

    # -- set-up ------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        # The CLI is on PATH as for a user (doctor looks for it there).
        bins = f"{LOOPWARDEN.parent}:{cli_path(self.agent).parent}"
        env = {
            "PATH": f"{bins}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": str(self.root),
            "LOOPWARDEN_RUNTIME_DIR": str(self.runtime),
            **QUIET_ENV,
        }
        env.update(AGENTS[self.agent].env(self))
        env.update(self.environment)
        return env

    def loopwarden(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the real ``loopwarden`` command of this virtualenv in this HOME."""
        return subprocess.run(
            [str(LOOPWARDEN), *args],
            env=self.env(),
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.loopwarden("install", self.agent, *args)
        assert done.returncode == 0, done.stderr
        return done

    def write_config(self, loop_detection: dict[str, Any]) -> None:
        """Put a loopwarden config in the default location (the hook finds it there)."""
        path = self.home / ".config" / "loopwarden" / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"tools": {"loopDetection": loop_detection}}))

    def thresholds(self) -> Thresholds:
        """The thresholds of the config the hook uses in this HOME."""
        cfg = LoopGuard(load_config(self.config_source())).config_for(self.agent)
        warning = cfg.warning_threshold
        critical = cfg.critical_threshold
        breaker = cfg.global_circuit_breaker_threshold
        repeat = cfg.rules.get(ConsecutiveRepeatSettings) if cfg.rules is not None else None
        if repeat is not None and repeat.enabled:
            # The guard's own rule for the same fast call in a row acts first when it is on
            # (its counts include the checked call; OpenClaw's are the calls before it).
            warning = min(warning, repeat.warn_at - 1)
            critical = min(critical, repeat.block_at - 1)
            breaker = min(breaker, repeat.stop_at - 1)
        return Thresholds(
            warning,
            critical,
            breaker,
            cfg.unknown_tool_threshold,
            cfg.post_compaction_guard.window_size,
        )

    def config_source(self) -> Any:
        """The config the hook uses in this HOME (its file, or the hook's default)."""
        path = self.home / ".config" / "loopwarden" / "config.json"
        return path if path.exists() else hook_default_config()

    def stored_stops(self) -> list[str]:
        """The ``stopped.code`` of every run the hook stored as stopped, read straight from
        its SQLite file (the default state location in this HOME)."""
        db = default_state_path({"HOME": str(self.home)})
        if not db.exists():
            return []
        cfg = LoopGuard(load_config(self.config_source())).config_for(self.agent)
        store = SQLiteStore(db)
        try:
            keys = store.keys()  # a store's runs, not a dict's keys
            states = [store.load(key, cfg) for key in keys]
        finally:
            store.close()
        return [s.stopped.code for s in states if s is not None and s.stopped is not None]

    # -- scripted steps -------------------------------------------------------------
    def poll(self, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        """A shell call that counts its real executions and always prints the same."""
        return AGENTS[self.agent].shell(
            f"echo run >> {self.count_file}; echo pending", repeat=repeat, **extra
        )

    def progress(self, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        """A shell call whose output changes every time (a loop that makes progress)."""
        return AGENTS[self.agent].shell(
            f"echo run >> {self.count_file}; wc -l < {self.count_file}", repeat=repeat, **extra
        )

    # -- running -------------------------------------------------------------------
    def run(
        self,
        steps: Sequence[dict[str, Any]],
        prompts: Sequence[str] = ("Poll job 42 until it is done.",),
        *,
        text_mode: bool = False,
        trust_hooks: bool = True,
        after: str = "I give up on the job.",
        timeout: float = 240,
    ) -> Outcome:
        """Run the CLI once per prompt (later ones resume the session) in the sandbox."""
        agent = AGENTS[self.agent]
        n = len(list(self.root.glob("requests-*.jsonl")))
        log = self.root / f"requests-{n}.jsonl"
        result = self.root / f"result-{n}.json"
        env = self.env()
        runs = [
            {
                "argv": [
                    str(cli_path(self.agent)),
                    *agent.argv(prompt, i > 0, text_mode, trust_hooks),
                ],
                "env": env,
                "cwd": str(self.work),
                "timeout": timeout,
            }
            for i, prompt in enumerate(prompts)
        ]
        spec: dict[str, Any] = {
            "script": {"api": agent.api, "steps": list(steps), "after": after, **agent.script},
            "log": str(log),
            "result": str(result),
            "runs": runs,
        }
        if agent.port or self.api_port:
            spec["port"] = agent.port or self.api_port
        spec_path = self.root / f"spec-{n}.json"
        spec_path.write_text(json.dumps(spec))
        done = subprocess.run(
            [*self.netns, sys.executable, str(SANDBOX), str(spec_path)],
            capture_output=True,
            text=True,
            timeout=timeout * len(prompts) + 60,
        )
        assert done.returncode == 0, f"sandbox failed: {done.stderr[-3000:]}"
        data = json.loads(result.read_text())
        requests = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
        log_file = self.home / ".local" / "share" / "loopwarden" / "hook.log"
        user_log = self.home / "user-hook.log"
        return Outcome(
            self.agent,
            requests,
            [
                Run(**{k: r[k] for k in ("argv", "code", "stdout", "stderr", "seconds", "cpu")})
                for r in data["runs"]
            ],
            _lines(self.count_file),
            _lines(user_log),
            log_file.read_text() if log_file.exists() else "",
        )


_EVENT = re.compile(r"loopwarden (\w+): tool=\S+ detector=(\S+)")


def hook_events(log: str) -> list[tuple[str, str]]:
    """(action, detector) of each loop event in hook log text, in order."""
    return _EVENT.findall(log)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def dump(value: Any) -> str:
    """Settings JSON as a user might have written it: 4 spaces, no final newline."""
    return json.dumps(value, indent=4)


class Agent:
    """What differs between the CLIs: config files, environment, command line, shell tool."""

    api = ""
    shell_tool = ""
    script: dict[str, Any] = {}
    """More fakeapi script keys (``main_tools``: the tools that mark a main request)."""
    port = 0
    """A fixed port for the fake API (a CLI whose settings file must name it); 0: any."""

    def user_settings(self, ws: Workspace) -> Path:
        raise NotImplementedError

    def env(self, ws: Workspace) -> dict[str, str]:
        return {}

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        raise NotImplementedError

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        raise NotImplementedError


class ClaudeCode(Agent):
    api = "anthropic"
    shell_tool = "Bash"

    def user_settings(self, ws: Workspace) -> Path:
        path = ws.home / ".claude" / "settings.json"
        path.parent.mkdir(parents=True)
        settings = {
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": USER_HOOK}]}
                ]
            },
            "cleanupPeriodDays": 30,
            **ws.extra_settings,
        }
        path.write_text(dump(settings))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:{port}",
            "ANTHROPIC_API_KEY": "sk-ant-e2e",
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["-p", prompt, "--allowedTools", "Bash", "--model", "claude-sonnet-4-6"]
        argv += ["--output-format", "text"] if text_mode else ["--output-format", "stream-json"]
        if not text_mode:
            argv.append("--verbose")
        if resume:
            argv += ["--resume", "{session_id}"]
        return argv

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        step = {"tool": "Bash", "input": {"command": command, "description": "check job 42"}}
        return {**step, "repeat": repeat, **extra}


CODEX_CONFIG = """\
model = "gpt-5.1-codex"
model_provider = "fake"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.fake]
name = "fake"
wire_api = "responses"
env_key = "FAKE_API_KEY"
"""


class Codex(Agent):
    api = "responses"
    shell_tool = "Bash"

    def user_settings(self, ws: Workspace) -> Path:
        codex_home = ws.home / ".codex"
        codex_home.mkdir(parents=True)
        top = ws.extra_settings.get("toml", "")  # top-level keys go before the tables
        (codex_home / "config.toml").write_text(top + CODEX_CONFIG)
        path = codex_home / "hooks.json"
        settings = {
            "hooks": {
                "PreToolUse": [
                    {"matcher": "", "hooks": [{"type": "command", "command": USER_HOOK}]}
                ]
            }
        }
        path.write_text(dump(settings))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {"CODEX_HOME": str(ws.home / ".codex"), "FAKE_API_KEY": "sk-e2e"}

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["exec"]
        if resume:
            argv += ["resume", "{session_id}"]
        argv += [
            "-c",
            'model_providers.fake.base_url="http://127.0.0.1:{port}/v1"',
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        if trust:  # what approving them with /hooks does interactively
            argv.append("--dangerously-bypass-hook-trust")
        if not text_mode:
            argv.append("--json")
        return [*argv, prompt]

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        return {"tool": "exec_command", "input": {"cmd": command}, "repeat": repeat, **extra}


class Gemini(Agent):
    api = "gemini"
    shell_tool = "run_shell_command"

    def user_settings(self, ws: Workspace) -> Path:
        path = ws.home / ".gemini" / "settings.json"
        path.parent.mkdir(parents=True)
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            # Gemini's own loop detection ends a run at the 5th identical call; the
            # tests that look at loopwarden's thresholds switch it off (test_gemini
            # checks how the two interact).
            "model": {"disableLoopDetection": True},
            "hooks": {
                "BeforeTool": [
                    {
                        "matcher": "run_shell_command",
                        "hooks": [
                            {
                                "type": "command",
                                "command": USER_HOOK,
                                "name": "audit",
                                "timeout": 10000,
                            }
                        ],
                    }
                ]
            },
        }
        for key, value in ws.extra_settings.items():  # merged one level deep; {} replaces
            if value and isinstance(value, dict) and isinstance(settings.get(key), dict):
                settings[key] = {**settings[key], **value}
            else:
                settings[key] = value
        path.write_text(dump(settings))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {
            "GEMINI_API_KEY": "e2e-key",
            "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:{port}",
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["-p", prompt, "--yolo", "-m", "gemini-2.5-pro", "--skip-trust"]
        argv += ["-o", "text"] if text_mode else ["-o", "stream-json"]
        if resume:
            argv += ["--resume", "latest"]
        return argv

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        return {
            "tool": "run_shell_command",
            "input": {"command": command},
            "repeat": repeat,
            **extra,
        }


USER_HOOK_BASH = {"type": "command", "bash": USER_HOOK, "timeoutSec": 10}


class Copilot(Agent):
    """GitHub Copilot CLI with a BYOK provider: our Responses API, offline mode."""

    api = "responses"
    shell_tool = "bash"

    def user_settings(self, ws: Workspace) -> Path:
        # The user's own hook lives in a file of its own in Copilot's hooks folder
        # (loopwarden adds loopwarden.json next to it).
        path = ws.home / ".copilot" / "hooks" / "audit.json"
        path.parent.mkdir(parents=True)
        extra = {k: v for k, v in ws.extra_settings.items() if k != "env"}
        settings = {"version": 1, "hooks": {"preToolUse": [USER_HOOK_BASH]}, **extra}
        path.write_text(dump(settings))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {
            "COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:{port}/v1",
            "COPILOT_PROVIDER_WIRE_API": "responses",
            "COPILOT_PROVIDER_API_KEY": "sk-e2e",
            "COPILOT_MODEL": "gpt-5.4",
            "COPILOT_OFFLINE": "true",
            "COPILOT_AUTO_UPDATE": "false",
            # The package the binary unpacks on first start, shared by every test.
            "COPILOT_PKG_CACHE_HOME": str(cache_root() / "copilot-pkg"),
            **ws.extra_settings.get("env", {}),
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["-p", prompt, "--allow-all-tools", "--disable-builtin-mcps"]
        argv += ["--output-format", "text" if text_mode else "json"]
        if resume:
            argv += ["--resume", "{session_id}"]
        return argv

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        step = {"tool": "bash", "input": {"command": command, "description": "check job 42"}}
        return {**step, "repeat": repeat, **extra}


class Qwen(Agent):
    """Qwen Code with its Gemini API client pointed at our scripted Gemini API."""

    api = "gemini"
    shell_tool = "run_shell_command"
    # Qwen keeps a compression only when the summary holds a state snapshot.
    script: dict[str, Any] = {
        "summary": "<state_snapshot>The user asked to poll job 42; it is pending.</state_snapshot>"
    }

    def user_settings(self, ws: Workspace) -> Path:
        path = ws.home / ".qwen" / "settings.json"
        path.parent.mkdir(parents=True)
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini"}},
            "general": {"enableAutoUpdate": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "run_shell_command",
                        "hooks": [{"type": "command", "command": USER_HOOK, "timeout": 10}],
                    }
                ]
            },
        }
        for key, value in ws.extra_settings.items():  # merged one level deep; {} replaces
            if value and isinstance(value, dict) and isinstance(settings.get(key), dict):
                settings[key] = {**settings[key], **value}
            else:
                settings[key] = value
        path.write_text(dump(settings))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {
            "GEMINI_API_KEY": "e2e-key",
            "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:{port}",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["-p", prompt, "--yolo", "--auth-type", "gemini", "-m", "gemini-2.5-pro"]
        argv += ["--output-format", "text" if text_mode else "stream-json"]
        if resume:
            argv += ["--resume", "{session_id}"]
        return argv

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        return {
            "tool": "run_shell_command",
            "input": {"command": command},
            "repeat": repeat,
            **extra,
        }


AGENTS: dict[str, Agent] = {"claude-code": ClaudeCode(), "codex": Codex(), "gemini": Gemini()}

from .harness_files import FILE_AGENTS  # noqa: E402 - OpenCode and Cline (they build on Agent)

AGENTS.update(FILE_AGENTS)
AGENTS.update(copilot=Copilot(), qwen=Qwen())
