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
    """tune() from Python compares the defaults (C0) and the four configs of the grid; on
    the example traces they prevent the same calls, so it says to keep the defaults."""
    monkeypatch.chdir(ROOT)
    exec(compile(snippet("cli-tune"), "docs/cli.md:cli-tune", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "C0 defaults: 96 calls prevented"
    assert lines[1] == "C1 warningThreshold=5 criticalThreshold=10: 96 calls prevented"
    assert len(lines) == 6
    assert lines[-1].startswith("no difference: keep the defaults (C0: 96 calls prevented")
