"""End-to-end tests against the real coding-agent CLIs (marker ``e2e``).

They need the pinned CLIs (``scripts/e2e-cli-setup``) and a network namespace
(``unshare -n`` as root, ``unshare -rn`` otherwise). Without them the tests
skip with the reason, unless ``LOOPWARDEN_E2E_REQUIRED=1`` (set it in CI):
then they fail, so a CLI that did not install can never pass silently.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import LOOPWARDEN, REQUIRED, Workspace, cli_path, netns_prefix

pytest.register_assert_rewrite("tests.e2e.common")  # must precede the test modules' imports


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (LOOPWARDEN_E2E_REQUIRED=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(name="netns", scope="session")
def fixture_netns() -> list[str]:
    """How to start a process with only loopback (skips, with the reason, without namespaces).

    A machine that cannot make namespaces cannot run these tests at all, so this
    skips even in CI; a CLI that failed to install fails instead (``unavailable``).
    """
    prefix = netns_prefix()
    if prefix is None:
        pytest.skip("network namespaces are not available here (unshare -n / -rn failed)")
    return prefix


@pytest.fixture(name="runtime_dir", scope="session")
def fixture_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One private directory for the hook helper; the helper is stopped at the end."""
    path = tmp_path_factory.mktemp("lw-run")
    path.chmod(0o700)
    yield path
    env = {**os.environ, "LOOPWARDEN_RUNTIME_DIR": str(path)}
    subprocess.run(
        [str(LOOPWARDEN), "hook", "--stop-daemon"], env=env, capture_output=True, check=False
    )


@pytest.fixture(name="make_workspace")
def fixture_make_workspace(
    tmp_path: Path, netns: list[str], runtime_dir: Path
) -> Callable[..., Workspace]:
    """A factory: ``make_workspace(agent, **settings)`` (skips when the CLI is missing)."""
    count = 0

    def make(agent: str, **extra_settings: Any) -> Workspace:
        nonlocal count
        if not cli_path(agent).exists():
            unavailable(f"{agent} is not installed; run scripts/e2e-cli-setup")
        count += 1
        return Workspace(agent, tmp_path / f"ws{count}", runtime_dir, netns, extra_settings)

    return make


@pytest.fixture(name="ws")
def fixture_ws(
    request: pytest.FixtureRequest, make_workspace: Callable[..., Workspace]
) -> Workspace:
    """A workspace for the test module's ``AGENT``, with loopwarden installed."""
    ws = make_workspace(request.module.AGENT)
    ws.install()
    return ws
