"""What a stop does in a coding agent (``loopwarden.onStop`` for the CLI hooks).

Imported only when a run is stopped (or a person's answer to a stop is due):
nothing here runs on an ordinary tool call.

* ``answer`` (the default where nobody can be asked): the CLI's own stop, as
  each adapter's ``stop`` gives it, with the stop's one-line summary
  (:meth:`~loopwarden.stopping.StopReport.summary`: rule, tool, count, calls
  refused, and the tokens the run used where the CLI's transcript has them:
  Codex's ``token_count`` events and Gemini's ``tokens`` at the stop; Claude Code's ``usage`` at
  ``SessionEnd``, since its transcript is written behind the hooks) after the
  rule's text, where the person sees it.
* ``raise``: the CLI's own stop with the rule's text only (the answer before
  ``onStop`` existed).
* ``ask`` (the default where a person can be asked; only Claude Code's
  interactive sessions): the refused call is put to the person through the
  CLI's own permission prompt (``permissionDecision: "ask"``), and the answer,
  which reaches loopwarden only through the session's next event, is applied
  with :meth:`~loopwarden.RunGuard.resume`:

  - "Yes": the call runs, and the next ``PostToolBatch`` holds its result:
    ``allow_once``;
  - "No" with a note ("Tab to amend"): the ``PostToolBatch`` holds Claude
    Code's rejection with the note, and the model goes on: ``continue``;
  - "No" or Esc: Claude Code interrupts the turn, no event follows: the run
    stays stopped (``stop``); the next prompt is a new run.

  Which call was asked is kept in the session's side record (``asked``),
  since the answer comes to another hook process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from .._logging import logger
from ..engine.state import Stop
from ..errors import LoopAbort
from ..guard import RunGuard
from ..stopping import OnStop, StopReport, ask_question, choose_on_stop, person_note
from ..stores import SideRecords
from ..traces._usage import usage_tokens
from .agents import Adapter, BatchEntry, Kind

__all__ = [
    "TRANSCRIPT_TAIL",
    "Facts",
    "answered",
    "claude_facts",
    "claude_person",
    "codex_facts",
    "end_text",
    "gemini_facts",
    "mode_for",
    "remember_ask",
    "stop_answer",
]

TRANSCRIPT_TAIL = 8 * 1024 * 1024
"""At a stop, at most this many bytes from the end of the session transcript are read
(the run's token figures, whether a person is at the CLI): a longer run's tokens are
those of its last 8 MiB."""

# Claude Code's tool result for a call the person refused at its permission prompt
# with a note ("Tab to amend"; captured from Claude Code 2.1.332).
_REJECTED = re.compile(r"^The user doesn't want to proceed with this tool use\b")
_SAID = "the user said:\n"


class Facts(NamedTuple):
    """What the CLI's transcript says about a stopped run."""

    person: bool = False
    """A person is at the CLI and can be asked (Claude Code: an interactive session)."""
    tokens: int | None = None
    turns: int | None = None


# Whether a person is at Claude Code is on every line of its transcript: the end will do.
_PERSON_TAIL = 256 * 1024


def _tail(path: str, limit: int = TRANSCRIPT_TAIL) -> list[bytes]:
    """The file's last ``limit`` bytes as whole lines ([] if unreadable)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - limit)
            fh.seek(start)
            data = fh.read(limit)
    except OSError:
        return []
    lines = data.split(b"\n")
    return lines[1:] if start else lines  # the first line of a tail may be cut


def claude_person(path: str) -> bool:
    """Whether the Claude Code session of this transcript is interactive: its latest
    ``entrypoint`` is ``cli`` (``claude -p`` writes ``sdk-cli``)."""
    for line in reversed(_tail(path, _PERSON_TAIL)):
        if b'"entrypoint"' not in line:
            continue
        item = _json(line)
        if item is not None and isinstance(item.get("entrypoint"), str):
            return bool(item["entrypoint"] == "cli")
    return False


def _json(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def claude_facts(path: str, prompt: str | None) -> Facts:
    """From a Claude Code transcript: its ``entrypoint`` (``cli``: an interactive
    session; ``sdk-cli``: ``claude -p``), and the tokens and model turns of the prompt
    ``prompt`` (each assistant message's ``usage``, counted once per message id)."""
    person = False
    current: str | None = None
    seen: set[str] = set()
    tokens = turns = 0
    for line in _tail(path):
        if b'"promptId"' not in line and b'"assistant"' not in line:
            continue  # not a prompt, not a model answer: not parsed
        item = _json(line)
        if item is None:
            continue
        entry = item.get("entrypoint")
        if isinstance(entry, str):
            person = entry == "cli"
        kind = item.get("type")
        if kind == "user" and isinstance(item.get("promptId"), str):
            current = item["promptId"]
        elif kind == "assistant" and current == prompt and prompt is not None:
            message = item.get("message")
            if not isinstance(message, dict):
                continue
            ident = message.get("id")
            if isinstance(ident, str):
                if ident in seen:
                    continue
                seen.add(ident)
            used = usage_tokens(message.get("usage"))
            turns += 1
            tokens += used or 0
    return Facts(person, tokens if turns else None, turns or None)


def codex_facts(path: str, turn: str | None) -> Facts:
    """From a Codex rollout: the tokens and model responses of turn ``turn`` (its
    ``token_count`` events). Codex offers hooks no permission prompt: nobody is asked."""
    current: str | None = None
    tokens = turns = 0
    for line in _tail(path):
        if b'"token_count"' not in line and b'_started"' not in line:
            continue  # only the turn's start and its token counts are parsed
        item = _json(line)
        payload = item.get("payload") if item is not None else None
        if item is None or item.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        event = payload.get("type")
        if event in ("task_started", "turn_started"):
            found = payload.get("turn_id")
            current = found if isinstance(found, str) else None
        elif event == "token_count" and current == turn and turn is not None:
            info = payload.get("info")
            used = usage_tokens(info.get("last_token_usage")) if isinstance(info, dict) else None
            if used is not None:
                turns += 1
                tokens += used
    return Facts(False, tokens if turns else None, turns or None)


def gemini_facts(path: str) -> Facts:
    """From a Gemini CLI session file: the tokens and model answers since the latest
    prompt (a ``user`` record that holds no ``functionResponse``), from each ``gemini`` record's
    ``tokens.total`` (a record written again as its calls complete counts once)."""
    answers: dict[str, int] = {}
    for line in _tail(path):
        if b'"type":"user"' not in line and b'"tokens"' not in line:
            continue
        item = _json(line)
        if item is None:
            continue
        if item.get("type") == "user":
            if b'"functionResponse"' not in line:
                answers.clear()  # a prompt (not the calls' results): a new run
            continue
        tokens = item.get("tokens")
        ident = item.get("id")
        if item.get("type") == "gemini" and isinstance(tokens, dict) and isinstance(ident, str):
            used = usage_tokens(tokens)
            if used is not None:
                answers[ident] = used
    if not answers:
        return Facts()
    return Facts(False, sum(answers.values()), len(answers))


def facts_for(adapter: Adapter, event: Mapping[str, Any]) -> Facts:
    """What the agent's transcript says about the stopped run (empty where it has none)."""
    path = event.get("transcript_path")
    if not isinstance(path, str) or not path:
        return Facts()
    try:
        if adapter.name == "claude-code":
            # Only whether a person is there: the tokens so far are not all written yet.
            return Facts(person=claude_person(path))
        if adapter.name == "codex":
            return codex_facts(path, adapter.run_id(event))
        if adapter.name == "gemini":
            return gemini_facts(path)
    except Exception:
        logger.debug("loopwarden hook: could not read the transcript at a stop", exc_info=True)
    return Facts()


def mode_for(configured: str | None, facts: Facts, adapter: Adapter) -> OnStop:
    """``loopwarden.onStop`` for this event: the config's, else ``ask`` where the CLI can
    ask a person (Claude Code's interactive sessions) and ``answer`` elsewhere."""
    return choose_on_stop(None, configured, person=adapter.can_ask and facts.person)


def _report(abort: LoopAbort, message: str, facts: Facts) -> StopReport:
    report = abort.report or StopReport(abort.code, abort.tool_name, abort.count, message)
    return report.with_usage(tokens=facts.tokens, turns=facts.turns)


def stop_answer(
    adapter: Adapter,
    kind: Kind,
    name: str,
    event: Mapping[str, Any],
    abort: LoopAbort,
    message: str,
    configured: str | None,
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """The answer to a stopped event: (the JSON answer, the text to keep for the end of
    the session, what to keep to sum the stop up again there: ``None`` when the person
    was asked, ``{}`` when nothing)."""
    facts = facts_for(adapter, event)
    mode = mode_for(configured, facts, adapter)
    report = _report(abort, message, facts)
    if mode == "ask" and abort.askable and kind == "pre" and abort.call_id is not None:
        return adapter.ask(name, ask_question(report)), message, None
    if mode == "raise":
        return adapter.stop(kind, name, message), message, {}
    text = f"{message}\n\n{report.summary()}"
    kept: dict[str, Any] = {}
    if adapter.name == "claude-code":
        # Claude Code writes its transcript behind the hooks: the run's tokens are read
        # again at SessionEnd, when they are all there (text mode shows only that).
        fields = ("code", "tool", "count", "message", "calls", "refused", "run_id")
        kept = {
            "report": {f: getattr(report, f) for f in fields},
            "text": message,
            "prompt": event.get("prompt_id"),
        }
    return adapter.stop(kind, name, text), text, kept


def end_text(adapter: Adapter, event: Mapping[str, Any], kept: Mapping[str, Any]) -> str | None:
    """The stop's text for ``SessionEnd``, its summary with the transcript's final token
    figures (None: the report kept is not readable)."""
    path = event.get("transcript_path")
    prompt = kept.get("prompt")
    try:
        report = StopReport(**kept["report"])
        text = str(kept["text"])
        if isinstance(path, str) and path:
            facts = claude_facts(path, prompt if isinstance(prompt, str) else None)
            report = report.with_usage(tokens=facts.tokens, turns=facts.turns)
    except Exception:
        logger.debug("loopwarden hook: could not sum up the stop at SessionEnd", exc_info=True)
        return None
    return f"{text}\n\n{report.summary()}"


def remember_ask(side: SideRecords, key: str, run: str, abort: LoopAbort) -> None:
    """Keep which call the person is asked about, for the event that brings the answer."""
    asked = {
        "run": run,
        "call": abort.call_id,
        "key": abort._key,
        "stop": Stop(abort.tool_name, abort.count, abort.code, abort.message).to_json(),
    }

    def step(old: bytes | None) -> tuple[bytes, None]:
        data = _load(old)
        data["asked"] = asked
        return orjson.dumps(data), None

    try:
        side.transact_value(key, step)
    except Exception:
        logger.exception("loopwarden hook: could not record the question for the session")


def _load(old: bytes | None) -> dict[str, Any]:
    try:
        loaded = orjson.loads(old) if old else {}
    except orjson.JSONDecodeError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _rebuilt(asked: Mapping[str, Any]) -> LoopAbort:
    """The asked stop as the guard raised it (for :meth:`RunGuard.resume`)."""
    stop = Stop.from_json(asked["stop"])
    abort = stop.error()
    abort.report = StopReport(stop.code, stop.tool, stop.count, stop.message)
    call = asked.get("call")
    key = asked.get("key")
    abort.call_id = call if isinstance(call, str) else None
    abort._key = key if isinstance(key, str) else None
    return abort


def answered(
    adapter: Adapter, kind: Kind, event: Mapping[str, Any], run: RunGuard, asked: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """Apply the person's answer to the asked stop, as this event of its run shows it:
    (a note for the model, the id of a refused call not to record). Raises the stop
    again when it stands."""
    try:
        abort = _rebuilt(asked)
    except (KeyError, TypeError, ValueError):
        logger.warning("loopwarden hook: the session's record of a question is unreadable")
        return None, None
    call = abort.call_id
    entry: BatchEntry | None = None
    if kind == "batch":
        entry = next((e for e in adapter.batch(event) if e.call.call_id == call), None)
    result = entry.outcome.get("result") if entry is not None else None
    if entry is not None and not (isinstance(result, str) and _REJECTED.match(result)):
        run.resume(abort, "allow_once")  # "Yes": the call ran
        return None, None
    note = None
    if isinstance(result, str) and _SAID in result:
        note = result.split(_SAID, 1)[1].strip() or None
    decision = run.resume(abort, "continue", note)
    return decision.message or person_note(note), call
