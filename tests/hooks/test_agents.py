"""The one list of coding agents and the adapters that serve them agree."""

from __future__ import annotations

from loopwarden.hooks._protocol import AGENTS
from loopwarden.hooks.agents import ADAPTERS, Adapter


def _classes(cls: type[Adapter]) -> set[type[Adapter]]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _classes(sub)
    return found


def test_every_listed_agent_has_its_adapter() -> None:
    """``hook``, ``install`` and ``doctor`` offer exactly the agents in the list, in its order."""
    assert tuple(ADAPTERS) == AGENTS
    assert all(adapter.name == name for name, adapter in ADAPTERS.items())


def test_every_adapter_is_offered() -> None:
    """An adapter class that is not in the agent list would never be used."""
    offered = {type(adapter) for adapter in ADAPTERS.values()}
    assert _classes(Adapter) == offered


def test_tested_versions_are_the_e2e_pins() -> None:
    """doctor's tested CLI versions are the ones the e2e suite installs and runs."""
    import json
    from pathlib import Path

    from loopwarden.hooks.clistate import TESTED

    pins = json.loads((Path(__file__).parent.parent / "e2e" / "clis.json").read_text())
    assert {a: ".".join(map(str, c.tested)) for a, c in TESTED.items()} == {
        a: p["version"] for a, p in pins.items()
    }
    assert {a: c.binary for a, c in TESTED.items()} == {a: p["bin"] for a, p in pins.items()}
