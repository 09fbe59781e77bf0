"""Workers that connect together (a fleet coming back to a restarted coordinator) are handled
in batches, in-process on a SQLite store: reconciled in one ledger transaction, their kill
switches read at once, their credentials looked up at once. Each gets what it would get
alone, and the store is asked the same few questions whatever the number of workers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from sqlalchemy import event
from sqlalchemy.orm import Session

from coordinator.heart import ledger, outcomes
from coordinator.heart.dispatch import Dispatcher, _Connect, _one_per_worker
from coordinator.heart.ledger import DISPATCHED, Context
from coordinator.model.identity import Principal
from coordinator.model.notes import Recovered
from coordinator.model.orders import CancelOrder, DispatchOrder, Held, Order
from coordinator.model.settings import CoordinatorConfig
from coordinator.runs.killswitch import FLEET, RUN, WORKER, _applies_to, _engaged_for
from coordinator.security.principals import Authenticator
from coordinator.store import Database
from coordinator.store.models import ActionRow, KillSwitchRow, WorkerRow
from coordinator.store.schema import upgrade
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence, Sent, WorkerSession
from shared.credentials import SecretKind, new_secret, secret_hash
from shared.errors import AuthenticationError, RevokedError
from shared.ids import new_id
from tests.harness.ledger import Store, dispatched, in_flight


def _action(fleet: Store, action_id: str) -> ActionRow:
    row: ActionRow = fleet.read(lambda s: s.get(ActionRow, action_id))
    return row


def _reconcile(connects: list[tuple[str, tuple[Held, ...]]]) -> Any:
    """The workers' connects, their new streams opened now: after every claim made so far."""

    def unit(s: Session, ctx: Context) -> list[Order]:
        ctx.capacity_changed = True
        opened_at = time.time()
        batch = [outcomes.Reconnect(w, held, opened_at) for w, held in connects]
        return outcomes.reconcile_workers(s, batch, ctx)

    return unit


def test_each_worker_of_a_batch_is_reconciled_as_it_would_be_alone(
    store: Store,
) -> None:
    keeps, forgot, stranger = store.worker("keeps"), store.worker("forgot"), store.worker("x")
    for _ in range(2):
        store.submit(1)
    flying = {o.worker_id: o for o in in_flight(store)}
    assert set(flying) == {keeps, forgot}  # one attempt each: the least busy worker takes it
    kept, lost = flying[keeps], flying[forgot]
    unknown_to_ledger = Held("act_gone", "att_gone", 1, "running")
    orders = store.run(
        _reconcile(
            [
                (keeps, (Held(kept.action_id, kept.attempt_id, kept.epoch, "running"),)),
                (forgot, ()),  # never recorded its attempt: it goes out again
                (stranger, (unknown_to_ledger,)),
            ]
        )
    )
    assert _action(store, kept.action_id).attempt_id == kept.attempt_id  # still its attempt
    assert _action(store, kept.action_id).status == ledger.DISPATCHED
    again = [o for o in dispatched(orders) if o.action_id == lost.action_id]
    assert len(again) == 1 and again[0].attempt_id != lost.attempt_id  # sent again, once
    cancels = [o for o in orders if isinstance(o, CancelOrder)]
    assert [(c.worker_id, c.action_id) for c in cancels] == [(stranger, "act_gone")]


def test_an_interrupted_attempt_goes_once_to_another_worker_of_the_batch(
    store: Store,
) -> None:
    """The first worker's attempt was interrupted: it is retried, and the second worker of
    the batch, which said it holds nothing, takes the new attempt, sent once."""
    a = store.worker("a")
    run_id = store.submit(1)
    for _ in range(3):  # a's other slots: the retry goes to the least busy worker, b
        store.submit(1)
    flying = in_flight(store)
    [first] = [o for o in flying if o.run_id == run_id]
    assert {o.worker_id for o in flying} == {a}
    b = store.worker("b")
    held = tuple(
        Held(o.action_id, o.attempt_id, o.epoch, "interrupted" if o is first else "running")
        for o in flying
    )
    orders = store.run(_reconcile([(a, held), (b, ())]))
    [again] = dispatched(orders)
    assert again.action_id == first.action_id and again.attempt_id != first.attempt_id
    assert again.worker_id == b
    row = _action(store, first.action_id)
    assert (row.status, row.attempt_id, row.worker_id) == (ledger.DISPATCHED, again.attempt_id, b)
    assert store.run_row(run_id).status == ledger.RUNNING


