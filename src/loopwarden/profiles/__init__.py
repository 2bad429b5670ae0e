"""Outcome profiles: per-tool rules for what in a result counts as progress.

Many tools return volatile data with every call (message ids, timestamps,
durations, process ids). Hashed as is, every outcome would look new and a
stuck loop would never be caught. A profile names what to ignore for one tool.

Built-in profiles cover OpenClaw's own tools (:mod:`.openclaw`, read by
``loopwarden.hashing``) and the shell tools of common coding agents
(:mod:`.coding_agents`); users add their own through the
``loopwarden.outcomeProfiles`` config block or ``OutcomeProfile`` objects.

One profile applies to every tool: volatile counters (:mod:`.volatile`). The
runtime guard masks shell line counters, file-viewer counts, timestamps,
durations, pids, addresses, temp paths and UUIDs in an outcome before comparing
it with the call's earlier outcomes (on by default in ``LoopGuard``,
``loopwarden.volatileCounters``; per tool ``volatileCounters: false``).
``hash_outcome`` with the default registry decides outcomes in the documented
order (docs/detection.md, "Comparing calls and results").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .coding_agents import shell_profiles
from .volatile import DEFAULT_MASKER, VolatileMasker

__all__ = ["BUILTIN_PROFILES", "OutcomeProfile", "ProfileRegistry", "VolatileMasker"]


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
    """The tool sends messages: hash only ``details``, without per-message ids and times."""
    volatile_counters: bool | None = None
    """Mask volatile counters in this tool's outcomes; ``None`` follows the registry."""

    @classmethod
    def build(
        cls,
        *,
        volatile_keys: Iterable[str] = (),
        volatile_patterns: Iterable[str | re.Pattern[str]] = (),
        poll: bool = False,
        send: bool = False,
        volatile_counters: bool | None = None,
    ) -> OutcomeProfile:
        """Build a profile from plain lists (patterns may be strings)."""
        return cls(
            volatile_keys=frozenset(volatile_keys),
            volatile_patterns=tuple(
                p if isinstance(p, re.Pattern) else re.compile(p) for p in volatile_patterns
            ),
            poll=poll,
            send=send,
            volatile_counters=volatile_counters,
        )

    def merged(self, other: OutcomeProfile) -> OutcomeProfile:
        """This profile with ``other`` laid over it (keys and patterns are added)."""
        return OutcomeProfile(
            volatile_keys=self.volatile_keys | other.volatile_keys,
            volatile_patterns=self.volatile_patterns + other.volatile_patterns,
            poll=self.poll or other.poll,
            send=self.send or other.send,
            volatile_counters=(
                other.volatile_counters
                if other.volatile_counters is not None
                else self.volatile_counters
            ),
        )

    @property
    def scrubs(self) -> bool:
        return bool(self.volatile_keys or self.volatile_patterns)


BUILTIN_PROFILES: Mapping[str, OutcomeProfile] = shell_profiles(OutcomeProfile)


@dataclass(frozen=True)
class ProfileRegistry:
    """Profiles by tool name: built-ins, then user profiles laid over them."""

    profiles: Mapping[str, OutcomeProfile] = field(default_factory=dict)
    send_tools: frozenset[str] = frozenset()
    masker: VolatileMasker | None = None
    """The volatile-counter profile for every tool (``None``: outcomes hashed as they are)."""

    @classmethod
    def create(
        cls,
        profiles: Mapping[str, OutcomeProfile] | None = None,
        send_tools: Iterable[str] = (),
        *,
        volatile: bool | VolatileMasker = False,
    ) -> ProfileRegistry:
        """Built-ins with ``profiles`` laid over them. ``volatile``: mask volatile counters
        (``True``: the built-in token classes; or a :class:`VolatileMasker` of your own,
        e.g. ``VolatileMasker().without("clock_time").with_patterns([r"build #\\d+"])``)."""
        merged = dict(BUILTIN_PROFILES)
        for name, profile in (profiles or {}).items():
            base = merged.get(name)
            merged[name] = base.merged(profile) if base is not None else profile
        masker = DEFAULT_MASKER if volatile is True else (volatile or None)
        return cls(profiles=merged, send_tools=frozenset(send_tools), masker=masker)

    def get(self, tool: str) -> OutcomeProfile | None:
        return self.profiles.get(tool)

    def masker_for(self, tool: str) -> VolatileMasker | None:
        """The masker for ``tool``'s outcomes, or ``None`` when they are not masked."""
        profile = self.profiles.get(tool)
        if profile is not None and profile.volatile_counters is not None:
            if not profile.volatile_counters:
                return None
            return self.masker or DEFAULT_MASKER
        return self.masker


DEFAULT_REGISTRY = ProfileRegistry.create()
