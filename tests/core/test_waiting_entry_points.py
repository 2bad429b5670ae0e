"""Waiting is not looping, through a framework integration and through replay (issue 9).

A 19-poll wait that ends in success is never blocked before OpenClaw would
block it (the 21st identical call), with the defaults and every extra rule on.
The hook entry point has its test in tests/hooks/test_waiting.py.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import loopwarden as lw
from loopwarden.testing import FakeClock

ON = {"tools": {"loopDetection": {"enabled": True}}}


class TestPydanticAI:
    """A real Pydantic AI agent with its offline ``FunctionModel``."""

    def agent(self, guard: lw.LoopGuard, tool: str, clock: FakeClock | None, took: float) -> Any:
        pytest.importorskip("pydantic_ai")
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from loopwarden.integrations.pydantic_ai import LoopGuardCapability

        ids = itertools.count(1)
        answers: list[str] = []

        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            last = messages[-1].parts[-1] if messages else None
            content = getattr(last, "content", None)
            if isinstance(content, str) and content.startswith("success"):
                return ModelResponse(parts=[TextPart("CI passed")])
            return ModelResponse(
                parts=[ToolCallPart(tool, {"run": 4242}, tool_call_id=f"call_{next(ids)}")]
            )

        agent: Agent[None, str] = Agent(
            FunctionModel(reply), capabilities=[LoopGuardCapability(guard, on_stop="raise")]
        )
        polls = itertools.count(1)

        def check(run: int) -> str:
            """Check the CI run."""
            if clock is not None:
                clock.advance(took)
            answer = "success" if next(polls) == 20 else "running"
            answers.append(answer)
            return answer

        agent.tool_plain(name=tool)(check)
        return agent, answers

    @pytest.mark.parametrize("tool", ["ci_run_status", "command_status"])
    def test_a_19_poll_wait_is_never_blocked(self, tool: str) -> None:
        agent, answers = self.agent(lw.LoopGuard(ON, clock=FakeClock()), tool, None, 0.0)
        assert agent.run_sync("Wait for CI run 4242.").output == "CI passed"
        assert answers == ["running"] * 19 + ["success"]  # every poll ran

    def test_a_slow_check_is_a_wait(self) -> None:
        """A tool that takes 30 s per call (the guard's clock says so) is waiting."""
        clock = FakeClock()
        agent, answers = self.agent(lw.LoopGuard(ON, clock=clock), "ci_run", clock, 30.0)
        assert agent.run_sync("Wait for CI run 4242.").output == "CI passed"
        assert len(answers) == 20

    def test_a_spin_is_blocked_early(self) -> None:
        """The same checks made at once are blocked from the 6th: the model is told."""
        clock = FakeClock()
        agent, answers = self.agent(lw.LoopGuard(ON, clock=clock), "ci_run", clock, 0.1)
        with pytest.raises(lw.CircuitBreakerTripped) as stop:
            agent.run_sync("Wait for CI run 4242.")
        assert stop.value.detector == "consecutive_repeat"
        assert len(answers) == 5  # calls 6 and 7 were blocked, 8 stopped the run


def test_replay_of_a_19_poll_wait(tmp_path: Path) -> None:
    """``loopwarden replay`` of a chat trace: 19 identical polls then success, no block."""
    from loopwarden.config import load_config
    from loopwarden.traces import Source, read_source
    from loopwarden.traces.replay import Replayer, RunReport

    lines: list[dict[str, Any]] = [{"role": "user", "content": "Wait for the deploy."}]
    for n in range(20):
        call_id = f"call_{n}"
        args = {"command": "sleep 30; kubectl rollout status deploy/web --timeout=1s"}
        lines.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "bash",
                "arguments": json.dumps(args),
            }
        )
        output = "deployment complete" if n == 19 else "Waiting for rollout to finish"
        lines.append({"type": "function_call_output", "call_id": call_id, "output": output})
    trace = tmp_path / "wait.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    reports: list[RunReport] = []
    replayer = Replayer(load_config(ON), on_run=reports.append, on_problem=lambda *p: None)
    read_source(
        Source(str(trace), trace),
        replayer,
        index=0,
        on_format=lambda f: replayer.set_source(str(trace), f),
    )
    replayer.finish()
    assert len(reports) == 1 and reports[0].calls == 20
    assert [e for e in reports[0].events if e.action in ("block", "stop")] == []
