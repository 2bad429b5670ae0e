"""Helpers for the CLI tests: run ``loopwarden`` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWARDEN_", "NO_COLOR"))}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["COLUMNS"] = "120"
    if extra:
        env.update(extra)
    return env


def run_cli(
    args: Sequence[str],
    *,
    input: str | bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m loopwarden ARGS`` in a subprocess; stdout/stderr as text."""
    data = input.encode() if isinstance(input, str) else input
    done = subprocess.run(
        [sys.executable, "-m", "loopwarden", *args],
        input=data,
        capture_output=True,
        cwd=cwd or ROOT,
        env=_env(env),
        timeout=timeout,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


@pytest.fixture(name="cli")
def fixture_cli() -> Run:
    return run_cli


def replay_json(*args: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``loopwarden replay ... --format json`` and parse the report."""
    done = run_cli(["replay", *args, "--format", "json"], **kwargs)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout, done.stdout
