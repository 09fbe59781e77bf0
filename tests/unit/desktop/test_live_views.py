"""Live views on the coordinator, in process: one worker feed per display for every viewer, the
newest frame never lost to a slow viewer, and what a (possibly hostile) worker may send."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from PIL import Image

from coordinator.runs.desktop.takeovers import HumanEvent, checked_events
from coordinator.runs.desktop.watches import MAX_FRAME_BYTES, Frame, Watches, WatchOrder
from shared.errors import (
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from shared.gen.deskfleet.v1 import worker_pb2


def _jpeg(shade: int = 0) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 40), (shade, shade, shade)).save(out, "JPEG")
    return out.getvalue()


class Stream:
    """The one thing Watches asks of presence: put an order on a worker's stream."""

    def __init__(self, online: set[str]) -> None:
        self.online = online
        self.orders: list[WatchOrder] = []

    def send(self, worker_id: str, order: Any) -> Any:
        from coordinator.streams.presence import Sent

        if worker_id not in self.online:
            return Sent.NOT_HERE
        self.orders.append(order)
        return Sent.SENT


def _watches(*online: str) -> tuple[Watches, Stream]:
    stream = Stream(set(online))
    return Watches(db=None, presence=stream, replica="r1"), stream  # type: ignore[arg-type]


def _frame(w: Watches, worker: str, watch_id: str, data: bytes | None = None, **kw: Any) -> str:
    fields: dict[str, Any] = {
        "media_type": "image/jpeg",
        "data": _jpeg() if data is None else data,
        "width": 64,
        "height": 40,
        "captured_at": 1.0,
    }
    return w.on_frame(worker, watch_id, **(fields | kw))


async def test_viewers_of_one_display_share_one_feed_and_a_new_one_gets_the_latest_frame() -> None:
    w, stream = _watches("wrk_1")
    first: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    second: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    leave_first = w.subscribe("wrk_1", 0, first)
    (order,) = stream.orders
    assert (order.display, order.max_fps, order.stop) == (0, 10.0, False)
    assert _frame(w, "wrk_1", order.watch_id) == ""
    leave_second = w.subscribe("wrk_1", 0, second)
    assert len(stream.orders) == 1, "a second viewer must not start a second feed"
    got = second.get_nowait()
    assert isinstance(got, Frame) and got.seq == 1 and got.worker_id == "wrk_1"
    leave_first()
    assert len(stream.orders) == 1, "the feed stops only when its last viewer leaves"
    leave_second()
    assert stream.orders[-1].stop and stream.orders[-1].watch_id == order.watch_id


async def test_a_slow_viewer_loses_old_frames_never_the_newest() -> None:
    w, stream = _watches("wrk_1")
    queue: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, queue)
    watch_id = stream.orders[0].watch_id
    for shade in range(10):
        _frame(w, "wrk_1", watch_id, _jpeg(shade * 20))
    seqs = [queue.get_nowait().seq for _ in range(queue.qsize())]  # type: ignore[union-attr]
    assert seqs == [9, 10]


async def test_a_frame_is_taken_only_from_the_worker_asked_and_only_as_a_bounded_jpeg() -> None:
    w, stream = _watches("wrk_1", "wrk_2")
    queue: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, queue)
    watch_id = stream.orders[0].watch_id
    assert _frame(w, "wrk_2", watch_id) == ""  # another worker's frame for it: dropped
    assert _frame(w, "wrk_1", "wt_unknown") == ""  # a watch nobody asked for: dropped
    assert queue.empty()
    refused = {
        "html posing as a jpeg": {"data": b"<script>alert(1)</script>"},
        "a png": {"media_type": "image/png"},
        "over the limit": {"data": _jpeg() + b"\0" * MAX_FRAME_BYTES},
        "no size": {"width": 0},
        "an absurd size": {"height": 10**6},
    }
    for what, bad in refused.items():
        q: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
        w.subscribe("wrk_1", 1, q)
        bad_id = stream.orders[-1].watch_id
        assert _frame(w, "wrk_1", bad_id, **bad), f"{what}: accepted"
        ended = q.get_nowait()
        assert isinstance(ended, FailedPreconditionError), what
        assert "worker wrk_1 sent" in str(ended)


