"""What happens when loopwarden ends a run: the stop's report, the last answer, a person's say.

``loopwarden.onStop`` (and each integration's ``on_stop=`` argument) chooses:

* ``"answer"``: the run ends with one last model turn without tools, told what was
  stopped and why (:func:`final_answer_request`); its text is the run's normal final
  output, with the :class:`StopReport` attached as metadata.
* ``"raise"``: the stop propagates as a :class:`~loopwarden.errors.LoopAbort`.
* ``"ask"``: where a person is present, the host's own approval flow asks whether to let
  the call run once more (``allow_once``), end the run (``stop``) or go on with a note for
  the model (``continue``); :meth:`loopwarden.RunGuard.resume` applies the answer.

Unset, each host picks by whether a person is present (docs/stopping.md has the table).
The post-compaction abort (``compaction_loop_persisted``) is never put to a person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

__all__ = [
    "CHOICES",
    "ON_STOP",
    "Choice",
    "OnStop",
    "StopReport",
    "ask_options",
    "ask_question",
    "choose_on_stop",
    "fallback_answer",
    "final_answer_request",
    "parse_choice",
    "person_note",
]

OnStop = Literal["answer", "raise", "ask"]
ON_STOP: tuple[str, ...] = get_args(OnStop)
Choice = Literal["allow_once", "stop", "continue"]
CHOICES: tuple[str, ...] = get_args(Choice)
# How the rules' stop messages begin (engine/messages.py).
_STOPPED = re.compile(r"(?:the )?loopwarden (?:global circuit breaker )?stopped this run: ")

# Words a person (or a host's approval answer) may use for each choice.
_SYNONYMS = {
    "allow_once": ("allow_once", "allow", "once", "approve", "approved", "yes", "run", "retry"),
    "stop": ("stop", "end", "abort", "deny", "denied", "reject", "no", "cancel"),
    "continue": ("continue", "note", "continue_with_note", "go_on", "resume"),
}


def parse_choice(value: object) -> Choice | None:
    """A person's answer as a :data:`Choice` (``None``: not one of them)."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace("-", "_").replace(" ", "_")
    for choice, words in _SYNONYMS.items():
        if text in words:
            return choice  # type: ignore[return-value]  # a key of _SYNONYMS
    return None


