"""Postconditions settle an unknown outcome (coordinator/heart/postconditions.py), in-process
on a real SQLite ledger: a worker that restarted mid-action and reports the attempt
interrupted gets the action's read-only check as its next attempt; the check's result decides
whether the action is done (observed, never run again), runs once more, or goes to a person."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import outcomes
from coordinator.heart.ledger import Context
from coordinator.model.orders import DispatchOrder, Held, Order
from coordinator.store.models import ActionRow, RunRow
from tests.harness.ledger import Store, apply_all, dispatched, in_flight, receipt

APPEND = {"name": "a.txt", "line": "lit"}
CHECK = {"kind": "diag.has_line", "args": APPEND, "expect": {"present": True}}


def _interrupted(store: Store) -> list[DispatchOrder]:
    """The action's worker reconnects saying the attempt was interrupted (it restarted
    mid-action); the orders the reconcile gave."""
    [order] = in_flight(store)

    def unit(s: Session, ctx: Context) -> list[Order]:
        held = (Held(order.action_id, order.attempt_id, order.epoch, "interrupted"),)
        return outcomes.reconcile_workers(
            s, [outcomes.Reconnect(order.worker_id, held, time.time())], ctx
        )

    return dispatched(store.run(unit))


def _plan(store: Store, postcondition: dict[str, Any] | None = CHECK) -> tuple[str, str]:
    worker = store.worker("w")
    run_id = store.submit(
        1, idempotent=False, kind="diag.append", args=APPEND, postcondition=postcondition
    )
    return worker, run_id


def _action(store: Store, run_id: str) -> ActionRow:
    row: ActionRow = store.read(lambda s: s.query(ActionRow).filter_by(run_id=run_id).one())
    return row


def _kinds(store: Store, run_id: str) -> list[str]:
    from coordinator.store.models import JournalRow

    rows = store.read(
        lambda s: s.query(JournalRow.kind).filter_by(run_id=run_id).order_by(JournalRow.seq).all()
    )
    return [k for (k,) in rows]


def test_an_interrupted_action_whose_check_finds_the_effect_is_done_without_running_again(
    store: Store,
) -> None:
    worker, run_id = _plan(store)
    [check] = _interrupted(store)
    # The check goes to the same worker as the action's next attempt, read-only.
    assert (check.worker_id, check.kind, check.idempotent) == (worker, "diag.has_line", True)
    assert json.loads(check.args_json) == APPEND and check.epoch == 2
    store.run(apply_all([receipt(check, result_json='{"present": true, "count": 1}')]))
    action = _action(store, run_id)
    assert (action.status, action.check_state, action.attempts) == ("SUCCEEDED", "observed", 2)
    assert store.run_row(run_id).status == "SUCCEEDED"
    kinds = _kinds(store, run_id)
    assert "action.check" in kinds and "action.observed" in kinds
    assert kinds.count("action.dispatched") == 2  # the append once, its check once
    assert in_flight(store) == []


def test_an_interrupted_action_whose_check_finds_nothing_runs_once_more(store: Store) -> None:
    _, run_id = _plan(store)
    [check] = _interrupted(store)
    [again] = dispatched(
        store.run(apply_all([receipt(check, result_json='{"present": false, "count": 0}')]))
    )
    assert (again.kind, json.loads(again.args_json), again.idempotent) == (
        "diag.append",
        APPEND,
        False,
    )
    assert _action(store, run_id).check_state == "absent"
    store.run(apply_all([receipt(again, result_json='{"name": "a.txt", "bytes": 4}')]))
    assert store.run_row(run_id).status == "SUCCEEDED"
    assert "action.absent" in _kinds(store, run_id)


def test_a_check_that_fails_or_is_lost_too_hands_back_saying_so(store: Store) -> None:
    _, run_id = _plan(store)
    [check] = _interrupted(store)
    store.run(apply_all([receipt(check, status="failed")]))
    run: RunRow = store.run_row(run_id)
    assert run.status == "HAND_BACK_TO_HUMAN" and run.waiting_code == "unknown_outcome"
    assert "its postcondition check diag.has_line failed: broken" in run.stop_reason

    _, lost = _plan(store)
    _interrupted(store)  # the check is in flight: its worker restarts again
    _interrupted(store)
    run = store.run_row(lost)
    assert run.status == "HAND_BACK_TO_HUMAN"
    assert "its postcondition check's outcome is unknown too" in run.stop_reason


def test_without_a_postcondition_or_with_a_lapsed_lease_a_person_decides(store: Store) -> None:
    _, plain = _plan(store, postcondition=None)
    assert _interrupted(store) == []
    assert store.run_row(plain).status == "HAND_BACK_TO_HUMAN"

    _, lapsed = _plan(store)
    [order] = in_flight(store)

    def expire(s: Session, ctx: Context) -> list[Order]:
        action = s.get(ActionRow, order.action_id)
        assert action is not None
        # The attempt may still be running there: a check could look before it acts.
        return outcomes.expire(s, action, "its claimant stopped responding (lease expired)", ctx)

    assert dispatched(store.run(expire)) == []
    assert store.run_row(lapsed).status == "HAND_BACK_TO_HUMAN"
