"""OpenCode (loopwarden's plugin) and Cline CLI (hook files): events, answers, install.

The hook is the real ``loopwarden hook opencode|cline`` subprocess; the OpenCode
plugin module runs under Node against a real hook helper (and against the hook
command when no helper runs), the way OpenCode's Bun runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loopwarden.hooks import fileinstall
from loopwarden.hooks._protocol import ENV_KEYS, PROTOCOL, socket_path
from tests.hooks.conftest import LAUNCHER, Hook, helper_ready
from tests.hooks.test_doctor import doctor
from tests.hooks.test_install import install

PLUGIN = Path(fileinstall.__file__).with_name("opencode_plugin.mjs")
NODE = shutil.which("node")
MISSING = "Model tried to call unavailable tool 'nosuch'. Available tools: bash, edit, read."


def oc(name: str, n: int, **extra: Any) -> dict[str, Any]:
    """An event as loopwarden's OpenCode plugin sends it."""
    event = {
        "hook_event_name": name,
        "session_id": "ses_oc1",
        "run_id": "msg_prompt1",
        "tool_name": "bash",
        "tool_input": {"command": "echo pending", "description": "check"},
        "tool_use_id": f"toolu_{n}",
    }
    return {**event, **extra}


def cline(hook: str, n: int, result: Any = None, **extra: Any) -> dict[str, Any]:
    """A Cline 3.0 hook file's stdin (the fields loopwarden reads, as captured)."""
    record: dict[str, Any] = {"id": f"toolu_{n}", "name": "run_commands"}
    record["input"] = {"commands": ["echo pending"]}
    event: dict[str, Any] = {
        "clineVersion": "",
        "hookName": hook,
        "taskId": "conv_1",
        "sessionContext": {"rootSessionId": "1796_abc"},
        "agent_id": "agent_1",
        "parent_agent_id": None,
        "iteration": n,
    }
    if hook == "tool_call":
        event["tool_call"] = record
    else:
        output = [{"query": "echo pending", "result": "pending\n", "success": True}]
        event["tool_result"] = {**record, "output": output if result is None else result}
    return {**event, **extra}


pytestmark = pytest.mark.usefixtures("small_config")


class TestOpenCodeHook:
    def test_warn_block_stop(self, hook_env: dict[str, str]) -> None:
        """The plugin's answers: a note after the call, a deny before it, then a stop."""
        hook = Hook(hook_env, "opencode")
        answers = []
        for n in range(1, 8):
            pre = hook(oc("tool.execute.before", n)).json
            answers.append(pre)
            if pre:
                continue
            output = {"output": "pending\n", "exit": 0}
            answers.append(hook(oc("tool.execute.after", n, tool_response=output)).json)
        notes = [a for a in answers if "context" in a]
        assert notes and notes[0]["context"].startswith("WARNING:")
        denies = [a["deny"] for a in answers if "deny" in a]
        assert denies and all("loopwarden blocked this call" in d for d in denies)
        assert "stopped this run" in answers[-1]["stop"]
        assert set().union(*answers) <= {"context", "deny", "stop"}

    def test_a_missing_tool_is_counted_by_its_name_and_blocked(
        self, hook_env: dict[str, str]
    ) -> None:
        """OpenCode's ``invalid`` stand-in counts as a call of the tool the model named."""
        hook = Hook(hook_env, "opencode")
        args = {"tool": "nosuch", "error": MISSING}
        answers = []
        for n in range(1, 5):
            event = oc("tool.execute.before", n, tool_name="invalid", tool_input=args)
            pre = hook(event).json
            answers.append(pre)
            if not pre:
                after = {**event, "hook_event_name": "tool.execute.after"}
                hook({**after, "tool_response": {"output": f"invalid: {MISSING}"}})
        assert answers[:2] == [{}, {}]
        assert "'nosuch' is not available" in answers[2]["deny"]
        records = list(hook.state("ses_oc1", "msg_prompt1").window)
        assert {r.tool_name for r in records} == {"nosuch"}
        assert {r.unknown_tool_name for r in records if not r.veto} == {"nosuch"}

    def test_compaction_and_failures(self, hook_env: dict[str, str]) -> None:
        """``session.compacted`` arms the guard of the prompt's run; a failed tool is an error."""
        hook = Hook(hook_env, "opencode")
        hook(oc("tool.execute.before", 1))
        failed = oc("tool.failed", 1, error="ENOENT: no such file")
        assert hook(failed).json == {}
        compacted = {"hook_event_name": "session.compacted", "session_id": "ses_oc1"}
        assert hook(compacted).json == {}
        state = hook.state("ses_oc1", "msg_prompt1")
        assert state.guard.remaining_attempts == 3
        assert [r.result_hash.startswith("error:") for r in state.window] == [True]


