"""loopwarden: stop AI agents from wasting tokens in tool-call loops.

An implementation of OpenClaw's tool-loop detection (``tools.loopDetection``)
for Python agents. Start with :class:`LoopGuard`::

    import loopwarden as lw

    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    run = guard.run()
    decision = run.before_call("read", {"path": "a.txt"}, call_id="c1")

Public names load on first use: coding-agent hooks start a new process for
every tool call, and ``import loopwarden.cli`` must not pay for the engine.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

import sys

# Not typing.TYPE_CHECKING: importing typing alone costs more than this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    # `X as X`: explicit re-exports, so that `lw.LoopGuard` type-checks under mypy --strict.
    from typing import Any

    from .config import Config as Config
    from .config import DetectorsConfig as DetectorsConfig
    from .config import LoopDetectionConfig as LoopDetectionConfig
    from .config import PostCompactionGuardConfig as PostCompactionGuardConfig
    from .config import Settings as Settings
    from .config import load_config as load_config
    from .config import normalize_agent_id as normalize_agent_id
    from .config import resolve_config as resolve_config
    from .engine.compaction import CompactionVerdict as CompactionVerdict
    from .engine.compaction import PostCompactionGuard as PostCompactionGuard
    from .engine.detectors import Detection as Detection
    from .engine.history import ToolCallHistory as ToolCallHistory
    from .engine.runtime import Decision as Decision
    from .errors import CircuitBreakerTripped as CircuitBreakerTripped
    from .errors import CompactionLoopPersisted as CompactionLoopPersisted
    from .errors import ConfigError as ConfigError
    from .errors import LoopAbort as LoopAbort
    from .errors import LoopwardenError as LoopwardenError
    from .errors import StoreError as StoreError
    from .events import LoopEvent as LoopEvent
    from .guard import LoopGuard as LoopGuard
    from .guard import RunGuard as RunGuard
    from .hashing import args_hash as args_hash
    from .hashing import hash_outcome as hash_outcome
    from .profiles import OutcomeProfile as OutcomeProfile
    from .runrecord import JsonlRunRecord as JsonlRunRecord
    from .stopping import StopReport as StopReport
    from .stores import MemoryStore as MemoryStore
    from .stores import Store as Store
    from .stores import store_from_url as store_from_url
    from .telemetry import Telemetry as Telemetry

# public name -> module that defines it
_EXPORTS = {
    "CircuitBreakerTripped": "errors",
    "CompactionLoopPersisted": "errors",
    "CompactionVerdict": "engine.compaction",
    "Config": "config",
    "ConfigError": "errors",
    "Decision": "engine.runtime",
    "Detection": "engine.detectors",
    "DetectorsConfig": "config",
    "JsonlRunRecord": "runrecord",
    "LoopAbort": "errors",
    "LoopDetectionConfig": "config",
    "LoopEvent": "events",
    "LoopGuard": "guard",
    "LoopwardenError": "errors",
    "MemoryStore": "stores",
    "OutcomeProfile": "profiles",
    "PostCompactionGuard": "engine.compaction",
    "PostCompactionGuardConfig": "config",
    "RunGuard": "guard",
    "Settings": "config",
    "Store": "stores",
    "StopReport": "stopping",
    "StoreError": "errors",
    "Telemetry": "telemetry._core",
    "ToolCallHistory": "engine.history",
    "args_hash": "hashing",
    "hash_outcome": "hashing",
    "load_config": "config",
    "normalize_agent_id": "config",
    "resolve_config": "config",
    "store_from_url": "stores",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> "Any":
    module = _EXPORTS.get(name)
    if module is not None:
        # __import__ rather than importlib: importlib pulls in `warnings`, which a
        # coding-agent hook would pay for on every tool call.
        __import__(f"{__name__}.{module}")
        value = getattr(sys.modules[f"{__name__}.{module}"], name)
        globals()[name] = value
        return value
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("loopwarden")
        except PackageNotFoundError:  # running from a source tree
            return "0+unknown"
    raise AttributeError(f"module 'loopwarden' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
