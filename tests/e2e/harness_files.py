"""OpenCode and Cline CLI for the e2e harness: agents that load loopwarden from files.

OpenCode loads ``~/.config/opencode/plugins/*.js`` (loopwarden's plugin and the
user's own), and Cline runs the files of ``~/.cline/hooks`` (loopwarden's
``PreToolUse.sh``/``PostToolUse.sh`` and the user's own ``PreToolUse``). Both
talk to the scripted Anthropic API of ``fakeapi.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .harness import Agent

if TYPE_CHECKING:
    from .harness import Workspace

# The user's own OpenCode plugin: counts the tool calls it sees (prints nothing).
USER_PLUGIN = """\
import { appendFileSync } from "node:fs";
export default async () => ({
  "tool.execute.before": async () => {
    appendFileSync(`${process.env.HOME}/user-hook.log`, "ran\\n");
  },
});
"""
USER_HOOK_FILE = '#!/bin/sh\ncat >/dev/null\necho ran >> "$HOME/user-hook.log"\n'
FAKE_PORT = 43117  # loopback of the test's own network namespace: never taken


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``root``, by relative path."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = None if path.is_dir() else path.read_bytes()
    return found


class OpenCode(Agent):
    api = "anthropic"
    shell_tool = "bash"
    script = {"main_tools": ["bash"]}

    def config_dir(self, ws: Workspace) -> Path:
        return ws.home / ".config" / "opencode"

    def user_settings(self, ws: Workspace) -> Path:
        config = self.config_dir(ws)
        (config / "plugins").mkdir(parents=True)
        (config / "plugins" / "audit.js").write_text(USER_PLUGIN)
        # What a first, online start of OpenCode leaves behind: without it OpenCode tries
        # to install its plugin SDK from npm on every start (70 s until it gives up here)
        # and writes a .gitignore.
        (config / "node_modules").mkdir()
        deps = {"@opencode-ai/plugin": "1.18.33"}
        (config / "package.json").write_text(json.dumps({"dependencies": deps}))
        lock = {"packages": {"": {"dependencies": deps}}}
        (config / "package-lock.json").write_text(json.dumps(lock))
        ignored = "node_modules\npackage.json\npackage-lock.json\nbun.lock\n.gitignore"
        (config / ".gitignore").write_text(ignored)  # as OpenCode writes it
        path = config / "opencode.json"
        settings = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            **ws.extra_settings.get("opencode", {}),
        }
        path.write_text(json.dumps(settings, indent=4))
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        limit = ws.extra_settings.get("limit", {"context": 200000, "output": 8192})
        provider = {
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/anthropic",
                    "name": "Fake",
                    "options": {"baseURL": "http://127.0.0.1:{port}/v1", "apiKey": "sk-ant-e2e"},
                    "models": {
                        "claude-sonnet-4-5": {"name": "Claude", "tool_call": True, "limit": limit}
                    },
                }
            },
            "model": "fake/claude-sonnet-4-5",
        }
        return {
            "OPENCODE_CONFIG_CONTENT": json.dumps(provider),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = ["run"] + ([] if text_mode else ["--format", "json"])
        if resume:
            argv += ["--session", "{session_id}"]
        return [*argv, prompt]

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        step = {"tool": "bash", "input": {"command": command, "description": "check job 42"}}
        return {**step, "repeat": repeat, **extra}


class Cline(Agent):
    api = "anthropic"
    shell_tool = "run_commands"
    script = {"main_tools": ["run_commands"]}
    port = FAKE_PORT

    def config_dir(self, ws: Workspace) -> Path:
        return ws.home / ".cline"

    def user_settings(self, ws: Workspace) -> Path:
        config = self.config_dir(ws)
        settings = config / "data" / "settings"
        settings.mkdir(parents=True)
        model = ws.extra_settings.get("model", "claude-sonnet-4-5")
        provider = {
            "provider": "anthropic",
            "apiKey": "sk-ant-e2e",
            "model": model,
            "baseUrl": f"http://127.0.0.1:{FAKE_PORT}",
        }
        entry = {"settings": provider, "updatedAt": "2026-01-01T00:00:00.000Z"}
        providers = {
            "version": 1,
            "lastUsedProvider": "anthropic",
            "modes": {},
            "providers": {"anthropic": {**entry, "tokenSource": "manual"}},
        }
        (settings / "providers.json").write_text(json.dumps(providers, indent=2))
        hooks = config / "hooks"
        hooks.mkdir()
        path = hooks / "PreToolUse"
        path.write_text(USER_HOOK_FILE)
        path.chmod(0o755)
        return path

    def env(self, ws: Workspace) -> dict[str, str]:
        return {
            # In process: no background hub daemon outliving the test.
            "CLINE_SESSION_BACKEND_MODE": "local",
            "CLINE_NO_AUTO_UPDATE": "1",
            **ws.extra_settings.get("env", {}),
        }

    def argv(self, prompt: str, resume: bool, text_mode: bool, trust: bool = True) -> list[str]:
        argv = [] if text_mode else ["--json"]
        if resume:
            argv += ["--id", "{session_id}"]
        return [*argv, prompt]

    def shell(self, command: str, repeat: int = 1, **extra: Any) -> dict[str, Any]:
        return {"tool": "run_commands", "input": {"commands": [command]}, "repeat": repeat, **extra}


FILE_AGENTS: dict[str, Agent] = {"opencode": OpenCode(), "cline": Cline()}
