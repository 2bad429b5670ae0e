"""Old public module paths keep working for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

import loopwarden as lw
from loopwarden.engine import compaction, detect, history, state
from loopwarden.runrecord import JsonlRunRecord


def fresh_import(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``name`` as if for the first time (the warning fires on import)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.warns(DeprecationWarning, match=name.replace(".", r"\.")):
        return importlib.import_module(name)


class TestAliases:
    def test_detection(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``loopwarden.detection`` re-exports the detectors of ``engine.detect``."""
        old = fresh_import("loopwarden.detection", monkeypatch)
        assert old.Detection is detect.Detection is lw.Detection
        assert old.detect_in_window is detect.detect_in_window

    def test_history(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``loopwarden.history`` re-exports ``ToolCallHistory`` and its helpers."""
        old = fresh_import("loopwarden.history", monkeypatch)
        assert old.ToolCallHistory is history.ToolCallHistory is lw.ToolCallHistory
        assert old.normalize_run_id(" r ") == "r"

    def test_state(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``loopwarden.state`` re-exports ``RunState``."""
        old = fresh_import("loopwarden.state", monkeypatch)
        assert old.RunState is state.RunState

    def test_compaction(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``loopwarden.compaction`` re-exports the post-compaction guard."""
        old = fresh_import("loopwarden.compaction", monkeypatch)
        assert old.PostCompactionGuard is compaction.PostCompactionGuard is lw.PostCompactionGuard
        assert old.CompactionVerdict is lw.CompactionVerdict
        assert "3 times" in old.compaction_message("read", 3, 3)

    def test_events_jsonl_run_record(self) -> None:
        """``loopwarden.events.JsonlRunRecord`` still resolves, with a warning."""
        events = importlib.import_module("loopwarden.events")
        with pytest.warns(DeprecationWarning, match="loopwarden.runrecord"):
            old = events.JsonlRunRecord
        assert old is JsonlRunRecord is lw.JsonlRunRecord
        with pytest.raises(AttributeError):
            _ = events.NoSuchName
