"""The fleet replay and tune snippets of docs/cli.md run as shown and print what they say."""

from __future__ import annotations

import pytest

from tests._snippets import snippet

from .conftest import ROOT


def test_fleet_replay_snippet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay_shards on one and on two workers agree on the example traces."""
    monkeypatch.chdir(ROOT)
    exec(compile(snippet("cli-fleet-replay"), "docs/cli.md:cli-fleet-replay", "exec"), {})
    assert capsys.readouterr().out.strip() == "5 shards, 9 runs, 5 looped"


def test_tune_snippet(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """tune() from Python compares the four configs of the grid and explains its pick."""
    monkeypatch.chdir(ROOT)
    exec(compile(snippet("cli-tune"), "docs/cli.md:cli-tune", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "C1 warningThreshold=5 criticalThreshold=10: 96 calls prevented"
    assert len(lines) == 5 and "C1 (warningThreshold=5 criticalThreshold=10)" in lines[-1]
