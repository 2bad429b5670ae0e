"""Guards and side-record stores for hook events, cached for the helper's lifetime.

A hook process answers one event and exits; the helper answers many, for
possibly different config files and stores (the hook's argv, environment and
working directory come with each event). :class:`HookContext` keeps a few
:class:`~loopwarden.guard.LoopGuard` objects keyed by everything their choice
depends on, so an edited config file is picked up by the next event.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..config import load_config
from ..guard import LoopGuard
from ..stores import SideRecords
from ..stores.sqlite import SQLiteStore
from .options import (
    HOOK_DEFAULT_CONFIG,
    HookOptions,
    absolute_path,
    default_state,
    find_config,
    store_url,
)

__all__ = ["HookContext", "HookEntry"]


class HookEntry(NamedTuple):
    """The guard for an event, and where the session's side records live."""

    guard: LoopGuard
    side: SideRecords


class HookContext:
    """Guards by (config file version, store URL); the helper keeps one for its lifetime."""

    def __init__(self, max_guards: int = 8) -> None:
        self._entries: OrderedDict[tuple[Any, ...], HookEntry] = OrderedDict()
        self._sides: dict[str, SQLiteStore] = {}
        self._lock = threading.Lock()
        self._max = max_guards

    def guard_for(self, opts: HookOptions, env: Mapping[str, str], cwd: str) -> HookEntry:
        path, ident = find_config(opts, env, cwd)
        # Everything the store choice depends on besides the config file itself.
        state = opts.state or env.get("LOOPWARDEN_STATE") or ""
        state_key: Any = state
        if state and "://" not in state:
            state_key = absolute_path(state, env, cwd)
        elif state.startswith("sqlite://") and not state.startswith(("sqlite:///", "sqlite://~")):
            state_key = (state, cwd)  # a relative SQLite path
        key: tuple[Any, ...] = (ident, state_key, default_state(env))
        with self._lock:
            for candidate in (key, (*key, cwd)):  # the second: a config with a relative path
                entry = self._entries.get(candidate)
                if entry is not None:
                    self._entries.move_to_end(candidate)
                    return entry
        config = load_config(path if path is not None else dict(HOOK_DEFAULT_CONFIG))
        record = config.settings.run_record
        if record is not None and not os.path.isabs(record):
            # Relative to where the agent runs, as in process (the helper runs in /).
            record = absolute_path(record, env, cwd)
            key = (*key, cwd)
        guard = LoopGuard(config, store=store_url(opts, env, cwd, config), run_record=record)
        store = guard.store
        side: SideRecords
        if isinstance(store, SideRecords):
            side = store
        else:  # e.g. redis: the small side records still live in the local SQLite file
            side_path = default_state(env)
            with self._lock:
                side = self._sides.get(side_path) or SQLiteStore(side_path)
                self._sides[side_path] = side
        entry = HookEntry(guard, side)
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self._max:
                # Dropped, not closed: another thread may still be using it; its
                # connections close when it is garbage collected.
                self._entries.popitem(last=False)
        return entry

    def close(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
            sides, self._sides = list(self._sides.values()), {}
        for entry in entries:
            entry.guard.close()
        for side in sides:
            side.close()