class TestClineHook:
    def test_warning_is_context_and_a_block_ends_the_run(self, hook_env: dict[str, str]) -> None:
        """Cline's answers: ``contextModification`` warns; the block is ``cancel``."""
        hook = Hook(hook_env, "cline")
        answers = []
        for n in range(1, 6):
            pre = hook(cline("tool_call", n)).json
            answers.append(pre)
            if pre:
                break
            answers.append(hook(cline("tool_result", n)).json)
        assert any(a.get("contextModification", "").startswith("WARNING:") for a in answers)
        assert answers[-1]["cancel"] is True
        assert "loopwarden blocked this call" in answers[-1]["errorMessage"]
        # The run is keyed by the task and the agent (a subagent has its own).
        assert hook.state("1796_abc", "conv_1/agent_1") is not None

    def test_a_failed_call_is_an_error(self, hook_env: dict[str, str]) -> None:
        """A ``tool_result`` with an error is recorded as a failure."""
        hook = Hook(hook_env, "cline")
        hook(cline("tool_call", 1))
        failed = cline("tool_result", 1)
        failed["tool_result"]["error"] = "command not found"
        assert hook(failed).json == {}
        [record] = hook.state("1796_abc", "conv_1/agent_1").window
        assert record.result_hash.startswith("error:")

    def test_a_rewritten_compaction_file_arms_the_guard(self, hook_env: dict[str, str]) -> None:
        """Cline runs no compaction hook: a change of the session's compaction file
        between two events is the compaction (one that was there already is not)."""
        hook = Hook(hook_env, "cline")
        sessions = Path(hook_env["HOME"]) / ".cline" / "data" / "sessions" / "1796_abc"
        sessions.mkdir(parents=True)
        record = sessions / "1796_abc.compaction.json"
        record.write_text('{"version": 1}')  # from before: not a compaction now
        hook(cline("tool_call", 1))
        hook(cline("tool_result", 1))
        assert hook.state("1796_abc", "conv_1/agent_1").guard.remaining_attempts == 0
        record.write_text('{"version": 1, "source_message_count": 9}')
        hook(cline("tool_call", 2))
        assert hook.state("1796_abc", "conv_1/agent_1").guard.remaining_attempts == 3

    def test_a_session_id_that_is_a_path_reads_no_file(self, hook_env: dict[str, str]) -> None:
        """A session id with a slash is never used to build a path; the call is checked."""
        hook = Hook(hook_env, "cline")
        event = cline("tool_call", 1, sessionContext={"rootSessionId": "../../etc"})
        done = hook(event)
        assert done.code == 0 and done.json == {}


# -- the plugin module under Node -------------------------------------------------------
DRIVER = """
import { loopwarden, socketPath, PROTOCOL, ENV_KEYS } from %(module)s;
const [command, args] = [%(command)s, ["opencode"]];
const logged = [];
const client = { app: { log: async (entry) => { logged.push(entry.body.message); } } };
const hooks = await loopwarden({ command, args })({ client, directory: process.cwd() });
const out = { socket: socketPath(process.env, command[0]), protocol: PROTOCOL, keys: ENV_KEYS };
const steps = [];
const attempt = async (fn) => {
  try { await fn(); return null; } catch (e) { return String(e.message); }
};
await hooks["chat.message"]({ sessionID: "s1" }, { message: { id: "prompt-1" } });
for (let n = 1; n <= 7; n++) {
  const input = { tool: "bash", sessionID: "s1", callID: `c${n}` };
  const args = { command: "ls" };
  const thrown = await attempt(() => hooks["tool.execute.before"](input, { args }));
  const output = { title: "ls", output: "same\\n", metadata: { exit: 0 } };
  if (thrown === null) await hooks["tool.execute.after"]({ ...input, args }, output);
  steps.push({ thrown, output: thrown === null ? output.output : null });
}
out.steps = steps;
out.modelRequest = await attempt(() => hooks["chat.params"]({ sessionID: "s1" }, {}));
await hooks["chat.message"]({ sessionID: "s1" }, { message: { id: "prompt-2" } });
out.nextPrompt = await attempt(() => hooks["chat.params"]({ sessionID: "s1" }, {}));
out.logged = logged;
console.log(JSON.stringify(out));
"""