@dataclass(frozen=True)
class StopReport:
    """A stop, and what it saved: the rule, the tool, the count, the run's calls.

    ``calls`` and ``refused`` are counted by the guard; ``tokens``, ``turns`` and
    ``turn_limit`` are filled in by an integration where its host reports them
    (:meth:`with_usage`).
    """

    code: str
    """The rule that ended the run (``LoopAbort.code``)."""
    tool: str
    count: int
    """The rule's count: identical calls, calls in the cycle, failures in a row ..."""
    message: str
    """The rule's own text (what the model was told)."""
    calls: int = 0
    """Tool calls the run asked for, this one included."""
    refused: int = 0
    """Of those, the calls loopwarden did not let run (blocks, and the stop itself)."""
    run_id: str | None = None
    tokens: int | None = None
    """Tokens the run had used when it was stopped (where the host reports them)."""
    turns: int | None = None
    """Model turns the run had taken (where the host reports them)."""
    turn_limit: int | None = None
    """The host's own cap on model turns (``max_turns``, a recursion or request limit)."""
    limit_name: str | None = None
    """What the host calls that cap, for the summary."""

    @property
    def saved_turns(self) -> int | None:
        """Model turns the loop could still have taken before the host's own cap ended it
        (``None``: the host has no cap, or did not say)."""
        if self.turn_limit is None or self.turns is None:
            return None
        return max(0, self.turn_limit - self.turns)

    @property
    def saved_tokens(self) -> int | None:
        """An estimate: :attr:`saved_turns` at the run's own tokens per turn."""
        saved = self.saved_turns
        if saved is None or not self.tokens or not self.turns:
            return None
        return round(self.tokens / self.turns * saved)

    def with_usage(
        self,
        *,
        tokens: int | None = None,
        turns: int | None = None,
        turn_limit: int | None = None,
        limit_name: str | None = None,
    ) -> StopReport:
        """A copy with what the host reported (``None`` keeps a field as it is)."""
        given = {
            "tokens": tokens,
            "turns": turns,
            "turn_limit": turn_limit,
            "limit_name": limit_name,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes) if changes else self

    def what(self) -> str:
        """The rule's text without its ``CRITICAL:`` prefix (what happened, in words)."""
        text = self.message
        for prefix in ("CRITICAL: ", "WARNING: "):
            if text.startswith(prefix):
                text = text[len(prefix) :]
        return text

    def reason(self) -> str:
        """What happened, for a sentence that already says the run was stopped: :meth:`what`
        without its own "loopwarden stopped this run:" (or the circuit breaker's)."""
        text = self.what()
        found = _STOPPED.match(text)
        if found is None:
            return text
        return text[found.end() :]

    def summary(self) -> str:
        """One paragraph for the person who runs the agent: the rule, the tool, the count,
        and what the stop saved."""
        head = (
            f"loopwarden stopped this run (rule {self.code}, tool {self.tool}, count {self.count})"
        )
        if self.calls:
            head += (
                f": {self.refused} of its {self.calls} tool call"
                f"{'s' if self.calls != 1 else ''} {'was' if self.refused == 1 else 'were'} "
                "not run"
            )
        parts = [head + "."]
        if self.tokens is not None:
            parts.append(f"It had used {self.tokens:,} tokens.")
        saved = self.saved_turns
        if saved is not None:
            limit = self.limit_name or "turn limit"
            tokens = self.saved_tokens
            about = f" (about {tokens:,} tokens)" if tokens else ""
            parts.append(
                f"Without the stop it could have gone on for {saved} more model "
                f"turn{'s' if saved != 1 else ''}{about} before its {limit} of "
                f"{self.turn_limit}."
            )
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Machine-readable form (the metadata attached to a final answer)."""
        return {
            "action": "stop",
            "code": self.code,
            "detector": self.code,
            "tool": self.tool,
            "count": self.count,
            "message": self.message,
            "calls": self.calls,
            "refused": self.refused,
            "run_id": self.run_id,
            "tokens": self.tokens,
            "turns": self.turns,
            "turn_limit": self.turn_limit,
            "saved_turns": self.saved_turns,
            "saved_tokens": self.saved_tokens,
            "summary": self.summary(),
        }


def final_answer_request(report: StopReport) -> str:
    """The instruction for the run's last model turn (no tools): why the run was stopped,
    and what to report."""
    return (
        f"loopwarden has stopped this run because it was stuck in a loop (rule {report.code}): "
        f"{report.reason()} No tools are available any more. Write your final answer to the "
        "user now, as plain text: what you did and found so far, what is left undone, and "
        "what the user should do next (for example check something by hand, or give you "
        "different instructions). Do not ask to call tools and do not retry the call."
    )


def fallback_answer(report: StopReport) -> str:
    """The final answer when the last model turn could not be had (it failed, or it still
    asked for tools): the stop's own summary."""
    return (
        f"{report.summary()} {report.what()} The agent could not write a final answer; "
        "check its last results and give it different instructions."
    )


def person_note(note: str | None) -> str:
    """What the model reads instead of the refused call's result when a person chose to go
    on (``continue``), with or without a note of their own."""
    text = (note or "").strip()
    said = f' They said: "{text}"' if text else ""
    return (
        "loopwarden stopped this call because the run was repeating itself, and the user "
        f"decided the run should go on.{said} The call was not run. Follow the user's "
        "instructions; do not repeat the call that was looping."
    )


def choose_on_stop(given: str | None, configured: str | None, *, person: bool) -> OnStop:
    """What a stop does in one host: the integration's argument, else the config's
    ``loopwarden.onStop``, else ``ask`` where a person can be asked and ``answer`` where
    none can. ``ask`` without a person to ask falls back to ``answer``."""
    chosen = given if given is not None else configured
    if chosen is None:
        return "ask" if person else "answer"
    if chosen not in ON_STOP:
        raise ValueError(f"on_stop must be 'answer', 'raise' or 'ask', not {chosen!r}")
    if chosen == "ask" and not person:
        return "answer"
    return chosen  # type: ignore[return-value]  # checked against ON_STOP


def ask_question(report: StopReport) -> str:
    """The question a host's approval flow shows the person."""
    return (
        f"loopwarden stopped this run (rule {report.code}): {report.reason()} Let the call "
        "run once more, stop the run, or let it continue with a note for the agent?"
    )


def ask_options() -> list[dict[str, str]]:
    """The three answers, with the labels hosts show."""
    return [
        {"choice": "allow_once", "label": "Let the call run once more"},
        {"choice": "stop", "label": "Stop the run"},
        {"choice": "continue", "label": "Continue, with a note for the agent"},
    ]
