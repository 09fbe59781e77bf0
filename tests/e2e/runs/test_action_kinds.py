"""Plan action kinds against a real worker: every kind a worker registers is in the contract,
and unknown kinds and arguments are refused at submit. The contract's own rules are
tests/unit/runs/test_action_kinds.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shared.action_kinds import KINDS
from tests.harness import CoordinatorProcess, WorkerProcess, wait_run, write_plan
from worker_agent.actions import default_registry
from worker_agent.browser.actions import BrowserActions
from worker_agent.browser.service import BrowserService
from worker_agent.research_app import ResearchApps


def test_the_contract_names_every_plan_kind_a_worker_registers() -> None:
    registry = default_registry()
    BrowserActions(BrowserService("/usr/bin/chromium")).register(registry)
    ResearchApps({}).register(registry)
    assert set(registry.kinds()) == set(KINDS)


def test_unknown_kinds_and_arguments_are_refused_at_submit(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    for i, (action, expected) in enumerate(
        [
            ({"kind": "no.such.kind", "args": {}}, "actions[0].kind: unknown kind 'no.such.kind'"),
            ({"kind": "diag.echo", "args": {"text": "hi"}},
             "actions[0].args.text: not an argument of diag.echo (diag.echo takes: value"),
            ({"kind": "diag.sleep", "args": {"seconds": "soon"}},
             "actions[0].args.seconds: must be a number >= 0"),
            ({"kind": "app.research", "args": {"app": "notes", "query": "q"}},
             "actions[0].args.app: no enrolled worker offers app 'notes' (offered: none)"),
        ]
    ):  # fmt: skip
        plan = write_plan(tmp_path / f"bad{i}.json", [action])
        done = coordinator.cli("runs", "submit", str(plan), check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"deskfleet: {expected}"), done.stderr
        assert done.stderr.count("\n") == 1
    assert coordinator.cli_json("runs", "list")["runs"] == []  # nothing was written

    # An app only an offline worker offers: the run is accepted and waits, naming the app.
    apps = workers("apps", extra_args=("--research-app", "notes=/bin/cat"))
    apps.wait_online()
    apps.stop()
    plan = write_plan(
        tmp_path / "app.json",
        [{"kind": "app.research", "args": {"app": "notes", "query": "q"}, "idempotent": True}],
    )
    run = coordinator.cli_json("runs", "submit", str(plan))
    waiting = wait_run(coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT")
    assert "research app notes" in waiting["waiting"]["detail"], waiting
