"""Loading a whole config (OpenClaw layout): :class:`Config` and :func:`load_config`.

Only ``tools``, ``agents`` and our own top-level ``loopwarden`` key are read;
every other key of an ``openclaw.json`` is left alone, unless it is a
misspelling of one of ours (:mod:`.names`). Problems are collected
over the whole file and raised together, each with its path and, for files,
its line.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Union

from .._logging import logger
from ..errors import ConfigError, ConfigIssue
from .merge import Layer, build, merge, nest
from .model import (
    BLOCK_FIELDS,
    FieldView,
    LoopDetectionConfig,
    PathKey,
    Settings,
    format_path,
    normalize_agent_id,
)
from .names import check_names
from .validate import mapping, validate_block, validate_settings

__all__ = ["Config", "ConfigSource", "load_config", "log_repairs", "resolve_config"]

_BLOCK_PATH: PathKey = ("tools", "loopDetection")


@dataclass(frozen=True)
class _AgentBlock:
    block: dict[str, Any]
    key: PathKey
    """Where the block is in the file (``agents.list[2].tools.loopDetection``)."""

    @property
    def path(self) -> str:
        return format_path(self.key)


def log_repairs(repairs: Iterable[str], logged: set[str] | None = None) -> None:
    """Log threshold repairs at WARNING, skipping those in ``logged`` (and adding to it)."""
    for message in repairs:
        if logged is not None:
            if message in logged:
                continue
            logged.add(message)
        logger.warning("loopwarden config repaired: %s", message)


class Config:
    """A whole config (OpenClaw layout): global block, per-agent blocks, loopwarden settings.

    Build it with :func:`load_config`. ``for_agent()`` returns the effective
    :class:`LoopDetectionConfig` of one agent; results are cached, and each
    distinct threshold repair is logged once per config.
    """

    def __init__(
        self,
        global_block: Mapping[str, Any],
        agents: Mapping[str, _AgentBlock],
        settings: Settings,
        *,
        source: str | None = None,
        raw: Mapping[str, Any] | None = None,
        text: str | None = None,
        overrides: tuple[tuple[Mapping[str, Any], bool], ...] = (),
        listed: tuple[str, ...] = (),
    ) -> None:
        self._global = dict(global_block)
        self._agents = dict(agents)
        self._listed = listed
        self.settings = settings
        self.source = source
        self.raw: Mapping[str, Any] = raw if raw is not None else {}
        self._text = text
        self._lines: dict[PathKey, int] | None = None
        # (block, all_agents) laid over the file's blocks, oldest first.
        self._overrides = overrides
        self._cache: dict[str, LoopDetectionConfig] = {}
        self._logged: set[str] = set()

    @property
    def global_block(self) -> Mapping[str, Any]:
        """The validated global ``tools.loopDetection`` keys that are set (with overrides)."""
        return merge(("global", self._global), *(("override", o) for o, _ in self._overrides))[0]

    def agent_ids(self) -> list[str]:
        """Normalised ids of the agents that have their own ``loopDetection`` block."""
        return sorted(self._agents)

    def listed_agents(self) -> list[str]:
        """Normalised ids of every agent the config names (``agents.list[].id``,
        ``agents.entries.<id>``), with or without a block of its own, in file order."""
        return list(self._listed)

    def _entry(self, agent_id: str | None) -> _AgentBlock | None:
        return self._agents.get(normalize_agent_id(agent_id)) if agent_id is not None else None

    def agent_block(self, agent_id: str | None) -> Mapping[str, Any] | None:
        entry = self._entry(agent_id)
        return entry.block if entry is not None else None

    def agent_block_path(self, agent_id: str | None) -> str | None:
        entry = self._entry(agent_id)
        return entry.path if entry is not None else None

    def for_agent(self, agent_id: str | None = None) -> LoopDetectionConfig:
        """The effective loop-detection config of ``agent_id`` (or the global one)."""
        key = normalize_agent_id(agent_id) if agent_id is not None else ""
        if key not in self._agents:
            # No block of its own: the global config. Cached once, so any number of
            # agent ids costs no memory (the cache holds the listed agents alone).
            key, agent_id = "", None
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = build(*merge(*self._layers(agent_id)))
            log_repairs(cached.repairs, self._logged)
        return cached

    def _layers(self, agent_id: str | None) -> list[Layer]:
        """The global block, overrides for it, the agent's block, overrides for every agent."""
        layers: list[Layer] = [("global", self._global)]
        layers += [("override", block) for block, everywhere in self._overrides if not everywhere]
        agent = self.agent_block(agent_id)
        if agent is not None:
            layers.append(("agent", agent))
        layers += [("override", block) for block, everywhere in self._overrides if everywhere]
        return layers

    def with_overrides(self, overrides: Mapping[str, Any], *, all_agents: bool = False) -> Config:
        """A copy whose global block has ``overrides`` (camelCase, dotted) laid over it.

        With ``all_agents`` the overrides are laid over every agent's block too,
        so they win everywhere (what a command-line ``--set`` means).
        """
        issues: list[ConfigIssue] = []
        clean = validate_block(nest(overrides), _BLOCK_PATH, issues)
        if issues:
            raise ConfigError(issues)
        return Config(
            self._global,
            self._agents,
            self.settings,
            source=self.source,
            raw=self.raw,
            text=self._text,
            overrides=(*self._overrides, (clean, all_agents)),
            listed=self._listed,
        )

    def explain(self, agent_id: str | None = None) -> list[FieldView]:
        """Every field of an agent's effective block: value, source, and the file line."""
        cfg = self.for_agent(agent_id)
        values = cfg.to_dict()
        entry = self._entry(agent_id)
        lines = self._key_lines()
        views = []
        for key in BLOCK_FIELDS:
            parts = key.split(".")
            value: Any = values
            for part in parts:
                value = value[part]
            source = cfg.source_of(key)
            line = detail = None
            if source == "global":
                line = lines.get((*_BLOCK_PATH, *parts))
            elif source == "agent" and entry is not None:
                line = lines.get((*entry.key, *parts))
            elif source == "repair":
                detail = next((r for r in cfg.repairs if r.startswith(f"{key} ")), None)
            views.append(FieldView(key, value, source, line, detail))
        return views

    def line_of(self, path: PathKey) -> int | None:
        """The line of the config file that sets ``path`` (``None``: not from a file)."""
        return self._key_lines().get(path)

    def _key_lines(self) -> dict[PathKey, int]:
        if self._lines is None:
            self._lines = {}
            if self._text is not None:
                from .._json5loc import locate_lines

                try:
                    self._lines = locate_lines(self._text)
                except Exception:  # line numbers are a nicety; never fail over them
                    logger.debug("loopwarden could not locate config lines", exc_info=True)
        return self._lines


