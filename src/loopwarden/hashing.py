"""Call signatures and outcome hashes: what makes two calls, or two results, the same.

Nothing in this module raises, whatever the input: a value that cannot be
inspected is hashed by its type, and the caller's agent keeps running.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from ._canonical import digest, to_plain
from ._util import guard_text
from .profiles import DEFAULT_REGISTRY, OutcomeProfile, ProfileRegistry
from .profiles.coding_agents import UNKNOWN_TOOL_HINTS as _UNKNOWN_HINTS
from .profiles.coding_agents import UNKNOWN_TOOL_PATTERNS as _UNKNOWN_PATTERNS
from .profiles.openclaw import (
    DELIVERY_MARKERS as _DELIVERY_MARKERS,
)
from .profiles.openclaw import (
    POLL_ACTIONS as _POLL_ACTIONS,
)
from .profiles.openclaw import (
    SEND_ACTIONS as _SEND_ACTIONS,
)
from .profiles.openclaw import (
    SEND_TOOLS as _SEND_TOOLS,
)
from .profiles.openclaw import (
    VOLATILE_SEND_KEYS as _VOLATILE_SEND_KEYS,
)
from .profiles.volatile import VolatileMasker

__all__ = [
    "MISSING",
    "Outcome",
    "OutcomeSource",
    "ToolOutcome",
    "args_hash",
    "digest",
    "error_text",
    "extract_unknown_tool_name",
    "failed",
    "hash_outcome",
    "is_known_poll",
    "masked_hash",
    "new_source",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
"""Marks an argument that was not passed (``None`` is a real value)."""


class Outcome(NamedTuple):
    """The hash of one call's outcome; ``hash`` is None when nothing is to be recorded."""

    hash: str | None
    unknown_tool_name: str | None = None
    is_error: bool = False


_NO_OUTCOME = Outcome(None)
# One is made for every outcome: from a tuple, without the Python frame of a NamedTuple's
# __new__ (``_new_outcome((hash, unknown_tool_name, is_error))``).
_new_outcome: Callable[[tuple[Any, ...]], Outcome] = functools.partial(tuple.__new__, Outcome)


class ToolOutcome(NamedTuple):
    """A call's outcome as an integration reads it from its framework.

    Integrations pass it as ``after_call(result=ToolOutcome(...))`` instead of
    re-encoding the framework's result into OpenClaw's tool-result dict. Hashes
    equal those of the same outcome given the other ways: ``content`` alone
    hashes as ``result=content``, with ``details`` as
    ``result={"content": content, "details": details}``, and ``error`` as
    ``error=error``.
    """

    content: Any = MISSING
    """What the model reads: text, or a list of content blocks."""
    details: Mapping[str, Any] | None = None
    """Structured data that came with it (an artifact), hashed with the content."""
    error: Any = MISSING
    """The failure the model reads, when the call failed."""
    unknown_tool: str | None = None
    """The name, when the framework answered that no such tool exists (no text matching)."""


def args_hash(tool: str, params: Any) -> str:
    """The call signature: ``"<tool>:" + digest(params)``."""
    return f"{tool}:{digest(params)}"


def extract_unknown_tool_name(message: str) -> str | None:
    """The tool name in an "unknown tool" / "tool X not found" error, lower-cased."""
    text = message.strip()
    # Every wording names "tool" or "unsupported call": a substring test spares a
    # long error text (a stack trace, a command's output) the six pattern scans.
    folded = text.casefold()
    if "tool" not in folded and "unsupported call" not in folded:
        return None
    # In ASCII text a pattern matches (ignoring case) only where its words are, lower-cased.
    ascii_text = text.isascii()
    for pattern, hints in _UNKNOWN_SEARCH:
        if ascii_text and not all(any(word in folded for word in group) for group in hints):
            continue
        match = pattern.search(text)
        if match:
            # Bounded as the guard bounds the names of calls (it is kept with the outcome).
            return guard_text(match.group(1).strip().lower())
    return None


_UNKNOWN_SEARCH = tuple(zip(_UNKNOWN_PATTERNS, _UNKNOWN_HINTS, strict=True))


def is_known_poll(tool: str, params: Any, profiles: ProfileRegistry = DEFAULT_REGISTRY) -> bool:
    """``command_status``, ``process`` with action poll/log, or a tool profiled as a poll."""
    if tool == "command_status":
        return True
    if tool == "process":
        return isinstance(params, Mapping) and params.get("action") in _POLL_ACTIONS
    profile = profiles.profiles.get(tool)
    return profile is not None and profile.poll


