"""Kill switch bookkeeping, in process: a batch keeps one row per change, a push serialized
once is the message each stream got, and status says how many more it waits for than it
names. On both stores: tests/integration/runs/test_kill_acks.py."""

from __future__ import annotations

from coordinator.admin_cli.render import kill_rows
from coordinator.model.orders import KillPush
from coordinator.runs.killswitch import push_bytes
from coordinator.servicers.worker_gateway import _message, _serialize
from coordinator.store import desktop as queries
from shared.gen.deskfleet.v1 import worker_pb2


def test_a_batch_keeps_one_row_per_change_and_the_earliest_reading() -> None:
    rows = queries.fresh_acks(
        [("k1", "w1", True, 3.0), ("k1", "w1", True, 1.0), ("k1", "w1", False, 2.0)]
    )
    assert sorted((r["engaged"], r["acked_at"]) for r in rows) == [(False, 2.0), (True, 1.0)]


def test_a_push_serialized_once_is_the_message_each_stream_got_before() -> None:
    push = KillPush("w1", "kill_1", True, "fleet", "", "maintenance: é")
    data = push_bytes(push)
    before = _message(push)
    assert isinstance(before, worker_pb2.CoordinatorMessage)
    assert worker_pb2.CoordinatorMessage.FromString(data) == before
    # The stream's serializer passes the bytes through and still encodes a message itself.
    assert _message(data) is data and _serialize(data) is data
    assert _serialize(before) == before.SerializeToString()


def test_kill_status_says_how_many_more_it_waits_for_than_it_names() -> None:
    shown = kill_rows(
        [
            {"id": "kill_1", "scope": "fleet", "acknowledgedCount": 900, "unacknowledgedCount": 102}
            | {"unacknowledged": [f"w{i:03}" for i in range(100)]},
            {"id": "kill_2", "scope": "worker", "acknowledgedCount": 1, "unacknowledgedCount": 0},
        ]
    )
    assert "w099 (+2 more)" in shown and "900" in shown
    assert "more" not in shown.splitlines()[-1]