def _statements(fleet: Store, unit: Any) -> int:
    """SQL statements the unit runs (the line's serving after it not counted)."""
    counted: list[str] = []

    def count(*args: Any) -> None:
        counted.append(args[2])

    with Session(fleet.engine, expire_on_commit=False) as s, s.begin(), s.no_autoflush:
        ctx = Context(lease_ttl=30.0, max_attempts=3, workers=fleet.index)
        event.listen(fleet.engine, "before_cursor_execute", count)
        try:
            unit(s, ctx)
            s.flush()
        finally:
            event.remove(fleet.engine, "before_cursor_execute", count)
    return len([c for c in counted if c.lstrip().upper().startswith("SELECT")])


def test_a_batch_reads_the_ledger_with_the_same_queries_for_2_or_20_workers(
    store: Store,
) -> None:
    workers = [store.worker(f"w{i}") for i in range(20)]
    for _ in range(20):
        store.submit(1)
    held = {
        o.worker_id: (Held(o.action_id, o.attempt_id, o.epoch, "running"),)
        for o in in_flight(store)
    }
    assert len(held) == 20

    def batch(n: int) -> list[tuple[str, tuple[Held, ...]]]:
        return [(w, held[w]) for w in workers[:n]]

    few, many = _statements(store, _reconcile(batch(2))), _statements(store, _reconcile(batch(20)))
    assert few == many, (few, many)


def _connects(*worker_ids: str) -> list[_Connect]:
    loop = asyncio.new_event_loop()
    try:
        return [_Connect(w, (), 0.0, loop.create_future()) for w in worker_ids]
    finally:
        loop.close()


def test_a_worker_connecting_twice_is_reconciled_in_two_batches_in_order() -> None:
    queue = _connects("a", "b", "a", "c", "a")
    batch, left = _one_per_worker(queue, 10)
    assert [c.worker_id for c in batch] == ["a", "b", "c"]
    assert left == [queue[2], queue[4]]
    batch, left = _one_per_worker(left, 10)
    assert batch == [queue[2]] and left == [queue[4]]


def test_a_batch_takes_at_most_its_limit_in_arrival_order() -> None:
    queue = _connects(*(f"w{i}" for i in range(7)))
    batch, left = _one_per_worker(queue, 5)
    assert batch == queue[:5] and left == queue[5:]


def test_a_welcome_gets_the_switches_that_apply_to_its_worker_only(
    store: Store,
) -> None:
    a, b, c = store.worker("a"), store.worker("b"), store.worker("c")
    runs = [store.submit(1) for _ in range(2)]
    flying = {o.worker_id: o.run_id for o in in_flight(store)}
    assert set(flying) == {a, b}

    def switch(scope: str, target: str, released: bool = False) -> KillSwitchRow:
        return KillSwitchRow(
            id=new_id("kill"), scope=scope, target=target, reason="r", engaged_by="adm",
            engaged_from="", engaged_at=time.time(), released_at=time.time() if released else None,
            released_by="", release_reason="",
        )  # fmt: skip

    fleet, on_b, on_run_of_a = switch(FLEET, ""), switch(WORKER, b), switch(RUN, flying[a])
    released = switch(RUN, flying[b], released=True)
    with Session(store.engine, expire_on_commit=False) as s, s.begin():
        s.add_all([fleet, on_b, on_run_of_a, released])
    kills, reach = store.read(lambda s: _engaged_for(s, {a, b, c}))
    assert reach == {a: {flying[a]}, b: {flying[b]}} and set(runs) == set(flying.values())

    def applying(worker_id: str) -> set[str]:
        return {k.id for k in kills if _applies_to(k, worker_id, reach.get(worker_id, set()))}

    assert applying(a) == {fleet.id, on_run_of_a.id}
    assert applying(b) == {fleet.id, on_b.id}
    assert applying(c) == {fleet.id}
    with Session(store.engine) as s, s.begin():  # no run switch engaged: runs are not read
        s.get(KillSwitchRow, on_run_of_a.id).released_at = time.time()  # type: ignore[union-attr]
    assert store.read(lambda s: _engaged_for(s, {a, b, c}))[1] == {}