def _error_message(error: Any) -> str:
    if isinstance(error, BaseException):
        try:
            message = str(error)
        except Exception:
            message = ""
        return message or type(error).__name__
    if isinstance(error, str):
        return error
    if isinstance(error, (int, float, bool)):
        return str(error)
    from ._canonical import canonical_bytes

    return canonical_bytes(error).decode()


def _error_outcome(message: str) -> Outcome:
    return _new_outcome(("error:" + digest(message), extract_unknown_tool_name(message), True))


def _content_parts(content: Any) -> tuple[str, list[Any]]:
    """The joined text of the text blocks, and the blocks that carry no text.

    Blocks without text (images, audio, resources) are kept aside so that two
    different screenshots are not mistaken for the same result.
    """
    if isinstance(content, str):
        return content.strip(), []
    if not isinstance(content, list):
        return "", []
    texts: list[str] = []
    others: list[Any] = []
    for block in content:
        if (
            isinstance(block, Mapping)
            and isinstance(block.get("type"), str)
            and isinstance(block.get("text"), str)
        ):
            texts.append(block["text"])
        else:
            others.append(block)
    return "\n".join(texts).strip(), others


def _scrub(value: Any, profile: OutcomeProfile) -> Any:
    """A copy of ``value`` without the profile's volatile keys and patterns."""
    if isinstance(value, str):
        for pattern in profile.volatile_patterns:
            value = pattern.sub("#", value)
        return value
    if isinstance(value, Mapping):
        keys = profile.volatile_keys
        return {k: _scrub(v, profile) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_scrub(v, profile) for v in value]
    return value


