"""Helpers shared by the framework integrations (no framework imports here)."""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any

import orjson

from ..config import ConfigSource
from ..guard import LoopGuard

__all__ = ["append_note", "parse_arguments", "require", "resolve_guard"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; install it with: pip install 'loopwarden[{extra}]'"
        ) from exc


def resolve_guard(guard: LoopGuard | ConfigSource = None, **kwargs: Any) -> LoopGuard:
    """Accept a ready :class:`LoopGuard`, or anything :func:`load_config` accepts."""
    if isinstance(guard, LoopGuard):
        if kwargs:
            raise TypeError(
                f"pass {', '.join(sorted(kwargs))} to LoopGuard(...) itself, not with a LoopGuard"
            )
        return guard
    return LoopGuard(guard, **kwargs)


def append_note(text: str, note: str | None) -> str:
    """A tool result text with loopwarden's note after it."""
    if not note:
        return text
    return f"{text}\n\n{note}" if text else note


def parse_arguments(arguments: Any) -> Any:
    """Tool arguments that arrive as a JSON string, parsed so that equal calls hash equal.

    A string that is not JSON is returned unchanged.
    """
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            return orjson.loads(arguments)  # several times faster than json
        except (orjson.JSONDecodeError, TypeError):
            pass
        try:  # what orjson refuses: NaN literals, integers beyond 64 bits
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments
