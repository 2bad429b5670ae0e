"""``loopwarden demo``: a scripted agent gets stuck, and the real runtime guard stops it.

No model, no network, no API key: the "model" is a script that keeps asking
for the same tool call, as stuck models do. Every call goes through a real
:class:`~loopwarden.guard.LoopGuard`, exactly as an integration would do it:
``before_call`` decides, allowed tools run, ``after_call`` returns the warning
note appended to the result the model sees, blocked calls are not executed
and the model gets the block message instead, and ``CircuitBreakerTripped`` /
``CompactionLoopPersisted`` end the run.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from ..testing import SMALL_THRESHOLDS, ScriptedAgent
from ._clickutil import CONTEXT, EXIT_OK, UsageFailure, colour_enabled, run_command, styler

__all__ = ["DEMO_CONFIG", "main"]

# The small thresholds of loopwarden.testing (the defaults are 10 / 20 / 30), so the
# escalation fits on one screen.
DEMO_CONFIG: Mapping[str, Any] = SMALL_THRESHOLDS

HELP = """Watch the loopwarden guard stop a looping agent (no model, no network, no API key).

\b
A scripted agent starts a deployment, then polls its status again and again
while it never changes, the way stuck agents do. Every call goes through the
real runtime guard with small demo thresholds (warning at 3 identical calls,
block at 5, circuit breaker at 7; the defaults are 10 / 20 / 30):
  1. normal calls run;
  2. a WARNING note is appended to the tool result the model reads;
  3. further identical calls are BLOCKED: the tool does not run and the model
     gets the block message as an error result;
  4. the global circuit breaker raises CircuitBreakerTripped and ends the run.
Act 2 shows the post-compaction guard: the context is compacted, the agent
resumes the same call with the same result, and CompactionLoopPersisted ends
the run.

\b
Examples:
  loopwarden demo
  loopwarden demo --no-delay --record demo-run.jsonl && loopwarden replay demo-run.jsonl
"""


class _Printer:
    def __init__(self, style: Callable[..., str], delay: float) -> None:
        self.s = style
        self.delay = delay

    def line(self, text: str = "") -> None:
        click.echo(text)

    def pause(self, factor: float = 1.0) -> None:
        if self.delay > 0:
            sys.stdout.flush()
            time.sleep(self.delay * factor)

    def block(self, label: str, text: str, colour: str | None) -> None:
        """A multi-line message indented under a label."""
        wrapped = textwrap.wrap(text, width=78)
        prefix = f"      {self.s(label, fg=colour, bold=True)} "
        indent = " " * (7 + len(label))
        for index, part in enumerate(wrapped):
            self.line((prefix if index == 0 else indent) + self.s(part, fg=colour))


def _call_text(tool: str, params: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())
    return f"{tool}({args})"


class _Scene:
    """One act: the scripted model's calls go through a real run guard; this prints them."""

    def __init__(self, guard: Any, printer: _Printer, run_id: str, tools: dict[str, Any]) -> None:
        self.p = printer
        self.agent = ScriptedAgent(
            guard.run(run_id, session_id="demo", tools=list(tools)),
            tools,
            render=_result_text,
            on_run=lambda seen: self.p.line(f"      ran → {seen.text}"),
        )
        self.step = 0

    @property
    def run(self) -> Any:
        return self.agent.run

    @property
    def blocked(self) -> int:
        return sum(seen.blocked for seen in self.agent.seen)

    def call(self, tool: str, params: dict[str, Any]) -> None:
        """One tool call as an integration makes it. Raises LoopAbort when the run ends."""
        s = self.p.s
        self.step += 1
        self.p.line(
            f"  {s(f'#{self.step:<2}', dim=True)} model → {s(_call_text(tool, params), bold=True)}"
        )
        seen = self.agent.call(tool, params, f"call_{self.step}")  # may raise (stop, abort)
        if seen.blocked:
            self.p.line(f"      {s('BLOCKED', fg='red', bold=True)} — not executed")
            self.p.block("model gets (error):", seen.text, "red")
        elif seen.note:
            # The integration appends the note to the result the model reads.
            self.p.block("model also reads:", seen.note, "yellow")
        self.p.pause()


def _result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result)


