"""What coding agents and agent frameworks say and return: shell profiles, unknown-tool errors.

Kept apart from :mod:`loopwarden.hashing` so that the hashing rules stay
product-neutral and a new agent's wording is a line here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import OutcomeProfile

__all__ = ["UNKNOWN_TOOL_HINTS", "UNKNOWN_TOOL_PATTERNS", "shell_profiles"]

_NAME = r"[\"']?([a-z0-9_.-]+)[\"']?"
# The two generic forms first ("unknown tool: X", "tool X not found / is not
# available"), then the wordings of frameworks and coding agents
# that the two forms miss or misread ("Unknown tool name: 'x'" would yield "name").
UNKNOWN_TOOL_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"unknown tool name[:\s]+" + _NAME,  # Pydantic AI
        r"unknown tool[:\s]+" + _NAME,
        r"tool\s+" + _NAME + r"\s+(?:not found|is not available|does not exist)",
        r"no such tool available[:\s]+" + _NAME,  # Claude Code
        r"unsupported call[:\s]+" + _NAME,  # Codex CLI
        r"tried to call unavailable tool[:\s]+" + _NAME,  # AI SDK: OpenCode, Cline
        r"^(?:error:\s*)?" + _NAME + r" is not a valid tool",  # LangChain
    )
)
"""Errors that name a missing tool (group 1 is its name). Each one must contain
"tool" or "unsupported call" literally: ``extract_unknown_tool_name`` checks for
those first."""
UNKNOWN_TOOL_HINTS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("unknown tool name",),),
    (("unknown tool",),),
    (("tool",), ("not found", "is not available", "does not exist")),
    (("no such tool available",),),
    (("unsupported call",),),
    (("tried to call unavailable tool",),),
    ((" is not a valid tool",),),
)
"""The words each pattern of ``UNKNOWN_TOOL_PATTERNS`` matches literally, lower-cased:
a text must hold one word of every group for the pattern to match it. For ASCII text
(where ignoring case is lower-casing) ``extract_unknown_tool_name`` runs only the
patterns whose words are there; a long error then costs one scan, not seven."""

# Codex CLI wraps every shell result in a header whose chunk id and wall time
# change on each run even when the command output is identical.
_CODEX_SHELL_PATTERNS = (
    re.compile(r"Chunk ID: [0-9A-Za-z_-]+"),
    re.compile(r"Wall time: [0-9.]+ seconds"),
)


def shell_profiles(profile: type[OutcomeProfile]) -> Mapping[str, OutcomeProfile]:
    """The built-in profiles of coding agents' shell tools."""
    return {
        # Claude Code's shell tool: stdout/stderr/interrupted carry the outcome; a
        # background task id is new on every launch of the same command. Codex CLI
        # hooks report their shell tool under the same name.
        "Bash": profile(
            volatile_keys=frozenset({"backgroundTaskId", "durationMs", "duration_ms"}),
            volatile_patterns=_CODEX_SHELL_PATTERNS,
        ),
        # Claude Code's poll of a background shell: the same status again is no progress.
        "BashOutput": profile(volatile_keys=frozenset({"timestamp"}), poll=True),
        # Codex CLI's shell tool as named in rollouts.
        "exec_command": profile(volatile_patterns=_CODEX_SHELL_PATTERNS),
        "shell": profile(volatile_patterns=_CODEX_SHELL_PATTERNS),
    }