async def test_a_workers_refusal_or_disconnect_ends_every_viewer_with_one_line() -> None:
    w, stream = _watches("wrk_1")
    queue: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, queue)
    _frame(
        w,
        "wrk_1",
        stream.orders[0].watch_id,
        error="kill switch k1 (fleet) is engaged",
        code="kill_switch",
    )
    ended = queue.get_nowait()
    assert isinstance(ended, FailedPreconditionError)
    assert "kill switch k1" in str(ended) and "live view of wrk_1 ended" in str(ended)
    other: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, other)  # a new feed: the ended one is gone
    w.on_disconnect("wrk_1")
    gone = other.get_nowait()
    assert isinstance(gone, UnavailableError) and "went offline" in str(gone)
    with pytest.raises(UnavailableError, match="offline"):
        w.subscribe("wrk_9", 0, asyncio.Queue())


def test_viewer_limits_per_session_principal_and_worker() -> None:
    from coordinator.model.identity import Principal, Role

    w, _ = _watches("wrk_1")
    ann = Principal("usr_1", "ann", Role.OWNER)  # type: ignore[call-arg]
    w._clients[("usr_1", "s1")] = 2
    with pytest.raises(ResourceExhaustedError, match="this session already watches 2"):
        w._admit(ann, "s1", "wrk_1")
    w._admit(ann, "s2", "wrk_1")  # another session of hers may
    w._workers["wrk_1"] = 16
    with pytest.raises(ResourceExhaustedError, match="already has 16 viewers"):
        w._admit(ann, "s2", "wrk_1")


def test_a_persons_events_are_checked_before_any_is_sent() -> None:
    checked_events([HumanEvent("move", 10, 10), HumanEvent("type", text="hi")])
    bad = {
        "unknown kind": [HumanEvent("teleport")],
        "too many": [HumanEvent("move")] * 65,
        "off the display": [HumanEvent("click", -1, 5)],
        "a button": [HumanEvent("click", 1, 1, button="fourth")],
        "a huge scroll": [HumanEvent("scroll", dy=10_000)],
        "a NUL": [HumanEvent("type", text="a\x00b")],
        "empty text": [HumanEvent("type")],
        "no key": [HumanEvent("key")],
        "too much text in all": [HumanEvent("type", text="a" * 1500)] * 2,
    }
    for what, events in bad.items():
        with pytest.raises(InvalidArgumentError):
            checked_events(events)
            pytest.fail(f"{what}: accepted")


def test_the_order_reaches_the_worker_as_its_proto() -> None:
    from coordinator.servicers.worker_gateway import _message

    msg = _message(WatchOrder("wrk_1", "wt_1", 1, 10.0, 70, 1024))
    assert msg.WhichOneof("body") == "watch"
    assert msg.watch == worker_pb2.WatchScreenNow(
        watch_id="wt_1", display=1, max_fps=10.0, quality=70, max_bytes=1024
    )


async def test_the_recorder_joins_a_running_feed_or_asks_for_one_at_its_own_rate() -> None:
    w, stream = _watches("wrk_1")
    alone: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    leave = w.subscribe("wrk_1", 0, alone, 2.0, any_rate=True)
    assert [o.max_fps for o in stream.orders] == [2.0], "no viewer: the recorder's own rate"
    leave()
    viewer: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, viewer)  # a viewer's feed at 10 frames a second
    recorder: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
    w.subscribe("wrk_1", 0, recorder, 2.0, any_rate=True)
    started = [o for o in stream.orders if not o.stop]
    assert [o.max_fps for o in started] == [2.0, 10.0], "the recorder shares the viewer's feed"
