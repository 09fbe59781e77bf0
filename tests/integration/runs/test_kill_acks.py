"""Kill switch bookkeeping in the store, in process: acknowledgements recorded exactly once
(insert or ignore), and the counts `Status` answers; the one serialized push; and a fleet
switch through real processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from coordinator.admin_cli.render import as_dict
from coordinator.heart import ledger
from coordinator.runs.killswitch import record_acks
from coordinator.runs.service import new_run
from coordinator.store import desktop as queries
from coordinator.store.engine import create_store_engine
from coordinator.store.models import (
    Base,
    KillAckRow,
    KillSwitchRow,
    PresenceRow,
    ReplicaRow,
    WorkerRow,
)
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until

NOW = 1_000_000.0


@pytest.fixture(scope="module")
def worker_browser() -> bool:
    """These tests' workers never browse: they start without Chromium (--no-headless)."""
    return False


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (
        f"sqlite:///{tmp_path / 'store.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    made = create_store_engine(url, immediate=False, pool_size=1)
    Base.metadata.create_all(made)
    yield made
    made.dispose()


def _worker(
    s: Session, worker_id: str, *, state: str = "active", lease: float | None = None
) -> None:
    s.add(
        WorkerRow(
            id=worker_id,
            name=worker_id,
            secret_hash=f"hash-{worker_id}",
            state=state,
            labels={},
            allowed_capabilities=[],
            advertisement={},
            enrolled_at=NOW,
            revoked_at=None,
            enrollment_token_id="tok",
        )
    )
    s.flush()  # the presence row refers to it
    if lease is not None:
        # A presence lease is its replica's: a lapsed one is a replica whose lease ran out.
        replica = "dead" if lease < 0 else "b" if worker_id.endswith("-b") else "a"
        if s.get(ReplicaRow, replica) is None:
            s.add(
                ReplicaRow(
                    name=replica,
                    address="127.0.0.1:1",
                    started_at=NOW,
                    seen_at=NOW,
                    lease_expires_at=NOW + lease,
                )
            )
            s.flush()
        s.add(
            PresenceRow(
                worker_id=worker_id,
                replica=replica,
                session_id=f"ses-{worker_id}",
                connected_at=NOW,
                last_heartbeat_at=NOW,
                lease_expires_at=NOW + lease,
            )
        )


def test_acks_are_recorded_exactly_once_whatever_repeats(engine: Engine) -> None:
    with Session(engine) as s, s.begin():
        queries.add_acks(s, [("k1", "w1", True, 1.0), ("k1", "w1", True, 1.5)])
    with Session(engine) as s, s.begin():
        # A repeat of a recorded ack beside new ones: the new ones go in, the repeat is ignored.
        queries.add_acks(
            s, [("k1", "w1", True, 9.0), ("k1", "w2", True, 2.0), ("k1", "w1", False, 3.0)]
        )
    with Session(engine) as s:
        got = s.execute(
            select(KillAckRow.worker_id, KillAckRow.engaged, KillAckRow.acked_at).order_by(
                KillAckRow.worker_id, KillAckRow.engaged
            )
        )
        assert [tuple(r) for r in got] == [("w1", False, 3.0), ("w1", True, 1.0), ("w2", True, 2.0)]


def _switch(s: Session, kill_id: str, scope: str, target: str = "", released: bool = False) -> None:
    s.add(
        KillSwitchRow(
            id=kill_id,
            scope=scope,
            target=target,
            reason="r",
            engaged_by="adm",
            engaged_from="127.0.0.1",
            engaged_at=NOW,
            released_at=NOW + 1 if released else None,
            released_by="adm" if released else "",
            release_reason="",
        )
    )


def _run_acting_on(s: Session, run_id: str, worker_id: str) -> None:
    limits = {"estimate_actions": 1, "estimate_seconds": 60.0}
    s.add(new_run(run_id, "owner", "t", limits, kind="plan", spec={}, actions_total=1, now=NOW))
    s.flush()
    action = ledger.new_action(
        run_id, 0, 0, "diag.echo", {}, idempotent=True, route={}, intent="", timeout=60.0
    )
    action.worker_id = worker_id
    s.add(action)


def test_an_ack_counts_only_for_a_switch_that_exists_and_applies_to_its_worker(
    engine: Engine,
) -> None:
    """30.4: what a worker acknowledges is checked against the switches in the store, in the
    batch's transaction; what does not count is left out of the insert, so one bad
    acknowledgement (on PostgreSQL, an id longer than the column) fails no other."""
    with Session(engine) as s, s.begin():
        _switch(s, "k_fleet", "fleet")
        _switch(s, "k_w1", "worker", "w1")
        _switch(s, "k_run", "run", "run_1")
        _switch(s, "k_gone", "worker", "w1", released=True)
        _run_acting_on(s, "run_1", "w2")
    rows = [
        ("k_fleet", "w1", True, 1.0),
        ("k_w1", "w1", True, 1.0),
        ("k_w1", "w2", True, 1.0),  # another worker's switch
        ("k_run", "w2", True, 1.0),
        ("k_run", "w1", True, 1.0),  # a run that never reached w1
        ("k_fleet", "w1", False, 1.0),  # the release of a switch still engaged
        ("k_gone", "w1", False, 1.0),
        ("k_gone", "w1", True, 1.0),  # it was applied before the release: true, and kept
        ("kill_" + "x" * 65536, "w1", True, 1.0),  # no switch has such an id
        ("k_nothing", "w1", True, 1.0),
    ]
    with Session(engine) as s, s.begin():
        refused = record_acks(s, rows)
    assert refused == [
        ("w2", "acknowledged k_w1, which does not apply to it"),
        ("w1", "acknowledged k_run, which does not apply to it"),
        ("w1", "acknowledged the release of k_fleet, still engaged"),
        ("w1", "acknowledged a kill switch that does not exist"),
        ("w1", "acknowledged a kill switch that does not exist"),
    ]
    with Session(engine) as s:
        got = s.execute(
            select(KillAckRow.kill_id, KillAckRow.worker_id, KillAckRow.engaged).order_by(
                KillAckRow.kill_id, KillAckRow.worker_id, KillAckRow.engaged
            )
        )
        assert [tuple(r) for r in got] == [
            ("k_fleet", "w1", True),
            ("k_gone", "w1", False),
            ("k_gone", "w1", True),
            ("k_run", "w2", True),
            ("k_w1", "w1", True),
        ]
    with Session(engine) as s, s.begin():
        assert record_acks(s, rows[:2]) == []  # again: recorded once
    with Session(engine) as s:
        assert s.query(KillAckRow).count() == 5


def test_status_counts_online_workers_that_have_not_acknowledged(engine: Engine) -> None:
    with Session(engine) as s, s.begin():
        for i in range(5):
            _worker(s, f"w{i}", lease=30.0)
        _worker(s, "w5-b", lease=30.0)  # streaming to another replica
        _worker(s, "lapsed", lease=-1.0)
        _worker(s, "gone", state="revoked", lease=30.0)
        _worker(s, "never")
        queries.add_acks(
            s,
            [
                ("k1", "w0", True, NOW),
                ("k1", "w1", True, NOW),
                ("k1", "lapsed", True, NOW),  # acked, then went offline: still counted
                ("k1", "w2", False, NOW),  # a release ack is not an engage ack
                ("k2", "w3", True, NOW),
            ],
        )
    with Session(engine) as s:
        assert queries.online_unacknowledged(s, "k1", NOW, limit=2) == (4, ["w2", "w3"])
        assert queries.online_unacknowledged(s, "k1", NOW, limit=100)[1] == [
            "w2",
            "w3",
            "w4",
            "w5-b",
        ]
        assert queries.ack_counts(s, ["k1", "k2"]) == {
            ("k1", True): 3,
            ("k1", False): 1,
            ("k2", True): 1,
        }
        assert queries.acked_workers(s, ["k1", "k2"], limit=2) == {
            ("k1", True): ["lapsed", "w0"],
            ("k1", False): ["w2"],
            ("k2", True): ["w3"],
        }
        assert queries.acked_among(s, "k1", ["w0", "w2", "w4"]) == {"w0"}
        assert queries.live_holders(s, NOW, other_than="a") == {"w5-b": "b"}
        assert queries.live_holders(s, NOW, worker_ids=["w1", "lapsed", "gone", "never"]) == {
            "w1": "a"
        }
        assert len(queries.live_holders(s, NOW)) == 6


@pytest.mark.slow
def test_a_fleet_switch_reaches_every_stream_and_a_later_one_in_its_welcome(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    first, second = workers("one"), workers("two")
    first.wait_online()
    second.wait_online()
    kill = coordinator.cli_json("kill", "engage", "--reason", "fleet test")
    assert kill["unacknowledgedCount"] == 2
    assert sorted(kill["unacknowledged"]) == sorted([first.worker_id, second.worker_id])

    # Polled in process (the document `kill status --json` prints): a CLI process per poll
    # would be a Python start competing with the workers being waited on.
    channel = coordinator.channel()
    assert channel is not None
    kills = desktop_pb2_grpc.KillSwitchServiceStub(channel)

    def acked(n: int, released: bool = False) -> Callable[[], dict[str, Any] | None]:
        def poll() -> dict[str, Any] | None:
            request = desktop_pb2.KillStatusRequest(include_released=released)
            reply = kills.Status(request, metadata=coordinator.admin_metadata(), timeout=30)
            switches = as_dict(reply)["switches"]
            switch = next(s for s in switches if s["id"] == kill["id"])
            done = switch["acknowledgedCount"] == n and switch["unacknowledgedCount"] == 0
            return switch if done else None

        return poll

    switch = wait_until(acked(2), 15, 0.1, "both workers to acknowledge")
    assert sorted(switch["acknowledged"]) == sorted([first.worker_id, second.worker_id])
    # Connected after the engage: the switch comes with its welcome, and it acknowledges it.
    third = workers("three")
    third.wait_online()
    switch = wait_until(acked(3), 15, 0.1, "the later worker to acknowledge")
    assert third.worker_id in switch["acknowledged"]
    coordinator.cli("kill", "release", "--fleet", "--reason", "done")
    wait_until(acked(3, released=True), 15, 0.1, "every worker to acknowledge the release")
