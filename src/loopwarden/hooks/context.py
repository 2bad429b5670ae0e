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
from typing import TYPE_CHECKING, Any, NamedTuple

from .._logging import logger
from ..config import load_config
from ..errors import ConfigError
from ..guard import LoopGuard
from ..stores import SideRecords, store_from_url
from ..stores.sqlite import SQLiteStore
from .onewait import OneWait
from .options import (
    HOOK_DEFAULT_CONFIG,
    HookOptions,
    absolute_path,
    default_state,
    find_config,
    store_url,
)

if TYPE_CHECKING:
    from ..telemetry import MetricsServer, PrometheusMetrics

__all__ = ["HookContext", "HookEntry"]


class HookEntry(NamedTuple):
    """The guard for an event, and where the session's side records live."""

    guard: LoopGuard
    side: SideRecords


class HookContext:
    """Guards by (config file version, store URL); the helper keeps one for its lifetime.

    ``serve_metrics``: honour ``--metrics`` (the helper does; a hook process,
    which answers one event and exits, does not).
    """

    def __init__(self, max_guards: int = 8, *, serve_metrics: bool = False) -> None:
        self._entries: OrderedDict[tuple[Any, ...], HookEntry] = OrderedDict()
        self._sides: dict[str, OneWait] = {}
        self._lock = threading.Lock()
        self._max = max_guards
        self._serve_metrics = serve_metrics
        self._metrics: MetricsServer | None = None
        self._metrics_address = ""  # as the first --metrics gave it
        self._metrics_refused: set[str] = set()

    def _metrics_for(self, address: str) -> PrometheusMetrics | None:
        """The helper's one ``/metrics`` server, started by the first event that asks for it."""
        with self._lock:
            server = self._metrics
            if address in self._metrics_refused:
                return server.metrics if server is not None else None
            if server is None:
                try:
                    from ..telemetry import serve_metrics

                    server = self._metrics = serve_metrics(address)
                    self._metrics_address = address
                except (ImportError, OSError, ValueError) as exc:
                    self._metrics_refused.add(address)
                    logger.error(
                        "loopwarden hook helper: cannot serve metrics at %s (%s); "
                        "guarding without them",
                        address,
                        exc,
                    )
                    return None
                logger.info("loopwarden hook helper: serving metrics at %s", server.url)
            elif address != self._metrics_address:
                self._metrics_refused.add(address)
                logger.warning(
                    "loopwarden hook helper: already serving metrics at %s; --metrics %s ignored",
                    server.url,
                    address,
                )
            return server.metrics

    def guard_for(self, opts: HookOptions, env: Mapping[str, str], cwd: str) -> HookEntry:
        path, ident = find_config(opts, env, cwd)
        # Everything the store choice depends on besides the config file itself.
        state = opts.state or env.get("LOOPWARDEN_STATE") or ""
        state_key: Any = state
        if state and "://" not in state:
            state_key = absolute_path(state, env, cwd)
        elif state.startswith("sqlite://") and not state.startswith(("sqlite:///", "sqlite://~")):
            state_key = (state, cwd)  # a relative SQLite path
        metrics = None
        if self._serve_metrics and opts.metrics:
            metrics = self._metrics_for(opts.metrics)
        key: tuple[Any, ...] = (ident, state_key, default_state(env), metrics is not None)
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
        telemetry = None
        if metrics is not None:
            from ..telemetry import resolve_telemetry

            telemetry = resolve_telemetry(None, config.settings.telemetry, prometheus=metrics)
        try:
            url = store_url(opts, env, cwd, config)
            inner = store_from_url(url, ttl_seconds=config.settings.state_ttl_seconds)
        except ConfigError as exc:  # e.g. a malformed store URL in a valid file
            exc.fail_closed = exc.fail_closed or config.settings.fail_mode == "closed"
            raise
        # At most one wait for the store per event (see onewait).
        store = OneWait(inner)
        guard = LoopGuard(config, store=store, run_record=record, telemetry=telemetry)
        side: SideRecords
        if isinstance(inner, SideRecords):
            side = store
        else:  # e.g. redis: the small side records still live in the local SQLite file
            side_path = default_state(env)
            with self._lock:
                side = self._sides.get(side_path) or OneWait(SQLiteStore(side_path))
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
            metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.close()
        for entry in entries:
            entry.guard.close()
        for side in sides:
            side.close()