async def test_credentials_looked_up_together_share_one_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    secrets = {f"wrk_{i:02d}": new_secret(SecretKind.WORKER, f"wrk_{i:02d}") for i in range(30)}
    rotated = new_secret(SecretKind.WORKER, "wrk_00")  # wrk_00's next credential, not yet used

    def enroll(s: Session) -> None:
        for i, (worker_id, secret) in enumerate(secrets.items()):
            s.add(
                WorkerRow(
                    id=worker_id, name=worker_id, secret_hash=secret_hash(secret),
                    state="revoked" if i == 1 else "active", labels={}, allowed_capabilities=[],
                    advertisement={}, enrolled_at=1000.0 + i, enrollment_token_id="tok",
                )
            )  # fmt: skip
        s.flush()
        row = s.get(WorkerRow, "wrk_00")
        assert row is not None
        row.previous_secret_hash, row.secret_hash = row.secret_hash, secret_hash(rotated)

    await db.write(enroll)
    selects: list[str] = []

    def count(*args: Any) -> None:
        if args[2].lstrip().upper().startswith("SELECT"):
            selects.append(args[2])

    auth = Authenticator(db)
    event.listen(db._reader, "before_cursor_execute", count)
    try:
        asked = [*secrets.values(), "wrk_99.nope"]
        found = await asyncio.gather(*(auth.authenticate(s) for s in asked), return_exceptions=True)
    finally:
        event.remove(db._reader, "before_cursor_execute", count)
        await db.close()
    assert len(selects) <= 2, selects  # the first lookup alone, then all the others at once
    by_id = dict(zip([*secrets, "wrk_99"], found, strict=True))
    assert isinstance(by_id.pop("wrk_01"), RevokedError)
    assert isinstance(by_id.pop("wrk_99"), AuthenticationError)
    # The previous credential of a rotation still works until the new one is used.
    assert all(isinstance(p, Principal) and p.id == w for w, p in by_id.items())


# ------------------------------------------------------------------ claims made during a connect


def test_an_attempt_claimed_after_the_new_stream_opened_is_not_sent_again(
    store: Store,
) -> None:
    """The worker is routable from the moment its presence opens, but its hello (what it holds)
    is reconciled a moment later. An attempt claimed in between went out on the new stream; the
    hello cannot list it, and re-sending it ran a non-idempotent action twice."""
    w = store.worker("w")
    before = store.submit(1, idempotent=False)
    [old] = in_flight(store)
    opened_at = time.time()
    time.sleep(0.01)
    after = store.submit(1, idempotent=False)
    claimed = {o.run_id: o for o in in_flight(store)}
    at = {run: _action(store, o.action_id).dispatched_at for run, o in claimed.items()}
    assert at[after] >= opened_at > at[before]
    orders = store.run(
        lambda s, ctx: outcomes.reconcile_workers(s, [outcomes.Reconnect(w, (), opened_at)], ctx)
    )
    # The attempt claimed before the stream opened never reached the worker: sent again.
    [again] = dispatched(orders)
    assert again.run_id == before and again.attempt_id != old.attempt_id
    # The one claimed after it is the worker's, untouched.
    row = _action(store, claimed[after].action_id)
    assert (row.status, row.attempt_id) == (DISPATCHED, claimed[after].attempt_id)


def test_an_attempt_claimed_after_the_new_stream_opened_is_not_counted_as_recovered(
    store: Store,
) -> None:
    """A worker's first connect finds work claimed on it in the moment between its presence
    and its reconcile: nothing was recovered, so the recovery metric must not count it."""
    w = store.worker("w")
    opened_at = time.time()
    time.sleep(0.01)
    store.submit(1)
    [claimed] = in_flight(store)
    ctx = Context(lease_ttl=30.0, max_attempts=3, workers=store.index)
    with Session(store.engine, expire_on_commit=False) as s, s.begin():
        orders = outcomes.reconcile_workers(s, [outcomes.Reconnect(w, (), opened_at)], ctx)
    assert dispatched(orders) == []
    assert [e for e in ctx.notes.events if isinstance(e, Recovered)] == []
    assert _action(store, claimed.action_id).attempt_id == claimed.attempt_id


def test_a_stream_is_not_sent_an_attempt_claimed_before_it_opened() -> None:
    """The other half of the rule: the order of an attempt claimed before the stream opened is
    not queued on it (the connect's reconcile re-sends the attempt), one claimed after is."""

    async def scenario() -> tuple[Sent, Sent, Sent, Sent, int]:
        # Only the session map is used: no store, no background tasks.
        presence = Presence(cast(Any, None), cast(Any, None), cast(Any, None))
        session = WorkerSession("w", "ses_1")
        session.opened_at = 100.0
        presence._sessions["w"] = session

        def order(at: float) -> DispatchOrder:
            return DispatchOrder(
                "w", "a", "r", "t", 1, 1, "diag.echo", "{}", True, 5.0, dispatched_at=at
            )

        sent = (
            presence.send("w", order(99.9)),
            presence.send("w", order(100.0)),
            presence.send("w", CancelOrder("w", "a", "t", "x")),
            presence.send("elsewhere", order(100.0)),
        )
        return (*sent, session.outbox.qsize())

    stale, current, other, absent, queued = asyncio.run(scenario())
    assert (stale, current, other, absent) == (
        Sent.CLAIMED_BEFORE_STREAM,
        Sent.SENT,
        Sent.SENT,
        Sent.NOT_HERE,
    )
    assert queued == 2