def _strip_send_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip_send_ids(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    delivered = (
        isinstance(value.get("id"), str)
        and isinstance(value.get("text"), str)
        and (
            any(isinstance(value.get(k), str) for k in _DELIVERY_MARKERS)
            or isinstance(value.get("conversation"), Mapping)
        )
    )
    return {
        k: _strip_send_ids(v)
        for k, v in value.items()
        if k not in _VOLATILE_SEND_KEYS and not (delivered and k == "id")
    }


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _exec_identity(details: Mapping[str, Any], text: str) -> Any:
    status = details.get("status")
    if status == "running":
        tail = details.get("tail")
        return {"status": status, "tail": tail if isinstance(tail, str) else ""}
    if status in ("completed", "failed"):
        exit_code = details.get("exitCode")
        aggregated = details.get("aggregated")
        output = aggregated.strip() if isinstance(aggregated, str) and aggregated.strip() else text
        return {
            "status": status,
            "exitCode": exit_code
            if isinstance(exit_code, (int, float)) and not isinstance(exit_code, bool)
            else None,
            "timedOut": details.get("timedOut") is True,
            "output": output,
        }
    if status in ("approval-pending", "approval-unavailable"):
        command = details.get("command")
        warning = details.get("warningText")
        return {
            "status": status,
            "reason": _str_or_none(details.get("reason")),
            "host": _str_or_none(details.get("host")),
            "command": command if isinstance(command, str) else "",
            "warningText": warning if isinstance(warning, str) else "",
        }
    return None


def _process_identity(action: str, details: Mapping[str, Any], text: str) -> Any:
    if action == "poll":
        return {
            "action": action,
            "status": details.get("status"),
            "exitCode": details.get("exitCode"),
            "exitSignal": details.get("exitSignal"),
            "aggregated": details.get("aggregated"),
            "text": text,
        }
    return {
        "action": action,
        "status": details.get("status"),
        "totalLines": details.get("totalLines"),
        "totalChars": details.get("totalChars"),
        "truncated": details.get("truncated"),
        "exitCode": details.get("exitCode"),
        "exitSignal": details.get("exitSignal"),
        "text": text,
    }


_ABSENT: Any = object()
_SIMPLE_RESULTS = frozenset({str, int, float, bool, list, type(None)})


def hash_outcome(
    tool: str,
    params: Any,
    *,
    result: Any = MISSING,
    error: Any = MISSING,
    profiles: ProfileRegistry = DEFAULT_REGISTRY,
) -> Outcome:
    """Hash one call's outcome: an error by its message, a tool result by its profiled
    content and details, anything else whole; no outcome for no result or our own
    block answer (docs/detection.md). Never raises."""
    try:
        return _hash_outcome(tool, params, result, error, profiles)
    except Exception:
        # A result we cannot take apart still gets a stable identity.
        return Outcome(digest(result if error is MISSING or error is None else error))


def _typed(tool: str, params: Any, outcome: ToolOutcome, profiles: ProfileRegistry) -> Outcome:
    error = outcome.error
    if error is not MISSING and error is not None:
        message = _error_message(error)
        name = outcome.unknown_tool
        if name is None:
            return _error_outcome(message)
        return Outcome("error:" + digest(message), name.strip().lower(), True)
    if outcome.details is None:
        return _hash_outcome(tool, params, outcome.content, MISSING, profiles)
    profile = profiles.profiles.get(tool)
    content = _ABSENT if outcome.content is MISSING else outcome.content
    return _shaped(tool, params, content, outcome.details, False, profile, profiles)


def _hash_outcome(
    tool: str, params: Any, result: Any, error: Any, profiles: ProfileRegistry
) -> Outcome:
    if error is not MISSING and error is not None:
        return _error_outcome(_error_message(error))
    if result is MISSING:
        return _NO_OUTCOME
    if type(result) is ToolOutcome:
        return _typed(tool, params, result, profiles)
    profile = profiles.profiles.get(tool)
    scrub = profile is not None and profile.scrubs
    t = type(result)
    if t is not dict:
        if t in _SIMPLE_RESULTS:  # text, numbers, lists: never a mapping (no ABC check)
            plain = _scrub(result, profile) if scrub else result  # type: ignore[arg-type]
            return _new_outcome((digest(plain), None, False))
        result = to_plain(result)  # framework result objects by their data
        if not isinstance(result, Mapping):
            return Outcome(digest(_scrub(result, profile) if scrub else result))  # type: ignore[arg-type]

    get = result.get
    content = get("content", _ABSENT)
    raw_details = get("details", _ABSENT)
    if raw_details is _ABSENT:
        raw_details = get("structuredContent", _ABSENT)
        if raw_details is _ABSENT:
            raw_details = get("structured_content", _ABSENT)
    if content is _ABSENT and raw_details is _ABSENT:
        plain = _scrub(result, profile) if scrub else result  # type: ignore[arg-type]
        return _new_outcome((digest(plain), None, False))
    is_error = get("isError") is True or get("is_error") is True
    return _shaped(tool, params, content, raw_details, is_error, profile, profiles)


def _shaped(
    tool: str,
    params: Any,
    content: Any,
    raw_details: Any,
    is_error: bool,
    profile: OutcomeProfile | None,
    profiles: ProfileRegistry,
) -> Outcome:
    """The outcome of a result in tool-result shape: content the model reads plus details."""
    scrub = profile is not None and profile.scrubs
    details: Mapping[str, Any] = (
        raw_details
        if isinstance(raw_details, dict)
        else (raw_details if isinstance(raw_details, Mapping) else {})
    )
    if details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop":
        return _NO_OUTCOME  # our own block answer: the guard records the veto itself

    others: list[Any] = []
    if content is _ABSENT:
        text = ""
    elif type(content) is list and len(content) == 1 and type(content[0]) is dict:
        block = content[0]
        text_value = block.get("text")
        if type(text_value) is str and isinstance(block.get("type"), str):
            text = text_value.strip()
        else:
            text, others = "", [block]
    else:
        text, others = _content_parts(content)
    if is_error:
        return _error_outcome(text or "error")
    if tool == "exec":
        identity = _exec_identity(details, text)
        if identity is not None:
            return Outcome(digest(identity))
    elif tool == "process" and isinstance(params, Mapping):
        action = params.get("action")
        if action in _POLL_ACTIONS:
            return Outcome(digest(_process_identity(action, details, text)))
    if (
        tool in _SEND_TOOLS
        or tool in profiles.send_tools
        or (
            tool == "message"
            and isinstance(params, Mapping)
            and params.get("action") in _SEND_ACTIONS
        )
        or (profile is not None and profile.send)
    ):
        stripped = _strip_send_ids(details)
        return Outcome(digest(_scrub(stripped, profile) if scrub else stripped))  # type: ignore[arg-type]
    generic: dict[str, Any] = {"details": details, "text": text}
    if others:
        generic["blocks"] = others
    plain = _scrub(generic, profile) if scrub else generic  # type: ignore[arg-type]
    return _new_outcome((digest(plain), None, False))


_EXIT_KEYS = ("exitCode", "exit_code", "returncode")
_WAIT_KEYS = ("command", "cmd", "script", "code", "commands")
_WAIT_KEY_SET = frozenset(_WAIT_KEYS)


class Source(Protocol):
    """What :func:`masked_hash` and :func:`error_text` read of an outcome (an
    :class:`OutcomeSource`, or the runtime guard's record of a finished call)."""

    @property
    def tool(self) -> str: ...
    @property
    def params(self) -> Any: ...
    @property
    def result(self) -> Any: ...
    @property
    def error(self) -> Any: ...
    @property
    def profiles(self) -> ProfileRegistry: ...
    @property
    def masker(self) -> VolatileMasker | None: ...


class OutcomeSource(NamedTuple):
    """What the runtime guard may need about one outcome beyond its hash, read by
    :func:`masked_hash`, :func:`failed` and :func:`error_text` only when needed. Kept for
    one ``after_call``; never stored."""

    tool: str
    params: Any
    result: Any
    error: Any
    profiles: ProfileRegistry
    masker: VolatileMasker | None
    """The tool's volatile-counter masker (``None``: its outcomes are not masked)."""


new_source: Callable[[tuple[Any, ...]], OutcomeSource] = functools.partial(
    tuple.__new__, OutcomeSource
)
"""An :class:`OutcomeSource` from a tuple of its fields, without a Python frame (one is
made for every outcome)."""


def masked_hash(src: Source) -> str | None:
    """The outcome hash with volatile counters masked (the raw hash without a masker)."""
    tool, params, result, error = src.tool, src.params, src.result, src.error
    profiles, masker = src.profiles, src.masker
    try:
        if error is not MISSING and error is not None:
            error = masker.mask(_error_message(error)) if masker is not None else error
        elif masker is not None and type(result) is ToolOutcome:
            # Masked inside, so that it hashes in the same shape as unmasked.
            if result.error is not MISSING and result.error is not None:
                result = result._replace(error=masker.mask(_error_message(result.error)))
            elif result.content is not MISSING:
                result = result._replace(content=masker.mask_value(result.content))
        elif masker is not None and result is not MISSING:
            if type(result) not in _SIMPLE_RESULTS and type(result) is not dict:
                result = to_plain(result)
            result = masker.mask_value(result)
    except Exception:
        pass  # hashed as it is
    return hash_outcome(tool, params, result=result, error=error, profiles=profiles).hash


def failed(result: Any, is_error: bool) -> bool:
    """An error, or a result whose shape says the command exited non-zero (an exit code at
    the top of a result mapping or in its ``details``)."""
    if is_error:
        return True
    if type(result) is not dict:
        return False
    # The key tests inline (every outcome passes here; nearly none has an exit code).
    details = result.get("details")
    if (
        type(details) is dict
        and ("exitCode" in details or "exit_code" in details or "returncode" in details)
        and _nonzero_exit(details)
    ):
        return True
    return (
        "exitCode" in result or "exit_code" in result or "returncode" in result
    ) and _nonzero_exit(result)


def _nonzero_exit(where: dict[str, Any]) -> bool:
    for key in _EXIT_KEYS:
        code = where.get(key)
        if type(code) is int and code != 0:
            return True
    return False


def error_text(src: Source) -> str:
    """The failure's text: the error's message, or the result's text (bounded)."""
    result, error = src.result, src.error
    if type(result) is ToolOutcome:
        result, error = result.content, result.error
    try:
        if error is not MISSING and error is not None:
            return _error_message(error)[:4096]
        if isinstance(result, str):
            return result[:4096]
        if isinstance(result, Mapping):
            text, _ = _content_parts(result.get("content"))
            if text:
                return text[:4096]
            for key in ("stderr", "stdout", "output", "error"):
                value = result.get(key)
                if isinstance(value, str) and value.strip():
                    return value[:4096]
    except Exception:
        pass
    return ""


# sleep 30, watch -n 5 ..., gh run watch, kubectl wait, helm --wait, `wait` for jobs.
_WAIT_WORD = re.compile(r"(?<![\w.-])(?:--?)?(?:sleep|watch|wait)(?![\w-])")


def is_wait_command(params: Any) -> bool:
    """True when a call's command text sleeps, watches or waits (it is waiting on purpose)."""
    if type(params) is dict:
        if _WAIT_KEY_SET.isdisjoint(params):
            return False  # no command to read (a C-level test of the keys)
    elif not isinstance(params, Mapping):
        return False
    for key in _WAIT_KEYS:
        value = params.get(key)
        if isinstance(value, list):
            value = " ".join(v for v in value if isinstance(v, str))
        if not isinstance(value, str):
            continue
        value = value[:4096]
        # The substring tests are C-fast and nearly always false; the pattern checks words.
        if ("sleep" in value or "wait" in value or "watch" in value) and _WAIT_WORD.search(value):
            return True
    return False
