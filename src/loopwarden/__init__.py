"""loopwarden: stop AI agents from wasting tokens in tool-call loops.

An implementation of OpenClaw's tool-loop detection (``tools.loopDetection``)
for Python agents. Start with :class:`LoopGuard`::

    import loopwarden as lw

    guard = lw.LoopGuard({"tools": {"loopDetection": {"enabled": True}}})
    run = guard.run()
    decision = run.before_call("read", {"path": "a.txt"}, call_id="c1")
"""

from __future__ import annotations

from typing import Any

from .compaction import CompactionVerdict, PostCompactionGuard
from .config import (
    Config,
    DetectorsConfig,
    LoopDetectionConfig,
    PostCompactionGuardConfig,
    Settings,
    load_config,
    normalize_agent_id,
    resolve_config,
)
from .detection import Detection
from .errors import (
    CircuitBreakerTripped,
    CompactionLoopPersisted,
    ConfigError,
    LoopAbort,
    LoopwardenError,
    StoreError,
)
from .events import JsonlRunRecord, LoopEvent
from .guard import Decision, LoopGuard, RunGuard, block_result
from .hashing import args_hash, hash_outcome
from .history import ToolCallHistory
from .profiles import OutcomeProfile
from .stores import MemoryStore, Store, store_from_url

__all__ = [
    "CircuitBreakerTripped",
    "CompactionLoopPersisted",
    "CompactionVerdict",
    "Config",
    "ConfigError",
    "Decision",
    "Detection",
    "DetectorsConfig",
    "JsonlRunRecord",
    "LoopAbort",
    "LoopDetectionConfig",
    "LoopEvent",
    "LoopGuard",
    "LoopwardenError",
    "MemoryStore",
    "OutcomeProfile",
    "PostCompactionGuard",
    "PostCompactionGuardConfig",
    "RunGuard",
    "Settings",
    "Store",
    "StoreError",
    "ToolCallHistory",
    "__version__",
    "args_hash",
    "block_result",
    "hash_outcome",
    "load_config",
    "normalize_agent_id",
    "resolve_config",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("loopwarden")
        except PackageNotFoundError:  # running from a source tree
            return "0+unknown"
    raise AttributeError(f"module 'loopwarden' has no attribute {name!r}")
