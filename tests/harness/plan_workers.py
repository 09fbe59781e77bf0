"""Fixtures of the plan-run modules that share one coordinator and whose workers never browse
(`from tests.harness.plan_workers import no_browsers, shared_coordinator` in such a module:
they are the fixtures `worker_browser` and `coordinator` there)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.states import STOPPED
from tests.harness.processes import CoordinatorProcess


@pytest.fixture(scope="module", name="worker_browser")
def no_browsers() -> bool:
    """These tests' workers never browse: they start without Chromium (--no-headless)."""
    return False


@pytest.fixture(name="coordinator")
def shared_coordinator(module_coordinator: CoordinatorProcess) -> Iterator[CoordinatorProcess]:
    """One coordinator for the module (conftest.py): each test has its own workers and runs,
    and runs a test leaves waiting are cancelled after it, so that none takes a later test's
    worker."""
    yield module_coordinator
    listed = module_coordinator.cli_json("runs", "list", "--owner", "*", "--limit", "500")
    for run in listed["runs"]:
        if run["status"] not in STOPPED:
            module_coordinator.cli("runs", "cancel", run["id"], check=False)
