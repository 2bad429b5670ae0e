"""The README's OpenAI Agents SDK example, run against a model that never stops polling.

No API key, no network: the SDK's own ``ScriptedModel`` (``agents.testing``)
takes the place of ``gpt-5-mini``, scripted to ask for the same tool call 40
turns in a row. Run it::

    pip install 'loopwarden[openai-agents]'
    python examples/openai_agents_quickstart.py
"""

from __future__ import annotations

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, function_call

from loopwarden import LoopAbort
from loopwarden.integrations.openai_agents import LoopGuardForAgents


@function_tool
def poll_status(job: str) -> str:
    return "pending"


guard = LoopGuardForAgents({"tools": {"loopDetection": {"enabled": True}}})
agent = guard.protect(Agent(name="poller", model="gpt-5-mini", tools=[poll_status]))


def ask(question: str) -> str:
    try:
        return Runner.run_sync(
            agent, question, max_turns=40, run_config=guard.run_config()
        ).final_output
    except LoopAbort as stop:  # CircuitBreakerTripped or CompactionLoopPersisted
        return f"stopped by loopwarden: {stop.code}"


if __name__ == "__main__":
    set_tracing_disabled(True)  # nothing to upload traces to
    # Stands in for gpt-5-mini: it asks whether job 42 is done, every turn.
    agent.model = ScriptedModel(
        [[function_call("poll_status", {"job": "42"}, call_id=f"c{n}")] for n in range(40)]
    )
    print(ask("Is job 42 done?"))
