"""ToolCallHistory and the detectors (SPEC 3, 4 and 8), from the upstream scenarios.

Scenario numbers refer to section 6.1 of the OpenClaw reference notes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.hashing import args_hash

E = lw.LoopDetectionConfig(enabled=True)


def history(**fields: Any) -> lw.ToolCallHistory:
    return lw.ToolCallHistory(lw.LoopDetectionConfig.from_dict({"enabled": True, **fields}))


def pair(
    hist: lw.ToolCallHistory,
    tool: str,
    params: Any,
    *,
    result: Any = None,
    error: Any = None,
    call_id: str,
    run_id: str | None = None,
) -> None:
    hist.record_call(tool, params, call_id=call_id, run_id=run_id)
    if error is not None:
        hist.record_outcome(tool, params, call_id=call_id, run_id=run_id, error=error)
    else:
        hist.record_outcome(tool, params, call_id=call_id, run_id=run_id, result=result)


def summary(det: lw.Detection | None) -> tuple[str, str, int] | None:
    return None if det is None else (det.level, det.detector, det.count)


class TestRecording:
    def test_first_record(self) -> None:
        """Scenario 8."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("read", {"path": "/a"}, call_id="call-1")
        assert len(hist) == 1
        rec = hist.records[0]
        assert (rec.tool_name, rec.call_id, rec.pending) == ("read", "call-1", True)

    def test_window_is_capped_at_history_size(self) -> None:
        """Scenarios 9 and 12."""
        hist = lw.ToolCallHistory(E)
        for i in range(40):
            hist.record_call("read", {"iteration": i})
        assert len(hist) == 30
        assert hist.records[0].args_hash == args_hash("read", {"iteration": 10})
        small = history(historySize=4)
        for i in range(10):
            small.record_call("read", {"iteration": i})
        assert len(small) == 4
        assert small.records[0].args_hash == args_hash("read", {"iteration": 6})

    def test_timestamp_and_run_id(self) -> None:
        """Scenarios 10 and 11; run ids are trimmed and empty means no run."""
        hist = lw.ToolCallHistory(E)
        before = time.time()
        hist.record_call("read", {}, run_id=" run-1 ")
        hist.record_call("read", {}, run_id="   ")
        after = time.time()
        first, second = hist.records
        assert before <= first.timestamp <= after
        assert first.run_id == "run-1"
        assert second.run_id is None

    def test_record_outcome_attaches_to_the_pending_call(self) -> None:
        """Scenario 37."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("gateway", {"a": 1}, call_id="call-1")
        rec = hist.record_outcome("gateway", {"a": 1}, call_id="call-1", result="ok")
        assert rec is not None and rec.call_id == "call-1"
        assert len(hist) == 1
        assert isinstance(rec.result_hash, str)

    def test_outcomes_cap_the_window_too(self) -> None:
        """Scenario 38."""
        hist = lw.ToolCallHistory(E)
        rec = None
        for i in range(33):
            pair(hist, "read", {"i": i}, result=i, call_id=f"call-{i}")
            rec = hist.records[-1]
        assert rec is not None and rec.call_id == "call-32"
        assert len(hist) == 30
        assert hist.records[0].call_id == "call-3"

    def test_outcome_of_another_run_does_not_attach(self) -> None:
        """Scenario 39."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("read", {"p": 1}, call_id="call-1", run_id="run-1")
        hist.record_outcome("read", {"p": 1}, call_id="call-1", run_id="run-2", result="x")
        assert len(hist) == 2
        first, second = hist.records
        assert first.result_hash is None
        assert second.run_id == "run-2" and second.result_hash is not None

    def test_outcome_without_call_id_attaches_to_newest_pending(self) -> None:
        """Without a call id the newest pending record of the same call gets the outcome."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("read", {"p": 1}, call_id="a")
        hist.record_call("read", {"p": 1}, call_id="b")
        rec = hist.record_outcome("read", {"p": 1}, result="x")
        assert rec is not None and rec.call_id == "b"
        assert len(hist) == 2

    def test_parallel_outcomes_pair_by_call_id(self) -> None:
        """Outcomes arriving in another order attach to their own calls."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("read", {"p": 1}, call_id="a")
        hist.record_call("read", {"p": 1}, call_id="b")
        ra = hist.record_outcome("read", {"p": 1}, call_id="a", result="ra")
        rb = hist.record_outcome("read", {"p": 1}, call_id="b", result="rb")
        assert ra is not None and rb is not None
        assert (ra.call_id, rb.call_id) == ("a", "b")
        assert ra.result_hash != rb.result_hash

    def test_nothing_recorded_without_result_or_error(self) -> None:
        """Omitting both result and error records nothing and returns None."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("read", {}, call_id="c")
        assert hist.record_outcome("read", {}, call_id="c") is None
        assert hist.records[0].pending
        assert hist.record_outcome("read", {}, call_id="c", result=None) is not None

    def test_records_even_when_disabled(self) -> None:
        """The engine layer records whatever enabled says; only detect() looks at it."""
        for enabled in (None, False):
            hist = lw.ToolCallHistory(lw.LoopDetectionConfig(enabled=enabled))
            for i in range(20):
                pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
            assert len(hist) == 20
            assert hist.detect("read", {"p": 1}) is None

    def test_tool_names_are_trimmed(self) -> None:
        """Tool names are trimmed before they are compared."""
        hist = lw.ToolCallHistory(E)
        hist.record_call("  read ", {})
        assert hist.records[0].tool_name == "read"


class TestDetectGeneric:
    def test_disabled_by_default(self) -> None:
        """Scenario 13."""
        hist = lw.ToolCallHistory()
        for i in range(20):
            hist.record_call("read", {"p": 1}, call_id=str(i))
        assert hist.detect("read", {"p": 1}) is None

    def test_distinct_calls_and_empty_history(self) -> None:
        """Scenarios 14 and 40."""
        hist = lw.ToolCallHistory(E)
        assert hist.detect("read", {"path": "/x"}) is None
        for i in range(15):
            hist.record_call("read", {"path": f"/{i}"})
        assert hist.detect("read", {"path": "/new"}) is None

    def test_run_scoping(self) -> None:
        """Scenarios 15, 16, 17."""
        hist = lw.ToolCallHistory(E)
        for i in range(10):
            hist.record_call("read", {"p": 1}, call_id=str(i), run_id="run-1")
        assert hist.detect("read", {"p": 1}, run_id="heartbeat-2") is None
        assert summary(hist.detect("read", {"p": 1}, run_id="run-1")) == (
            "warning",
            "generic_repeat",
            10,
        )
        assert hist.detect("read", {"p": 1}) is None
        unscoped = lw.ToolCallHistory(E)
        for _ in range(10):
            unscoped.record_call("read", {"p": 1})
        assert unscoped.detect("read", {"p": 1}, run_id="run-1") is None
        assert unscoped.detect("read", {"p": 1}) is not None

    def test_warning_counts_calls_without_outcomes(self) -> None:
        """Scenario 18: the warning message names the tool and the count."""
        hist = lw.ToolCallHistory(E)
        for i in range(10):
            hist.record_call("read", {"p": 1}, call_id=str(i))
        det = hist.detect("read", {"p": 1})
        assert summary(det) == ("warning", "generic_repeat", 10)
        assert det is not None
        assert "WARNING" in det.message and "10 times" in det.message and "read" in det.message
        assert det.warning_key == f"generic:read:{args_hash('read', {'p': 1})}"
        assert det.paired_tool is None

    def test_critical_on_identical_outcomes(self) -> None:
        """Scenario 19."""
        hist = lw.ToolCallHistory(E)
        result = {"content": [{"type": "text", "text": "same output"}], "details": {"ok": True}}
        for i in range(20):
            pair(hist, "read", {"path": "/same.txt"}, result=result, call_id=str(i))
        det = hist.detect("read", {"path": "/same.txt"})
        assert summary(det) == ("critical", "generic_repeat", 20)
        assert det is not None and "identical outcomes" in det.message
        sig = args_hash("read", {"path": "/same.txt"})
        assert det.warning_key.startswith(f"generic:read:{sig}:")

    def test_changing_outcomes_only_warn(self) -> None:
        """Scenario 28: the same command with changing output stays a warning."""
        hist = lw.ToolCallHistory(E)
        for i in range(30):
            pair(
                hist,
                "exec",
                {"command": "date"},
                result={
                    "details": {"status": "completed", "exitCode": 0, "aggregated": f"tick {i}"}
                },
                call_id=str(i),
            )
        assert summary(hist.detect("exec", {"command": "date"})) == (
            "warning",
            "generic_repeat",
            30,
        )

    def test_failing_exec_with_changing_text_only_warns(self) -> None:
        """Scenario 29."""
        hist = lw.ToolCallHistory(E)
        for i in range(30):
            pair(
                hist,
                "exec",
                {"command": "build"},
                result={
                    "content": [
                        {"type": "text", "text": f"Runtime failed before spawn: attempt {i}"}
                    ],
                    "details": {"status": "failed", "exitCode": None, "aggregated": ""},
                },
                call_id=str(i),
            )
        det = hist.detect("exec", {"command": "build"})
        assert det is not None and det.level == "warning"

    def test_exec_volatile_fields_do_not_hide_a_loop(self) -> None:
        """Scenarios 26 and 27."""
        hist = lw.ToolCallHistory(E)
        params = {"command": "grafana-api.sh datasources"}
        for i in range(20):
            details = {
                "status": "completed",
                "exitCode": 0,
                "aggregated": "Loki\nPrometheus",
                "durationMs": 100 + i,
                "cwd": f"/w/{i}",
            }
            pair(hist, "exec", params, result={"details": details}, call_id=str(i))
        assert summary(hist.detect("exec", params)) == ("critical", "generic_repeat", 20)
        tail = lw.ToolCallHistory(E)
        params2 = {"command": "tail -f x", "yieldMs": 1000}
        for i in range(20):
            details = {
                "status": "running",
                "tail": "(no new output)",
                "sessionId": f"s{i}",
                "pid": i,
            }
            pair(
                tail,
                "exec",
                params2,
                result={"content": f"pid {i}", "details": details},
                call_id=str(i),
            )
        assert summary(tail.detect("exec", params2)) == ("critical", "generic_repeat", 20)

    def test_global_breaker_ignores_detector_flags(self) -> None:
        """Scenario 25."""
        hist = history(
            detectors={"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}
        )
        for i in range(30):
            pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
        det = hist.detect("read", {"p": 1})
        assert summary(det) == ("critical", "global_circuit_breaker", 30)
        assert det is not None and "global circuit breaker" in det.message
        assert det.warning_key.startswith("global:read:")

    def test_pending_calls_do_not_break_the_streak(self) -> None:
        """Pending records of the same call are skipped, not streak-breaking."""
        hist = lw.ToolCallHistory(E)
        for i in range(19):
            pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
        hist.record_call("read", {"p": 1}, call_id="pending")
        hist.record_call("other", {}, call_id="x")
        pair(hist, "read", {"p": 1}, result="same", call_id="last")
        assert summary(hist.detect("read", {"p": 1})) == ("critical", "generic_repeat", 20)

    def test_a_different_outcome_resets_the_streak(self) -> None:
        """A different outcome starts the no-progress streak over."""
        hist = lw.ToolCallHistory(E)
        for i in range(25):
            pair(hist, "read", {"p": 1}, result="a" if i != 10 else "b", call_id=str(i))
        det = hist.detect("read", {"p": 1})
        assert summary(det) == ("warning", "generic_repeat", 25)

    def test_custom_thresholds(self) -> None:
        """The configured thresholds replace the defaults."""
        hist = history(warningThreshold=3, criticalThreshold=5)
        for i in range(3):
            pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
        assert summary(hist.detect("read", {"p": 1})) == ("warning", "generic_repeat", 3)
        for i in range(3, 5):
            pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
        assert summary(hist.detect("read", {"p": 1})) == ("critical", "generic_repeat", 5)


class TestKnownPoll:
    POLL = {"action": "poll", "sessionId": "s1"}
    STEADY = {
        "content": "(no new output)\n\nProcess still running.",
        "details": {"status": "running", "aggregated": "steady"},
    }

    def test_custom_thresholds(self) -> None:
        """Scenario 20."""
        hist = history(
            warningThreshold=2,
            criticalThreshold=4,
            detectors={"genericRepeat": False, "knownPollNoProgress": True, "pingPong": False},
        )
        for i in range(2):
            pair(hist, "process", self.POLL, result=self.STEADY, call_id=str(i))
        assert summary(hist.detect("process", self.POLL)) == (
            "warning",
            "known_poll_no_progress",
            2,
        )
        for i in range(2, 4):
            pair(hist, "process", self.POLL, result=self.STEADY, call_id=str(i))
        assert summary(hist.detect("process", self.POLL)) == (
            "critical",
            "known_poll_no_progress",
            4,
        )

    def test_all_detectors_off(self) -> None:
        """Scenario 21."""
        hist = history(
            detectors={"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}
        )
        for i in range(20):
            pair(hist, "process", self.POLL, result=self.STEADY, call_id=str(i))
        assert hist.detect("process", self.POLL) is None

    def test_warning_and_critical(self) -> None:
        """Scenarios 22 and 23."""
        hist = lw.ToolCallHistory(E)
        for i in range(10):
            pair(hist, "process", self.POLL, result=self.STEADY, call_id=str(i))
        det = hist.detect("process", self.POLL)
        assert summary(det) == ("warning", "known_poll_no_progress", 10)
        assert det is not None and "no progress" in det.message
        for i in range(10, 20):
            pair(hist, "process", self.POLL, result=self.STEADY, call_id=str(i))
        det = hist.detect("process", self.POLL)
        assert summary(det) == ("critical", "known_poll_no_progress", 20)
        assert det is not None and "CRITICAL" in det.message
        assert det.warning_key.startswith("poll:process:")

    def test_progress_is_never_flagged(self) -> None:
        """Scenario 24."""
        hist = lw.ToolCallHistory(E)
        for i in range(25):
            result = {
                "content": f"line {i}",
                "details": {"status": "running", "aggregated": f"line {i}"},
            }
            pair(hist, "process", self.POLL, result=result, call_id=str(i))
        assert hist.detect("process", self.POLL) is None

    def test_poll_with_detector_off_is_still_excluded_from_generic_repeat(self) -> None:
        """A known poll tool never falls back to the generic rules."""
        hist = history(detectors={"knownPollNoProgress": False})
        for i in range(15):
            pair(hist, "command_status", {"id": 1}, result="same", call_id=str(i))
        assert hist.detect("command_status", {"id": 1}) is None


class TestUnknownTool:
    def test_changing_args_still_count(self) -> None:
        """Scenarios 30 and 31."""
        hist = lw.ToolCallHistory(E)
        for i in range(9):
            pair(
                hist,
                "exec",
                {"command": f"c{i}"},
                error=RuntimeError("Tool exec not found"),
                call_id=str(i),
            )
        assert hist.detect("exec", {"command": "echo still allowed"}) is None
        for i in range(9, 20):
            pair(
                hist,
                "exec",
                {"shape": i},
                error=RuntimeError("Tool exec not found"),
                call_id=str(i),
            )
        det = hist.detect("exec", {"command": "anything"})
        assert det is not None and (det.level, det.detector) == ("critical", "unknown_tool_repeat")
        assert det.warning_key == "unknown-tool:exec:exec"
        assert "exec" in det.message and str(det.count) in det.message

    def test_not_gated_by_detector_flags(self) -> None:
        """The unknown-tool rule works with every detector switched off."""
        hist = history(
            unknownToolThreshold=3,
            detectors={"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False},
        )
        for i in range(3):
            pair(hist, "ghost", {"i": i}, error="Unknown tool: ghost", call_id=str(i))
        assert summary(hist.detect("ghost", {})) == ("critical", "unknown_tool_repeat", 3)

    def test_another_record_breaks_the_streak(self) -> None:
        """A record of another tool in between breaks the unknown-tool streak."""
        hist = history(unknownToolThreshold=3)
        for i in range(2):
            pair(hist, "ghost", {"i": i}, error="Unknown tool: ghost", call_id=str(i))
        pair(hist, "read", {}, result="ok", call_id="r")
        pair(hist, "ghost", {"i": 9}, error="Unknown tool: ghost", call_id="g")
        assert hist.detect("ghost", {}) is None
        other = history(unknownToolThreshold=3)
        for i in range(3):
            pair(other, "ghost", {"i": i}, error="Unknown tool: ghost", call_id=str(i))
        assert other.detect("read", {}) is None  # the streak belongs to the tool that failed


class TestPingPong:
    @staticmethod
    def alternate(hist: lw.ToolCallHistory, n: int, *, outcome: Any = None) -> None:
        for i in range(n):
            tool, params = (
                ("read", {"path": "/a.txt"}) if i % 2 == 0 else ("list", {"dir": "/workspace"})
            )
            if outcome is None:
                hist.record_call(tool, params, call_id=str(i))
            else:
                pair(hist, tool, params, result=outcome(tool, i), call_id=str(i))

    def test_warning_without_outcomes(self) -> None:
        """Scenario 32."""
        hist = lw.ToolCallHistory(E)
        self.alternate(hist, 9)
        det = hist.detect("list", {"dir": "/workspace"})
        assert summary(det) == ("warning", "ping_pong", 10)
        assert det is not None and "ping-pong loop" in det.message
        assert det.paired_tool == "read"

    def test_critical_with_stable_outcomes(self) -> None:
        """Scenario 33."""
        hist = lw.ToolCallHistory(E)
        self.alternate(hist, 19, outcome=lambda tool, i: f"{tool} stable")
        det = hist.detect("list", {"dir": "/workspace"})
        assert summary(det) == ("critical", "ping_pong", 20)
        assert det is not None and "CRITICAL" in det.message and "ping-pong loop" in det.message
        low, high = sorted(
            [args_hash("list", {"dir": "/workspace"}), args_hash("read", {"path": "/a.txt"})]
        )
        assert det.warning_key == f"pingpong:{low}|{high}"

    def test_progress_keeps_it_a_warning(self) -> None:
        """Scenario 34."""
        hist = lw.ToolCallHistory(E)
        self.alternate(hist, 19, outcome=lambda tool, i: f"{tool} {i}")
        assert summary(hist.detect("list", {"dir": "/workspace"})) == ("warning", "ping_pong", 20)

    def test_broken_alternation(self) -> None:
        """Scenario 35."""
        hist = lw.ToolCallHistory(E)
        for tool in ("read", "list", "read", "write"):
            hist.record_call(tool, {})
        assert hist.detect("list", {}) is None

    def test_checked_call_must_continue_the_alternation(self) -> None:
        """Only a call that continues the alternation is a ping-pong."""
        hist = lw.ToolCallHistory(E)
        self.alternate(hist, 12)  # ends with list
        assert hist.detect("list", {"dir": "/workspace"}) is None  # repeats the newest call
        assert summary(hist.detect("read", {"path": "/a.txt"})) == ("warning", "ping_pong", 13)

    def test_count_includes_the_checked_call_past_history_size(self) -> None:
        """The count is the alternating tail plus the checked call: historySize + 1 at most."""
        cfg = lw.LoopDetectionConfig.from_dict(
            {"enabled": True, "historySize": 4, "warningThreshold": 5}
        )
        hist = lw.ToolCallHistory(cfg)
        self.alternate(hist, 9)  # the window keeps the last four: list, read, list, read
        assert len(hist) == 4
        assert summary(hist.detect("list", {"dir": "/workspace"})) == ("warning", "ping_pong", 5)

    def test_missing_outcomes_deny_evidence(self) -> None:
        """Critical needs every tail record to have an outcome."""
        hist = lw.ToolCallHistory(E)
        self.alternate(hist, 18, outcome=lambda tool, i: f"{tool} stable")
        hist.record_call("read", {"path": "/a.txt"}, call_id="pending")
        det = hist.detect("list", {"dir": "/workspace"})
        assert summary(det) == ("warning", "ping_pong", 20)


class TestSends:
    """Message-send loops (scenarios 41-55)."""

    @staticmethod
    def send_result(i: int) -> dict[str, Any]:
        payload = {
            "ok": True,
            "channel": "feishu",
            "chatId": "oc_chat",
            "runId": f"run_{i}",
            "messageId": f"om_{i}",
            "receipt": {"platformMessageId": f"p_{i}"},
        }
        return {"content": [{"type": "text", "text": str(payload)}], "details": payload}

    SEND = {"action": "send", "target": "chat", "text": "ping"}

    def test_identical_sends_go_critical(self) -> None:
        """Scenario 43."""
        hist = lw.ToolCallHistory(E)
        for i in range(20):
            pair(hist, "message", self.SEND, result=self.send_result(i), call_id=str(i))
        assert summary(hist.detect("message", self.SEND)) == ("critical", "generic_repeat", 20)

    def test_sends_with_different_texts_are_progress(self) -> None:
        """Scenario 49."""
        hist = lw.ToolCallHistory(E)
        for i in range(20):
            pair(
                hist,
                "message",
                {**self.SEND, "text": f"t{i}"},
                result=self.send_result(i),
                call_id=str(i),
            )
        assert hist.detect("message", {**self.SEND, "text": "new"}) is None

    def test_a_loop_veto_does_not_reset_the_block(self) -> None:
        """Scenario 52."""
        hist = lw.ToolCallHistory(E)
        for i in range(20):
            pair(hist, "message", self.SEND, result=self.send_result(i), call_id=str(i))
        veto = {  # the shape of a loop-detection block answer
            "content": [{"type": "text", "text": "blocked"}],
            "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "blocked"},
        }
        pair(hist, "message", self.SEND, result=veto, call_id="veto")
        assert summary(hist.detect("message", self.SEND)) == ("critical", "generic_repeat", 20)

    def test_plugin_denials_escalate(self) -> None:
        """Scenario 53."""
        hist = lw.ToolCallHistory(E)
        denial = {"details": {"status": "blocked", "deniedReason": "plugin-before-tool-call"}}
        for i in range(20):
            pair(hist, "message", {"action": "read"}, result=denial, call_id=str(i))
        assert summary(hist.detect("message", {"action": "read"})) == (
            "critical",
            "generic_repeat",
            20,
        )

    @pytest.mark.parametrize(
        ("tool", "params"),
        [
            ("sessions_send", {"sessionKey": "k", "text": "hi"}),
            ("message", {"action": "reply", "text": "hi"}),
            ("message", {"action": "upload-file", "path": "/f"}),
            ("message", {"action": "poll", "question": "q"}),
            ("message", {"action": "broadcast", "text": "hi"}),
        ],
    )
    def test_other_send_shapes(self, tool: str, params: dict[str, Any]) -> None:
        """Scenarios 42, 44, 46, 47, 48."""
        hist = lw.ToolCallHistory(E)
        for i in range(20):
            details = {
                "ok": True,
                "channel": "c",
                "fileId": f"f_{i}",
                "pollId": f"pl_{i}",
                "messageId": f"m{i}",
            }
            pair(hist, tool, params, result={"details": details}, call_id=str(i))
        det = hist.detect(tool, params)
        assert det is not None and det.level == "critical"


class TestCountsNeverExceedTheWindow:
    def test_counts_are_bounded_by_history_size(self) -> None:
        """A long identical run can never report more than historySize occurrences."""
        hist = history(
            historySize=12,
            warningThreshold=5,
            criticalThreshold=50,
            globalCircuitBreakerThreshold=60,
        )
        for i in range(100):
            pair(hist, "read", {"p": 1}, result="same", call_id=str(i))
        det = hist.detect("read", {"p": 1})
        assert det is not None and det.count == 12

    def test_unknown_streak_is_bounded_by_the_window(self) -> None:
        """The unknown-tool count never exceeds the records in the window."""
        hist = history(historySize=5, unknownToolThreshold=5)
        for i in range(50):
            pair(hist, "ghost", {"i": i}, error="Unknown tool: ghost", call_id=str(i))
        det = hist.detect("ghost", {})
        assert det is not None and det.count == 5
