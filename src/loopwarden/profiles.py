"""Outcome profiles: per-tool rules for what in a result counts as progress.

Many tools return volatile data with every call (message ids, timestamps,
durations, process ids). Hashed as is, every outcome would look new and a
stuck loop would never be caught. A profile names what to ignore for one tool.

Built-in profiles cover OpenClaw's own tools (handled in ``loopwarden.hashing``)
and the shell tools of common coding agents; users add their own through the
``loopwarden.outcomeProfiles`` config block or ``OutcomeProfile`` objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["BUILTIN_PROFILES", "OutcomeProfile", "ProfileRegistry"]


@dataclass(frozen=True)
class OutcomeProfile:
    """How to hash the outcomes of one tool."""

    volatile_keys: frozenset[str] = frozenset()
    """Mapping keys dropped anywhere inside the result before hashing."""
    volatile_patterns: tuple[re.Pattern[str], ...] = ()
    """Regular expressions whose matches in any string of the result are replaced by ``#``."""
    poll: bool = False
    """Treat the tool as a status-polling tool (known-poll rules instead of generic repeat)."""
    send: bool = False
    """The tool sends messages: hash only ``details`` without per-message ids (SPEC 2.3)."""

    @classmethod
    def build(
        cls,
        *,
        volatile_keys: Iterable[str] = (),
        volatile_patterns: Iterable[str | re.Pattern[str]] = (),
        poll: bool = False,
        send: bool = False,
    ) -> OutcomeProfile:
        """Build a profile from plain lists (patterns may be strings)."""
        return cls(
            volatile_keys=frozenset(volatile_keys),
            volatile_patterns=tuple(
                p if isinstance(p, re.Pattern) else re.compile(p) for p in volatile_patterns
            ),
            poll=poll,
            send=send,
        )

    def merged(self, other: OutcomeProfile) -> OutcomeProfile:
        """This profile with ``other`` laid over it (keys and patterns are added)."""
        return OutcomeProfile(
            volatile_keys=self.volatile_keys | other.volatile_keys,
            volatile_patterns=self.volatile_patterns + other.volatile_patterns,
            poll=self.poll or other.poll,
            send=self.send or other.send,
        )

    @property
    def scrubs(self) -> bool:
        return bool(self.volatile_keys or self.volatile_patterns)


# Codex CLI wraps every shell result in a header whose chunk id and wall time
# change on each run even when the command output is identical.
_CODEX_SHELL_PATTERNS = (
    re.compile(r"Chunk ID: [0-9A-Za-z_-]+"),
    re.compile(r"Wall time: [0-9.]+ seconds"),
)

BUILTIN_PROFILES: Mapping[str, OutcomeProfile] = {
    # Claude Code's shell tool: stdout/stderr/interrupted carry the outcome; a
    # background task id is new on every launch of the same command. Codex CLI
    # hooks report their shell tool under the same name.
    "Bash": OutcomeProfile(
        volatile_keys=frozenset({"backgroundTaskId", "durationMs", "duration_ms"}),
        volatile_patterns=_CODEX_SHELL_PATTERNS,
    ),
    # Claude Code's poll of a background shell: the same status again is no progress.
    "BashOutput": OutcomeProfile(volatile_keys=frozenset({"timestamp"}), poll=True),
    # Codex CLI's shell tool as named in rollouts.
    "exec_command": OutcomeProfile(volatile_patterns=_CODEX_SHELL_PATTERNS),
    "shell": OutcomeProfile(volatile_patterns=_CODEX_SHELL_PATTERNS),
}


@dataclass(frozen=True)
class ProfileRegistry:
    """Profiles by tool name: built-ins, then user profiles laid over them."""

    profiles: Mapping[str, OutcomeProfile] = field(default_factory=dict)
    send_tools: frozenset[str] = frozenset()

    @classmethod
    def create(
        cls,
        profiles: Mapping[str, OutcomeProfile] | None = None,
        send_tools: Iterable[str] = (),
    ) -> ProfileRegistry:
        merged = dict(BUILTIN_PROFILES)
        for name, profile in (profiles or {}).items():
            base = merged.get(name)
            merged[name] = base.merged(profile) if base is not None else profile
        return cls(profiles=merged, send_tools=frozenset(send_tools))

    def get(self, tool: str) -> OutcomeProfile | None:
        return self.profiles.get(tool)


DEFAULT_REGISTRY = ProfileRegistry.create()
