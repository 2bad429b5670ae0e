"""The README's OpenAI Agents SDK example, run against a model that never stops polling.

No API key, no network: the SDK's own ``ScriptedModel`` (``agents.testing``)
takes the place of ``gpt-5-mini``, scripted to ask for the same tool call every
turn until loopwarden stops the run, and then (asked without tools) to say
what it found. Run it::

    pip install 'loopwarden[openai-agents]'
    python examples/openai_agents_quickstart.py
"""

from __future__ import annotations

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from loopwarden.integrations.openai_agents import LoopGuardForAgents


@function_tool
def poll_status(job: str) -> str:
    return "pending"


guard = LoopGuardForAgents({"tools": {"loopDetection": {"enabled": True}}})
agent = guard.protect(Agent(name="poller", model="gpt-5-mini", tools=[poll_status]))


def ask(question: str) -> str:
    config = guard.run_config(max_turns=40)  # the max_turns you give Runner.run
    return Runner.run_sync(agent, question, max_turns=40, run_config=config).final_output


if __name__ == "__main__":
    set_tracing_disabled(True)  # nothing to upload traces to
    # Stands in for gpt-5-mini: it asks whether job 42 is done, every turn; the 32nd
    # turn is loopwarden's last request, made without tools.
    polls = [[function_call("poll_status", {"job": "42"}, call_id=f"c{n}")] for n in range(31)]
    answer = "Job 42 is still pending after 30 checks. Check it by hand."
    agent.model = ScriptedModel([*polls, [assistant_message(answer)]])
    print(ask("Is job 42 done?"))