def test_an_unsent_attempt_is_sent_again_once_whichever_comes_first(
    store: Store,
) -> None:
    """An attempt claimed before the stream opened but committed after the connect's reconcile
    read the ledger is sent again by the dispatcher (`resend_unsent`); when the reconcile got
    there first, that is a no-op. Either way the action has exactly one new attempt."""
    w = store.worker("w")
    store.submit(1, idempotent=False)
    [claimed] = in_flight(store)
    opened_at = time.time()

    def resend(s: Session, ctx: Context) -> list[Order]:
        run = s.get(ledger.RunRow, claimed.run_id)
        assert run is not None
        return outcomes.resend_unsent(s, run, claimed.action_id, claimed.attempt_id, ctx)

    def reconcile(s: Session, ctx: Context) -> list[Order]:
        return outcomes.reconcile_workers(s, [outcomes.Reconnect(w, (), opened_at)], ctx)

    [again] = dispatched(store.run(resend))  # the dispatcher first
    assert again.attempt_id != claimed.attempt_id
    assert dispatched(store.run(reconcile)) == []  # claimed after the stream opened: left alone
    assert dispatched(store.run(resend)) == []  # and the stale order is not sent a second time
    row = _action(store, claimed.action_id)
    assert (row.status, row.attempt_id, row.attempts) == (DISPATCHED, again.attempt_id, 2)


def test_the_reconcile_first_leaves_nothing_for_the_dispatcher_to_send(
    store: Store,
) -> None:
    w = store.worker("w")
    store.submit(1, idempotent=False)
    [claimed] = in_flight(store)
    time.sleep(0.01)
    opened_at = time.time()
    [again] = dispatched(
        store.run(
            lambda s, ctx: outcomes.reconcile_workers(
                s, [outcomes.Reconnect(w, (), opened_at)], ctx
            )
        )
    )

    def resend(s: Session, ctx: Context) -> list[Order]:
        run = s.get(ledger.RunRow, claimed.run_id)
        assert run is not None
        return outcomes.resend_unsent(s, run, claimed.action_id, claimed.attempt_id, ctx)

    assert dispatched(store.run(resend)) == []
    assert _action(store, claimed.action_id).attempt_id == again.attempt_id


class _Relay:
    """This replica alone: every order is for a stream here (the relay's other half unused)."""

    receiver: Any = None

    def route(self, s: Session, orders: list[Order], *_: object) -> list[Order]:
        return orders


async def test_attempts_one_delivery_held_back_go_out_again_in_one_transaction(
    store: Store,
) -> None:
    """A fleet reconnecting at once can hold back many claims of one transaction: they are
    sent again together, in one transaction, and the held-back attempts leave no timeout
    armed and no span open behind them (their replacements have both)."""
    w = store.worker("w")
    for _ in range(3):
        store.submit(1, idempotent=False)
    stale = [
        replace(o, dispatched_at=_action(store, o.action_id).dispatched_at or 0.0)
        for o in in_flight(store)
    ]
    url = str(store.engine.url)
    db = Database(url)
    presence = Presence(cast(Any, None), cast(Any, None), cast(Any, None))  # the session map only
    session = WorkerSession(w, "ses_new")
    session.opened_at = time.time()  # the stream opened after the three claims
    presence._sessions[w] = session
    dispatcher = Dispatcher(
        db, presence, JournalBus(), CoordinatorConfig(db_url=url), cast(Any, _Relay()),
        store.index,
    )  # fmt: skip
    writes = 0
    write = db.write

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        return await write(*args, **kwargs)

    db.write = counted  # type: ignore[method-assign]
    try:
        dispatcher.deliver(stale)
        assert session.outbox.empty()  # none of the stale claims went on the new stream
        await asyncio.gather(*dispatcher._resends)
        sent = [session.outbox.get_nowait() for _ in range(session.outbox.qsize())]
        assert writes == 1
        assert {o.action_id for o in sent} == {o.action_id for o in stale}
        assert not {o.attempt_id for o in sent} & {o.attempt_id for o in stale}
        armed = {(o.action_id, o.attempt_id) for o in sent}
        assert set(dispatcher._timers) == armed
        assert set(dispatcher._spans._open) == armed
    finally:
        await dispatcher.aclose()
        await db.close()
