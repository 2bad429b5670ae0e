"""Misspelt names of the loop-detection block and of its parents.

loopwarden reads an OpenClaw config at three places: ``tools.loopDetection``,
an agent's own ``tools.loopDetection`` (``agents.list[]`` or
``agents.entries.<id>``) and its top-level ``loopwarden`` block. A misspelt
name on the way to one of them (``Tools``, ``loopDetecton``, ``agents.lists``,
a top-level ``loopDetection``) would leave the block unread and detection
silently off, so such a key is an error that names its path and the fix.

OpenClaw's own keys at each level (the other sections of an ``openclaw.json``,
the other ``tools`` settings, the fields of an agent entry) are never taken for
a misspelling, and an unrelated key stays allowed: only a key close to one of
our names is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigIssue
from .model import BLOCK_KEYS, PathKey, format_path

__all__ = ["check_names", "is_near_miss"]

# The sections of an openclaw.json (OpenClaw's config schema), and older ones
# (`agent` before `agents.defaults`, the channels before `channels`) that
# configs still carry.
OPENCLAW_TOP_LEVEL = frozenset(
    {
        "$schema",
        "acp",
        "agent",
        "agents",
        "approvals",
        "audio",
        "auth",
        "bindings",
        "broadcast",
        "browser",
        "canvasHost",
        "channels",
        "cli",
        "commands",
        "cron",
        "crestodian",
        "diagnostics",
        "discord",
        "discovery",
        "env",
        "gateway",
        "hooks",
        "identity",
        "imessage",
        "logging",
        "mcp",
        "media",
        "memory",
        "messages",
        "meta",
        "models",
        "nodeHost",
        "plugins",
        "proxy",
        "routing",
        "secrets",
        "session",
        "signal",
        "skills",
        "slack",
        "surfaces",
        "talk",
        "telegram",
        "tools",
        "ui",
        "update",
        "web",
        "whatsapp",
        "wizard",
    }
)
# OpenClaw's settings next to loopDetection, in `tools` and in an agent's `tools`.
OPENCLAW_TOOLS = frozenset(
    {
        "agentToAgent",
        "allow",
        "alsoAllow",
        "byProvider",
        "codeMode",
        "deny",
        "elevated",
        "exec",
        "fs",
        "links",
        "loopDetection",
        "media",
        "message",
        "profile",
        "sandbox",
        "sessions",
        "sessions_spawn",
        "subagents",
        "swarm",
        "toolSearch",
        "updatePlan",
        "web",
    }
)
OPENCLAW_AGENTS = frozenset({"defaults", "entries", "list"})
# The fields of an agent entry (agents.list[] / agents.entries.<id>).
OPENCLAW_AGENT_ENTRY = frozenset(
    {
        "agentDir",
        "bootstrapMaxChars",
        "bootstrapTotalMaxChars",
        "contextInjection",
        "contextLimits",
        "contextTokens",
        "default",
        "description",
        "embeddedAgent",
        "experimental",
        "fastModeDefault",
        "groupChat",
        "heartbeat",
        "humanDelay",
        "id",
        "identity",
        "memory",
        "memorySearch",
        "model",
        "modelPolicy",
        "models",
        "name",
        "params",
        "reasoningDefault",
        "runtime",
        "sandbox",
        "skills",
        "skillsLimits",
        "subagents",
        "thinkingDefault",
        "toolProgressDetail",
        "tools",
        "tts",
        "typingMode",
        "utilityModel",
        "verboseDefault",
        "workspace",
    }
)

_BLOCK = "loopDetection"
_READ_HERE = (
    "loop detection is read only from tools.loopDetection and from an agent's "
    "tools.loopDetection (agents.list[].tools.loopDetection or "
    "agents.entries.<id>.tools.loopDetection)"
)
_SCAN_DEPTH = 8
"""How deep a stray loopDetection block is looked for below an unread key."""
_LONGEST_NAME = 64
"""Keys longer than this are never a near miss (and cost no distance computation)."""


def _forms(key: str) -> set[str]:
    """``key`` without case, spaces, ``_``, ``-`` or ``.``, and without a plural ending."""
    word = re.sub(r"[\s_.-]+", "", key).lower()
    forms = {word}
    if word.endswith("ies") and len(word) > 4:
        forms.add(word[:-3] + "y")
    elif word.endswith("s") and len(word) > 3:
        forms.add(word[:-1])
    return forms


def _distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) that turn ``a`` into ``b``."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i, *([0] * len(b))]
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def is_near_miss(key: object, name: str) -> bool:
    """``key`` is not ``name`` but close enough to be a misspelling of it.

    Close: equal but for case, separators or a plural; one edit away (names of
    up to six letters) or two (longer names); or, for names of eight letters or
    more, one containing the other (``toolLoopDetection``, ``loopDetect``).
    """
    if not isinstance(key, str) or key == name or not 0 < len(key) <= _LONGEST_NAME:
        return False
    ours, theirs = _forms(name), _forms(key)
    if ours & theirs:
        return True
    limit = 1 if len(name) <= 6 else 2
    for a in theirs:
        for b in ours:
            if len(b) >= 8 and len(a) >= 8 and (a in b or b in a):
                return True
            if abs(len(a) - len(b)) <= limit and _distance(a, b) <= limit:
                return True
    return False


def _did_you_mean(key: str, fix: str) -> str:
    return f"unknown key; did you mean {key!r}? As written it is not read: rename it to {fix}"


def check_names(raw: Mapping[Any, Any], issues: list[ConfigIssue]) -> None:
    """Add an issue for each misspelt block or parent name in a whole config."""
    reported: list[PathKey] = []

    def report(path: PathKey, message: str) -> None:
        issues.append(ConfigIssue(format_path(path), message))
        reported.append(path)

    for key in raw:
        if not isinstance(key, str) or key in ("tools", "agents", "loopwarden"):
            continue
        if key in BLOCK_KEYS:
            report(
                (key,),
                "loop-detection fields belong under tools.loopDetection "
                f"(use {{'tools': {{'loopDetection': {{{key!r}: ...}}}}}}, "
                "or LoopDetectionConfig.from_dict() for a bare block)",
            )
        elif key == _BLOCK or is_near_miss(key, _BLOCK):
            report((key,), f"{_READ_HERE}: did you mean tools.loopDetection?")
        elif key not in OPENCLAW_TOP_LEVEL:
            for name in ("tools", "agents", "loopwarden"):
                if is_near_miss(key, name):
                    report((key,), _did_you_mean(name, name))
                    break
    tools = raw.get("tools")
    if isinstance(tools, Mapping):
        _check_tools(tools, ("tools",), report)
    agents = raw.get("agents")
    if isinstance(agents, Mapping):
        for key in agents:
            if key in OPENCLAW_AGENTS:
                continue
            for name in ("list", "entries"):
                if is_near_miss(key, name):
                    report(("agents", key), _did_you_mean(name, f"agents.{name}"))
                    break
        entries: list[tuple[PathKey, Any]] = []
        if isinstance(agents.get("list"), list):
            entries += [(("agents", "list", i), e) for i, e in enumerate(agents["list"])]
        if isinstance(agents.get("entries"), Mapping):
            entries += [(("agents", "entries", str(k)), e) for k, e in agents["entries"].items()]
        for path, entry in entries:
            if isinstance(entry, Mapping):
                _check_entry(entry, path, report)
    _scan_unread(raw, reported, report)


Report = Callable[[PathKey, str], None]


def _check_tools(tools: Mapping[Any, Any], path: PathKey, report: Report) -> None:
    where = format_path((*path, _BLOCK))
    for key in tools:
        if not isinstance(key, str) or key in OPENCLAW_TOOLS:
            continue
        if key in BLOCK_KEYS:
            report((*path, key), f"a loop-detection field: it belongs in {where}")
        elif is_near_miss(key, _BLOCK):
            report((*path, key), _did_you_mean(_BLOCK, where))


def _check_entry(entry: Mapping[Any, Any], path: PathKey, report: Report) -> None:
    for key in entry:
        if not isinstance(key, str) or key in OPENCLAW_AGENT_ENTRY:
            continue
        if key in BLOCK_KEYS or key == _BLOCK or is_near_miss(key, _BLOCK):
            where = format_path((*path, "tools", _BLOCK))
            report((*path, key), f"{_READ_HERE}: for this agent, use {where}")
        elif is_near_miss(key, "tools"):
            report((*path, key), _did_you_mean("tools", format_path((*path, "tools"))))
    tools = entry.get("tools")
    if isinstance(tools, Mapping):
        _check_tools(tools, (*path, "tools"), report)


def _read_block(path: PathKey) -> bool:
    """``path`` is a block loopwarden reads, or the ``loopwarden`` block (checked on its own)."""
    if path in (("tools", _BLOCK), ("loopwarden",)):
        return True
    return (
        len(path) == 5
        and path[0] == "agents"
        and path[1] in ("list", "entries")
        and path[3:] == ("tools", _BLOCK)
    )


def _scan_unread(raw: Mapping[Any, Any], reported: list[PathKey], report: Report) -> None:
    """A loopDetection block (or a near miss of its name) anywhere loopwarden does not read.

    Looked for below ``tools``, ``agents``, the older ``agent`` and every key that is
    not an OpenClaw section; OpenClaw's other sections (channels, plugins, ...) hold
    free-form data of their own and are left alone.
    """

    # Key -> it names the block or nearly so; a large file repeats its keys thousands of times.
    near: dict[str, bool] = {}

    def skip(path: PathKey) -> bool:
        return _read_block(path) or any(path[: len(done)] == done for done in reported)

    def block_name(key: str) -> bool:
        found = near.get(key)
        if found is None:
            found = near[key] = key == _BLOCK or is_near_miss(key, _BLOCK)
        return found

    def walk(value: Any, path: PathKey) -> None:
        if len(path) > _SCAN_DEPTH or skip(path):
            return
        if isinstance(value, Mapping):
            for key, item in value.items():
                sub = (*path, key if isinstance(key, str) else repr(key))
                if isinstance(key, str) and block_name(key):
                    if not skip(sub):
                        report(sub, f"{_READ_HERE}, not here: did you mean tools.loopDetection?")
                    continue
                walk(item, sub)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))

    for key, value in raw.items():
        if key in ("tools", "agents", "agent") or (
            isinstance(key, str) and key not in OPENCLAW_TOP_LEVEL and key != "loopwarden"
        ):
            walk(value, (key,))
