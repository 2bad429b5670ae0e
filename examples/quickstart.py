"""The README's quickstart, run: a plain agent loop whose model is stuck polling a job.

No API key, no network: the model is a function that asks for the same call
every turn, the way a stuck model does. Run it::

    python examples/quickstart.py

and it prints what the model read after each call (the warning, the blocks)
and how loopwarden stopped the run.
"""

from __future__ import annotations

from typing import Any

import loopwarden as lw

guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})


def run_agent(model, tools, messages):
    run = guard.run(tools=list(tools))  # one guarded run per user turn
    while calls := model(messages):  # the model asks for tool calls
        for call in calls:
            name, args, call_id = call["name"], call["args"], call["id"]
            decision = run.before_call(name, args, call_id=call_id)
            if decision.blocked:  # not executed: the model reads why
                output = decision.message
            else:
                output = str(tools[name](**args)) if name in tools else f"Unknown tool: {name}"
                if note := run.after_call(name, args, call_id=call_id, result=output):
                    output += f"\n\n{note}"  # the warning the model reads
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


# -- everything below stands in for your model and tools -----------------------------------


def stuck_model(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Asks whether job 42 is done, again and again, whatever it is told."""
    return [{"name": "poll_job", "args": {"job": "42"}, "id": f"call_{len(messages) + 1}"}]


def poll_job(job: str) -> str:
    return "pending"  # the job never finishes


def kind(content: str) -> str:
    if content.startswith("CRITICAL"):
        return "not run, the model reads"
    if "\n\n" in content:
        return "ran, and the result ends with"
    return "ran"


def summary(messages: list[dict[str, Any]]) -> list[str]:
    """One line per stretch of calls treated alike: ``calls 1-10: ran: pending``."""
    lines: list[str] = []
    start = 1
    for n, message in enumerate(messages, 1):
        here = kind(message["content"])
        if n == len(messages) or kind(messages[n]["content"]) != here:
            calls = f"call {n}" if start == n else f"calls {start}-{n}"
            text = message["content"] if start == n else messages[start - 1]["content"]
            shown = text.rpartition("\n\n")[2]
            lines.append(f"{calls}: {here}: {shown[:72]}{'...' if len(shown) > 72 else ''}")
            start = n + 1
    return lines


def main() -> int:
    messages: list[dict[str, Any]] = []
    try:
        run_agent(stuck_model, {"poll_job": poll_job}, messages)
    except lw.LoopAbort as stop:  # CircuitBreakerTripped or CompactionLoopPersisted
        print("\n".join(summary(messages)))
        print(f"call {len(messages) + 1}: the run is stopped by loopwarden ({stop.code})")
        return 0
    print("the agent finished without being stopped")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