def _parse(raw: Any, issues: list[ConfigIssue]) -> Config:
    if raw is None:
        return Config({}, {}, Settings())
    if not isinstance(raw, Mapping):
        issues.append(ConfigIssue("", f"expected a config object, got {type(raw).__name__}"))
        return Config({}, {}, Settings())
    check_names(raw, issues)
    tools = mapping(raw.get("tools"), ("tools",), issues) or {}
    global_block = validate_block(tools.get("loopDetection"), _BLOCK_PATH, issues)
    agents_raw = mapping(raw.get("agents"), ("agents",), issues) or {}
    agents: dict[str, _AgentBlock] = {}
    listed: list[str] = []

    def add(agent_id: Any, entry: Mapping[str, Any], path: PathKey) -> None:
        if isinstance(agent_id, str) and agent_id.strip():
            listed.append(normalize_agent_id(agent_id))
        entry_tools = mapping(entry.get("tools"), (*path, "tools"), issues) or {}
        if entry_tools.get("loopDetection") is None:
            return
        block_path = (*path, *_BLOCK_PATH)
        block = validate_block(entry_tools["loopDetection"], block_path, issues)
        if not isinstance(agent_id, str) or not agent_id.strip():
            issues.append(
                ConfigIssue(
                    format_path((*path, "id")), "an agent with a loopDetection block needs an id"
                )
            )
            return
        norm = normalize_agent_id(agent_id)
        if norm in agents:
            issues.append(
                ConfigIssue(
                    format_path(block_path),
                    f"agent {norm!r} already has a loopDetection block at {agents[norm].path}",
                )
            )
            return
        agents[norm] = _AgentBlock(block, block_path)

    agent_list = agents_raw.get("list")
    if agent_list is not None:
        if not isinstance(agent_list, list):
            issues.append(ConfigIssue("agents.list", "expected a list of agent objects"))
        else:
            for index, entry in enumerate(agent_list):
                entry_map = mapping(entry, ("agents", "list", index), issues)
                if entry_map is not None:
                    add(entry_map.get("id"), entry_map, ("agents", "list", index))
    entries = mapping(agents_raw.get("entries"), ("agents", "entries"), issues) or {}
    for agent_id, entry in entries.items():
        entry_map = mapping(entry, ("agents", "entries", str(agent_id)), issues)
        if entry_map is not None:
            add(agent_id, entry_map, ("agents", "entries", str(agent_id)))
    settings = validate_settings(raw.get("loopwarden"), issues)
    return Config(global_block, agents, settings, raw=raw, listed=tuple(dict.fromkeys(listed)))


