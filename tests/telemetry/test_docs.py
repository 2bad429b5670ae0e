"""docs/observability.md stays true: its metric table and attribute names match the code."""

from __future__ import annotations

import re
from pathlib import Path

from loopwarden.telemetry import _names

DOC = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text("utf-8")


def test_the_metric_table_lists_every_metric_with_its_unit_and_prometheus_name() -> None:
    """Each metric row names the OTel metric, its unit and its Prometheus name as the code does."""
    rows = re.findall(
        r"^\| `(loopwarden\.[a-z_.]+)` \| \w+, `([^`]+)` \|.*\| `([a-z_]+)` \|$", DOC, re.M
    )
    assert {name: (unit, prom) for name, unit, prom in rows} == {
        name: (unit, prom) for name, (unit, prom, _text) in _names.METRICS.items()
    }


def test_every_attribute_and_event_name_is_documented() -> None:
    """All attribute keys the code emits, and the four event names, appear in the doc."""
    keys = [v for k, v in vars(_names).items() if k.isupper() and isinstance(v, str) and "." in v]
    assert keys
    missing = [k for k in keys if f"`{k}`" not in DOC]
    assert missing == []
    for action in ("warn", "block", "stop", "abort"):
        assert f"`loopwarden.{action}`" in DOC
    assert f"`{_names.OVERFLOW}`" in DOC
