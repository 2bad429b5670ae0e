"""The public surface: SPEC 8 names, sorted exports, cheap and framework-free import."""

from __future__ import annotations

import ast
import subprocess
import sys

import loopwarden as lw

SPEC_8 = [
    "LoopDetectionConfig",
    "resolve_config",
    "ToolCallHistory",
    "PostCompactionGuard",
]


def test_spec_names_are_exported() -> None:
    """The SPEC 8 names are importable from the package root."""
    for name in SPEC_8:
        assert name in lw.__all__ and getattr(lw, name) is not None


def test_all_is_sorted_and_complete() -> None:
    """The root __all__ is sorted and every name in it resolves."""
    assert lw.__all__ == sorted(lw.__all__)
    for name in lw.__all__:
        assert getattr(lw, name) is not None, name
    assert set(dir(lw)) >= set(lw.__all__)


def test_spec_8_usage() -> None:
    """The usage block of SPEC section 8, verbatim in spirit."""
    cfg = lw.LoopDetectionConfig.from_dict({"enabled": True})
    cfg2 = lw.resolve_config({"tools": {"loopDetection": {"enabled": True}}}, None)
    assert cfg == cfg2 and cfg.enabled is True
    ints = (
        cfg.history_size,
        cfg.warning_threshold,
        cfg.critical_threshold,
        cfg.global_circuit_breaker_threshold,
        cfg.unknown_tool_threshold,
    )
    assert ints == (30, 10, 20, 30, 10)
    assert (
        cfg.detectors.generic_repeat,
        cfg.detectors.known_poll_no_progress,
        cfg.detectors.ping_pong,
    ) == (
        True,
        True,
        True,
    )
    assert cfg.post_compaction_guard.window_size == 3
    hist = lw.ToolCallHistory(cfg)
    hist.record_call("read", {"p": 1}, call_id=None, run_id=None)
    rec = hist.record_outcome("read", {"p": 1}, call_id=None, run_id=None, result="x")
    assert rec is not None and len(hist) == 1
    assert hist.record_outcome("read", {"p": 1}) is None
    assert hist.detect("read", {"p": 1}, run_id=None) is None
    guard = lw.PostCompactionGuard(window_size=3, enabled=True)
    guard.arm()
    assert guard.armed and guard.remaining_attempts == 3
    v = guard.observe("read", "h1", "r1")
    assert (v.should_abort, v.armed, v.remaining_attempts, v.count, v.tool_name) == (
        False,
        True,
        2,
        1,
        "read",
    )
    off = lw.PostCompactionGuard(window_size=3, enabled=False)
    off.arm()
    assert not off.armed
    v = off.observe("read", "h", "r")
    assert (v.should_abort, v.armed, v.remaining_attempts) == (False, False, 0)


FRAMEWORKS = {
    *("langchain", "langchain_core", "agents", "pydantic_ai", "google.adk", "mcp"),
    *("smolagents", "llama_index", "workflows"),
}


def loaded_after(code: str, modules: set[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``code``."""
    probe = f"import sys\n{code}\nprint(sorted(set({sorted(modules)!r}) & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(ast.literal_eval(out.stdout.strip()))


def test_import_is_cheap_and_imports_no_framework() -> None:
    """Importing loopwarden, its CLI and integrations loads no framework and no heavy module."""
    heavy = {*FRAMEWORKS, "orjson", "json5", "click", "sqlite3", "typing"}
    assert loaded_after("import loopwarden, loopwarden.cli, loopwarden.integrations", heavy) == []


def test_engine_imports_no_framework() -> None:
    """Guarding a call loads no framework."""
    code = "import loopwarden as lw; lw.LoopGuard(None).run().before_call('t', {})"
    assert loaded_after(code, {*FRAMEWORKS, "click"}) == []


def test_engine_has_no_driver_and_no_store() -> None:
    """Importing the engine loads no store, no guard driver, no run record and no sqlite3."""
    driver = {
        "sqlite3",
        "asyncio",
        "loopwarden.stores",
        "loopwarden.guard",
        "loopwarden.events",
        "loopwarden.runrecord",
        "loopwarden.telemetry",
    }
    assert loaded_after("import loopwarden.engine", driver) == []


_EXCEPTION_SURVEY = """
import importlib, json, pkgutil, warnings
import click
import loopwarden as lw
checked, stray = [], []
for info in pkgutil.walk_packages(lw.__path__, "loopwarden."):
    if info.name.endswith("__main__"):
        continue
    try:
        with warnings.catch_warnings():  # the deprecated modules say so on import
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(info.name)
    except ImportError:
        continue
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ):
            checked.append(value.__name__)
            if not issubclass(value, (lw.LoopwardenError, click.ClickException)):
                stray.append(info.name + "." + value.__name__)
print(json.dumps({"checked": checked, "stray": stray}))
"""


def test_every_exception_loopwarden_defines_is_a_loopwarden_error() -> None:
    """One ``except lw.LoopwardenError`` catches whatever loopwarden raises on purpose.

    Every module is imported, in a subprocess so that the imports do not leak into
    other tests; modules whose framework extra is missing are left out (the no-extras
    suite). click's exceptions are the command line's exit channel, not raised to callers.
    """
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _EXCEPTION_SURVEY], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    survey = json.loads(done.stdout.strip().splitlines()[-1])
    assert survey["stray"] == []
    assert len(survey["checked"]) >= 10