def _parse_path_key(path: str) -> PathKey:
    parts: list[str | int] = []
    for piece in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        parts.append(int(piece[1:-1]) if piece.startswith("[") else piece)
    return tuple(parts)


def _with_lines(issues: list[ConfigIssue], text: str, file: str) -> list[ConfigIssue]:
    from .._json5loc import locate_lines

    lines = locate_lines(text)
    located = []
    for issue in issues:
        key = _parse_path_key(issue.path)
        line = None
        while key and line is None:
            line = lines.get(key)
            key = key[:-1]
        located.append(replace(issue, file=file, line=line))
    return located


_JSON5_ERROR = re.compile(r"^<string>:(\d+)\s*(.*)$", re.DOTALL)


MAX_DEPTH = 32
"""Config files nested deeper than this (objects and arrays) are refused before parsing."""

# Strings and comments of JSON5 text, skipped when counting brackets.
# (Patterns as text: re compiles and caches them on first use, not at import.)
_SKIPPED = r'(?s)"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|//[^\n]*|/\*.*?\*/'
_BRACKETS = r"[\[\]{}]"
_FAIL_CLOSED_TEXT = r"""["']?failMode["']?\s*:\s*["']closed["']"""


def _depth_line(text: str) -> int | None:
    """The line where ``text`` first nests deeper than :data:`MAX_DEPTH`, or None."""
    depth = 0
    bare = re.sub(_SKIPPED, lambda m: "\n" * m[0].count("\n"), text)
    for match in re.finditer(_BRACKETS, bare):
        depth += 1 if match[0] in "[{" else -1
        if depth > MAX_DEPTH:
            return match.string.count("\n", 0, match.start()) + 1
    return None


def _fails_closed(raw: Any) -> bool:
    settings = raw.get("loopwarden") if isinstance(raw, Mapping) else None
    return isinstance(settings, Mapping) and settings.get("failMode") == "closed"


def _refused(issues: list[ConfigIssue], fail_closed: bool) -> ConfigError:
    error = ConfigError(issues)
    error.fail_closed = fail_closed
    return error


class _Objects:
    """``object_pairs_hook`` of both parsers: builds each object as a dict and remembers
    the objects that repeat a key (kept alive, so that their ids stay theirs)."""

    __slots__ = ("repeated",)

    def __init__(self) -> None:
        self.repeated: list[tuple[dict[Any, Any], list[Any]]] = []

    def __call__(self, pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
        pairs = pairs if type(pairs) is list else list(pairs)
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[Any] = set()
            again = []
            for key, _ in pairs:
                if key in seen:
                    again.append(key)
                seen.add(key)
            self.repeated.append((obj, again))
        return obj


def _read_text(text: str, file: str, closed: bool) -> tuple[Any, _Objects]:
    """The parsed document: by the strict JSON parser when it takes the text (a plain
    JSON file of a megabyte in milliseconds), else by the JSON5 one (seconds)."""
    import json

    objects = _Objects()
    try:
        return json.loads(text, object_pairs_hook=objects), objects
    except (ValueError, RecursionError):  # JSON5 syntax, or not valid at all
        objects = _Objects()
    import json5

    try:
        return json5.loads(text, object_pairs_hook=objects), objects
    except ValueError as exc:
        from .._json5loc import syntax_error

        match = _JSON5_ERROR.match(str(exc))
        line = int(match.group(1)) if match else None
        message = f"not valid JSON5: {match.group(2) if match else exc}"
        column = re.search(r"at column (\d+)$", message)
        # json5 reports where its parser gave up, often a token or two after the
        # mistake; ours is used when it is no later than that.
        found = syntax_error(text)
        if found is not None and (
            line is None or (found.line, found.column) <= (line, int(column[1]) if column else 0)
        ):
            line = found.line
            message = f"not valid JSON5 at column {found.column}: {found.message}"
        raise _refused([ConfigIssue("", message, file=file, line=line)], closed) from None
    except RecursionError:  # the bracket count missed something: still a config error
        message = f"nested deeper than {MAX_DEPTH} levels (objects and arrays)"
        raise _refused([ConfigIssue("", message, file=file)], closed) from None


def _read_by_us(path: PathKey) -> bool:
    """``path`` is a key loopwarden reads (or holds one): the ``loopwarden`` block,
    ``tools.loopDetection``, and the agents' ids and ``tools.loopDetection`` blocks.
    The rest of an ``openclaw.json`` is OpenClaw's."""
    head = path[0]
    if head == "loopwarden":
        return True
    if head == "tools":
        return len(path) == 1 or path[1] == "loopDetection"
    if head != "agents" or len(path) == 1:
        return head == "agents"
    if path[1] not in ("list", "entries"):
        return False
    rest = path[3:]
    if not rest:
        return True
    if rest == ("id",):
        return path[1] == "list"
    return rest[0] == "tools" and (len(rest) == 1 or rest[1] == "loopDetection")


def _repeated_keys(raw: Any, objects: _Objects) -> list[PathKey]:
    """Paths of the keys written twice in the parts of ``raw`` loopwarden reads."""
    if not objects.repeated:
        return []
    again = {id(obj): keys for obj, keys in objects.repeated}
    found: list[PathKey] = []
    todo: list[tuple[Any, PathKey]] = [(raw, ())]
    while todo:
        value, path = todo.pop()
        if isinstance(value, dict):
            found += [(*path, k) for k in again.get(id(value), ()) if _read_by_us((*path, k))]
            items: Iterable[tuple[Any, Any]] = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        for key, item in items:
            sub = (*path, key)
            if isinstance(item, (dict, list)) and _read_by_us(sub):
                todo.append((item, sub))
    return found


def _repeated_issues(paths: list[PathKey], text: str, file: str) -> list[ConfigIssue]:
    """One problem per extra copy of a repeated key, with the lines of both copies."""
    from .._json5loc import Duplicate, locate_lines

    duplicates: list[Duplicate] = []
    locate_lines(text, duplicates)
    wanted = set(paths)
    issues = []
    for path, first, again in duplicates:
        if path in wanted:
            message = (
                f"the key is written more than once ({file}:{first} and {file}:{again}); "
                "only the last copy would count: keep one"
            )
            issues.append(ConfigIssue(format_path(path), message, file=file, line=again))
    return issues or [
        ConfigIssue(format_path(p), "the key is written more than once: keep one", file=file)
        for p in paths
    ]


def _load_text(text: str, file: str) -> Config:
    # A file that cannot be parsed still says what to do when it is broken.
    closed = re.search(_FAIL_CLOSED_TEXT, text) is not None
    deep = _depth_line(text)
    if deep is not None:
        message = f"nested deeper than {MAX_DEPTH} levels (objects and arrays)"
        raise _refused([ConfigIssue("", message, file=file, line=deep)], closed)
    raw, objects = _read_text(text, file, closed)
    if raw is None:
        raise _refused([ConfigIssue("", "expected a config object, got null", file=file)], closed)
    repeated = _repeated_keys(raw, objects)
    if repeated:
        # Either copy may be the one meant: a copy that says "closed" is honoured.
        raise _refused(_repeated_issues(repeated, text, file), closed or _fails_closed(raw))
    issues: list[ConfigIssue] = []
    config = _parse(raw, issues)
    if issues:
        raise _refused(_with_lines(issues, text, file), _fails_closed(raw))
    config.source = file
    config._text = text
    return config


ConfigSource = Union[Config, Mapping[str, Any], str, "os.PathLike[str]", None]


def load_config(source: ConfigSource) -> Config:
    """Load a whole config from a JSON5/JSON file path, a mapping, or ``None`` (defaults).

    Raises :class:`ConfigError` listing every problem with its path (and file line).
    """
    if isinstance(source, Config):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if not path.is_absolute():  # say where a relative path was looked for
                with contextlib.suppress(OSError):
                    reason += f" (looked for in the working directory {os.getcwd()})"
            raise ConfigError(
                [ConfigIssue("", f"cannot read config file: {reason}", file=str(path))]
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                [ConfigIssue("", "config file is not UTF-8 text", file=str(path))]
            ) from None
        return _load_text(text, str(path))
    issues: list[ConfigIssue] = []
    config = _parse(source, issues)
    if issues:
        raise _refused(issues, _fails_closed(source))
    return config


def resolve_config(
    full_config: Mapping[str, Any] | None, agent_id: str | None = None
) -> LoopDetectionConfig:
    """Effective ``tools.loopDetection`` for ``agent_id`` from a whole config mapping."""
    return load_config(full_config).for_agent(agent_id)
