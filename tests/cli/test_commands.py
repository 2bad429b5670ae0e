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
