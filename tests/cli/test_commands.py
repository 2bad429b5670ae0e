"""Every command speaks the same way: help, usage errors, failures and exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopwarden.cli import COMMANDS, _clickutil

from .conftest import EXAMPLES, ROOT, Run, _env, no_traceback

CLICK_COMMANDS = sorted(set(COMMANDS) - {"hook"})


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(cli: Run, name: str) -> None:
    """``loopwarden COMMAND -h`` prints the command's usage and exits 0."""
    done = cli([name, "-h"])
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert re.match(rf"[Uu]sage: loopwarden {name}\b", done.stdout), done.stdout[:200]


@pytest.mark.parametrize("name", CLICK_COMMANDS)
def test_an_unknown_option_is_a_usage_error(cli: Run, name: str) -> None:
    """Every click command refuses an unknown option with exit 2 and a pointer to its help."""
    args = [name, "--no-such-option"]
    if name == "config":
        args = [name, "check", "x.json", "--no-such-option"]
    done = cli(args)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert re.search(r"No such option:? '?--no-such-option", done.stderr), done.stderr
    assert "for help" in done.stderr


def test_the_hook_never_exits_2(cli: Run) -> None:
    """The hand-written hook answers a bad command line with 1: agents read 2 as "block"."""
    done = cli(["hook", "claude-code", "--no-such-option"], input="{}")
    no_traceback(done)
    assert done.returncode == 1
    assert "loopwarden hook: error:" in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["replay", str(EXAMPLES), "--format", "json"],
        ["doctor"],
        ["install", "codex", "--dry-run"],
    ],
    ids=lambda args: args[0],
)
def test_an_unexpected_failure_is_one_line_and_exit_70(tmp_path: Path, args: list[str]) -> None:
    """An error nobody foresaw (here: stdout on a full disk) is one line on stderr, exit 70."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "loopwarden", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_env({"HOME": str(tmp_path)}),
            timeout=120,
            check=False,
        )
    assert done.returncode == _clickutil.EXIT_INTERNAL, done.stderr
    assert "Traceback" not in done.stderr
    assert f"loopwarden {args[0]}: internal error: OSError" in done.stderr
    assert "LOOPWARDEN_DEBUG=1" in done.stderr


def test_exit_codes_are_documented_once() -> None:
    """docs/cli.md's exit-code table lists exactly the codes the commands use."""
    text = (ROOT / "docs" / "cli.md").read_text("utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    used = {
        value
        for name, value in vars(_clickutil).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    assert documented == used == {0, 1, 2, 70, 130, 141}
    assert text.count("## Exit codes") == 1


@pytest.mark.parametrize("args", [[], *([name] for name in sorted(COMMANDS)), ["config", "check"]])
def test_every_help_has_the_same_layout(cli: Run, args: list[str]) -> None:
    """The top level and every command (the hook too) print click's help layout."""
    done = cli([*args, "--help"])
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    prog = " ".join(["loopwarden", *args])
    assert done.stdout.startswith(f"Usage: {prog} [OPTIONS]"), done.stdout[:200]
    assert done.stdout.count("\nOptions:\n") == 1
    assert re.search(r"^  -h, --help +Show this message and exit\.$", done.stdout, re.MULTILINE)
    # A group lists its commands once (click's own list, not one in the text as well).
    assert done.stdout.count("Commands:") == (1 if args in ([], ["config"]) else 0)


def test_the_top_level_lists_every_command_and_suggests(cli: Run) -> None:
    """``loopwarden -h`` lists every command; a misspelt one is a usage error with a hint."""
    listed = cli(["-h"]).stdout.split("Commands:\n", 1)[1]
    assert re.findall(r"^  (\S+)", listed, re.MULTILINE) == list(COMMANDS)
    done = cli(["repaly"])
    assert done.returncode == 2
    assert "No such command 'repaly'. Did you mean 'replay'?" in done.stderr
    assert cli(["--version"]).stdout.startswith("loopwarden ")
    assert cli([]).returncode == 2


def test_the_hook_imports_no_click(tmp_path: Path) -> None:
    """``loopwarden hook`` handling an event in its own process never imports click."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "loopwarden", "hook", "claude-code"],
        input=b'{"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Read"}',
        capture_output=True,
        cwd=ROOT,
        env=_env({"HOME": str(tmp_path), "LOOPWARDEN_HOOK_DAEMON": "0"}),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "loopwarden.hooks.runner" in imported  # it did handle the event in process
    assert "click" not in imported