def _act_one(guard: Any, p: _Printer) -> None:
    from ..errors import CircuitBreakerTripped

    s = p.s
    p.line(s("Act 1 — a deployment that never finishes", bold=True))
    p.line("The agent starts a deploy, then keeps polling a status that never changes.")
    p.line()
    state = {"deploys": 0}

    def start_deploy(service: str) -> dict[str, Any]:
        state["deploys"] += 1
        return {"deploy_id": "d-42", "service": service, "status": "started"}

    def check_deploy(deploy_id: str) -> dict[str, Any]:
        return {"deploy_id": deploy_id, "status": "pending"}

    def read_file(path: str) -> str:
        return "service: shop\nreplicas: 3".replace("\n", "; ")

    agent = _Scene(
        guard,
        p,
        "demo-act-1",
        {"read_file": read_file, "start_deploy": start_deploy, "check_deploy": check_deploy},
    )
    try:
        agent.call("read_file", {"path": "deploy.yaml"})
        agent.call("start_deploy", {"service": "shop"})
        for _ in range(20):  # the stubborn model: it would poll forever
            agent.call("check_deploy", {"deploy_id": "d-42"})
        p.line(s("  (the guard never stopped the run — this should not happen)", fg="red"))
    except CircuitBreakerTripped as exc:
        p.line(
            f"      {s('STOPPED', fg='red', bold=True)} CircuitBreakerTripped("
            f"code={exc.code!r}, tool={exc.tool_name!r}, count={exc.count})"
        )
        p.block("the run ends:", exc.message, "red")
        p.line()
        p.line(
            f"  The model asked for {agent.step} calls: {agent.agent.executed} ran, "
            f"{agent.blocked} were "
            f"blocked, and call {agent.step} tripped the circuit breaker, which ended the run."
        )
    agent.run.end()


def _act_two(guard: Any, p: _Printer) -> None:
    from ..errors import CompactionLoopPersisted

    s = p.s
    p.line(s("Act 2 — compaction does not break the loop", bold=True))
    p.line("The agent re-reads a build log; the context overflows and is compacted; the")
    p.line("agent resumes with the very same call and gets the very same result.")
    p.line()

    def read_file(path: str) -> str:
        return "step 7/9: RUN pip install -r requirements.txt (waiting for lock)"

    agent = _Scene(guard, p, "demo-act-2", {"read_file": read_file})
    try:
        agent.call("read_file", {"path": "build.log"})
        agent.call("read_file", {"path": "build.log"})
        p.line(
            f"  {s('context compacted', fg='blue', bold=True)} — the runner summarised the "
            "history and retries; it calls run.on_compaction()"
        )
        agent.run.on_compaction()
        p.line(s("      post-compaction guard armed for 3 attempts", fg="blue"))
        p.pause()
        for _ in range(5):
            agent.call("read_file", {"path": "build.log"})
        p.line(s("  (the guard never aborted the run — this should not happen)", fg="red"))
    except CompactionLoopPersisted as exc:
        p.line(
            f"      {s('ABORTED', fg='magenta', bold=True)} CompactionLoopPersisted("
            f"code={exc.code!r}, tool={exc.tool_name!r}, count={exc.count})"
        )
        p.block("the run ends:", exc.message, "magenta")
    agent.run.end()


@click.command(name="demo", help=HELP, context_settings=CONTEXT)
@click.option(
    "--no-delay",
    "--fast",
    "no_delay",
    is_flag=True,
    help="Print everything at once (the default pauses briefly between steps on a terminal).",
)
@click.option(
    "--act",
    type=click.Choice(["1", "2", "all"]),
    default="all",
    show_default=True,
    help="Which act to play.",
)
@click.option(
    "--record",
    metavar="FILE",
    help="Also write loopwarden's JSONL run record of the demo (replay it afterwards).",
)
@click.option("--color/--no-color", "color", default=None, help="Colour (default: on a TTY).")
def demo_command(no_delay: bool, act: str, record: str | None, color: bool | None) -> int:
    from ..guard import LoopGuard

    on_tty = colour_enabled(None, sys.stdout) or sys.stdout.isatty()
    p = _Printer(styler(colour_enabled(color, sys.stdout)), 0.0 if no_delay or not on_tty else 0.18)
    s = p.s
    if record is not None:
        try:
            with open(record, "ab"):
                pass
        except OSError as exc:
            raise UsageFailure(f"cannot write {record}: {exc.strerror or exc}") from None
    guard = LoopGuard(DEMO_CONFIG, run_record=record)
    block = DEMO_CONFIG["tools"]["loopDetection"]
    p.line(s("loopwarden demo", bold=True) + " — a scripted agent, the real runtime guard")
    p.line(
        s(
            f"config: enabled=true, warningThreshold={block['warningThreshold']}, "
            f"criticalThreshold={block['criticalThreshold']}, "
            f"globalCircuitBreakerThreshold={block['globalCircuitBreakerThreshold']} "
            "(demo values; the defaults are 10 / 20 / 30)",
            dim=True,
        )
    )
    p.line()
    try:
        if act in ("1", "all"):
            _act_one(guard, p)
        if act == "all":
            p.line()
        if act in ("2", "all"):
            _act_two(guard, p)
    finally:
        guard.close()
    p.line()
    p.line(
        s("Next:", bold=True) + " add the guard to your agent, or replay real traces to see "
        "where past runs looped:"
    )
    p.line("  loopwarden replay ~/.claude/projects      (or Codex, OpenClaw, OTel, chat exports)")
    if record is not None:
        overrides = " ".join(
            f"--set {key}={block[key]}"
            for key in ("warningThreshold", "criticalThreshold", "globalCircuitBreakerThreshold")
        )
        p.line(f"  loopwarden replay {record} {overrides}")
    return EXIT_OK


def main(argv: Sequence[str]) -> int:
    return run_command(demo_command, argv, "loopwarden demo")