def run_plugin(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    if NODE is None:
        pytest.skip("node is not installed (the e2e suite runs the plugin inside OpenCode)")
    script = tmp_path / "driver.mjs"
    script.write_text(
        DRIVER % {"module": json.dumps(str(PLUGIN)), "command": json.dumps([*LAUNCHER, "opencode"])}
    )
    done = subprocess.run(
        [NODE, str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def check_plugin(found: dict[str, Any]) -> None:
    steps = found["steps"]
    warned = [s for s in steps if s["output"] and "\n\nWARNING:" in s["output"]]
    blocked = [s for s in steps if s["thrown"] and "loopwarden blocked this call" in s["thrown"]]
    stops = [s for s in steps if s["thrown"] and "stopped this run" in s["thrown"]]
    assert warned and blocked and stops, steps
    assert steps.index(warned[0]) < steps.index(blocked[0]) < steps.index(stops[0])
    assert "stopped this run" in found["modelRequest"]  # no model request after a stop
    assert found["nextPrompt"] is None  # the user's next prompt is a new run
    assert found["logged"] == []


def test_plugin_speaks_the_helpers_protocol(
    hook_env: dict[str, str], tmp_path: Path, small_config: Path
) -> None:
    """Under Node the plugin finds the helper's socket (same name as the hook's), and
    throws, appends and refuses the next model request as the answers say."""
    Hook(hook_env, "opencode")(oc("tool.execute.before", 0, session_id="warm-up"))
    assert helper_ready(hook_env)
    found = run_plugin(hook_env, tmp_path)
    assert found["socket"] == socket_path(hook_env)
    assert found["protocol"] == PROTOCOL and tuple(found["keys"]) == ENV_KEYS
    check_plugin(found)


def test_plugin_without_a_helper_runs_the_hook(
    hook_env: dict[str, str], tmp_path: Path, small_config: Path
) -> None:
    """With no helper to talk to, each event goes through the hook command: same answers."""
    env = {**hook_env, "LOOPWARDEN_RUNTIME_DIR": str(tmp_path / "no-helper-here")}
    env["LOOPWARDEN_HOOK_DAEMON"] = "0"
    check_plugin(run_plugin(env, tmp_path))


# -- install, uninstall, doctor ---------------------------------------------------------
def tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("agent", ["opencode", "cline"])
def test_install_and_uninstall_leave_the_home_as_it_was(
    hook_env: dict[str, str], agent: str
) -> None:
    """install writes only loopwarden's files (again: nothing changes); uninstall removes
    them and the directories it created, so the HOME is back byte for byte."""
    home = Path(hook_env["HOME"])
    config = home / (".config" if agent == "opencode" else ".cline")
    (config / "settings.json").parent.mkdir(parents=True, exist_ok=True)
    (config / "settings.json").write_text('{"theirs": true}')
    before = tree(config)
    first = install(hook_env, agent)
    assert first.returncode == 0, first.stderr
    again = install(hook_env, agent)
    assert "already installed" in again.stdout
    files = fileinstall.find_own(fileinstall.target_dir(agent, "user", hook_env, home))
    assert files and all(os.access(p, os.R_OK) for p in files)
    if agent == "cline":
        assert sorted(p.name for p in files) == ["PostToolUse.sh", "PreToolUse.sh"]
        assert all(os.access(p, os.X_OK) for p in files)
    removed = install(hook_env, agent, "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert tree(config) == before
    assert "not installed" in install(hook_env, agent, "--uninstall").stdout


def test_cline_keeps_the_users_hook_files(hook_env: dict[str, str]) -> None:
    """A user's ``PreToolUse.sh`` is never replaced: loopwarden takes the next name
    Cline runs, and refuses when both are the user's."""
    hooks = Path(hook_env["HOME"]) / ".cline" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "PreToolUse.sh").write_text("#!/bin/sh\necho mine\n")
    assert install(hook_env, "cline").returncode == 0
    assert (hooks / "PreToolUse.sh").read_text() == "#!/bin/sh\necho mine\n"
    assert fileinstall.MARKER in (hooks / "PreToolUse.bash").read_text()
    assert install(hook_env, "cline", "--uninstall").returncode == 0
    (hooks / "PreToolUse.bash").write_text("#!/bin/bash\necho also mine\n")
    refused = install(hook_env, "cline")
    assert refused.returncode != 0
    assert "files of your own" in refused.stderr


def test_project_scope_and_dry_run(hook_env: dict[str, str], tmp_path: Path) -> None:
    """``--project`` uses the project's directory; ``--dry-run`` writes nothing."""
    project = tmp_path / "project"
    project.mkdir()
    dry = install(hook_env, "opencode", "--project", "--dry-run", cwd=project)
    assert dry.returncode == 0 and "loopwarden.js" in dry.stdout
    assert not (project / ".opencode").exists()
    done = install(hook_env, "cline", "--project", "--config", "lw.json", cwd=project)
    assert done.returncode == 0, done.stderr
    text = (project / ".clinerules" / "hooks" / "PreToolUse.sh").read_text()
    assert f"--config {project / 'lw.json'}" in text


def test_doctor_runs_the_installed_files(hook_env: dict[str, str], tmp_path: Path) -> None:
    """doctor runs a test event through each file's command and reports a plugin whose
    module has gone (a virtualenv moved away)."""
    assert install(hook_env, "opencode").returncode == 0
    assert install(hook_env, "cline").returncode == 0
    done = doctor(hook_env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "[ok] test tool.execute.before event allowed" in done.stdout
    assert done.stdout.count("[ok] test tool_call event allowed") == 2
    plugin = Path(hook_env["HOME"]) / ".config" / "opencode" / "plugins" / "loopwarden.js"
    plugin.write_text(plugin.read_text().replace(str(PLUGIN), "/gone/opencode_plugin.mjs"))
    broken = doctor(hook_env, "--agent", "opencode", cwd=tmp_path)
    assert broken.returncode == 1
    assert "/gone/opencode_plugin.mjs, which does not exist" in broken.stdout
