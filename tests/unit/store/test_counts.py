"""The work-unit gauge's counts (coordinator/store/counts.py `work_units`), read from a real
in-process ledger: a plan's units move from ready to running as they are dispatched, a run
that waits blocks its units, and an active run with no open action is a unit of its own."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from coordinator.heart.context import Context
from coordinator.model.orders import Order
from coordinator.runs.service import new_run
from coordinator.store import counts
from coordinator.store.models import RunRow
from shared.ids import new_id
from shared.states import RunState
from tests.harness.ledger import Store, apply_all, in_flight, receipt

LIMITS = {
    "max_actions": 10,
    "max_seconds": 60.0,
    "estimate_actions": 10,
    "estimate_seconds": 60.0,
    "action_timeout_seconds": 60.0,
}


def _bare_run(store: Store, kind: str, status: str) -> str:
    """A run of `kind` in `status` with no action (a goal, a desktop run)."""
    run_id = new_id("run")

    def unit(s: Session, ctx: Context) -> list[Order]:
        s.add(
            new_run(
                run_id, "owner", "t", LIMITS, kind=kind, spec={}, actions_total=0,
                now=time.time(), status=status,
            )
        )  # fmt: skip
        return []

    store.run(unit)
    return run_id


def test_a_plans_units_are_ready_until_dispatched_and_a_waiting_run_blocks_them(
    store: Store,
) -> None:
    assert store.read(counts.work_units) == {}
    store.worker("w")
    run_id = store.submit(3, stage_all=True)  # three parallel units, one worker slot free
    found = store.read(counts.work_units)
    running = found.get(("plan", "running"), 0)
    assert running >= 1 and running + found.get(("plan", "ready"), 0) == 3

    def wait(s: Session, ctx: Context) -> list[Order]:
        run = s.get_one(RunRow, run_id)
        run.status = RunState.WAITING_FOR_ENVIRONMENT
        return []

    store.run(wait)
    found = store.read(counts.work_units)
    assert found.get(("plan", "running"), 0) == running  # in flight stays in flight
    assert found.get(("plan", "blocked"), 0) == 3 - running
    assert ("plan", "ready") not in found


def test_an_active_run_without_open_actions_is_one_unit_in_its_runs_state(store: Store) -> None:
    _bare_run(store, "goal", RunState.RUNNING)  # thinking: the model call is its work
    _bare_run(store, "goal", RunState.DELEGATED)
    _bare_run(store, "goal", RunState.RECOVERING)
    _bare_run(store, "desktop", RunState.WAITING_FOR_AUTHORITY)
    _bare_run(store, "desktop", RunState.SUCCEEDED)  # stopped: not work
    assert store.read(counts.work_units) == {
        ("goal", "running"): 1,
        ("goal", "blocked"): 1,
        ("goal", "ready"): 1,
        ("desktop", "blocked"): 1,
    }


def test_a_finished_plan_leaves_no_unit(store: Store) -> None:
    store.worker("w")
    store.submit(2)
    for _ in range(2):  # in sequence: the second is dispatched when the first's receipt lands
        [order] = in_flight(store)
        store.run(apply_all([receipt(order)]))
    assert store.read(counts.work_units) == {}
