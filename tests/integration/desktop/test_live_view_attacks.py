"""Live views and takeovers under attack, on a real coordinator with hand-driven desktop workers
(`tests/harness/raw_worker.py`): what another owner, a hostile worker or a direct gRPC caller
can make `WatchScreen`, `TakeOver`, `SendInput` and `HandBack` do.

The worker here is the test's: it answers watch orders with frames of its choosing and input
orders with results of its choosing, so what the coordinator takes from a worker is checked
without a display (the real worker's side: tests/e2e/desktop/test_live_view.py).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from PIL import Image

from shared.gen.deskfleet.v1 import (
    desktop_pb2,
    desktop_pb2_grpc,
    runs_pb2,
    runs_pb2_grpc,
    worker_pb2,
)
from tests.harness import CoordinatorProcess
from tests.harness.desktop_goals import DESKTOP, new_owner
from tests.harness.raw_worker import RawWorker

# About 35 s of coordinator and worker starts, with the other live-view modules in the slow
# suite (CI runs it); the rules' in-process tests stay in make test (tests/unit/desktop/).
pytestmark = pytest.mark.slow

OWNER_DESK = replace(DESKTOP, owner_takeover=True)


@pytest.fixture(scope="module")
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def raw(coordinator: CoordinatorProcess) -> Iterator[list[RawWorker]]:
    made: list[RawWorker] = []
    yield made
    for worker in made:
        worker.close()


def _worker(coordinator: CoordinatorProcess, made: list[RawWorker], name: str) -> RawWorker:
    worker = RawWorker(coordinator, f"{name}-{time.monotonic_ns() % 10**9}")
    worker.connect(OWNER_DESK)
    made.append(worker)
    return worker


def _stubs(c: CoordinatorProcess) -> tuple[Any, Any]:
    channel = c.channel()
    assert channel is not None
    return desktop_pb2_grpc.DesktopServiceStub(channel), runs_pb2_grpc.RunServiceStub(channel)


def _jpeg(shade: int = 90) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 40), (shade, shade, shade)).save(out, "JPEG")
    return out.getvalue()


def _held_run(c: CoordinatorProcess, worker: RawWorker, owner: Path) -> str:
    """A desktop run of `owner`'s, approved, holding the raw worker's desktop."""
    run = c.cli_json(
        "desktop", "request", "--worker", worker.worker_id, "--reason", "attack",
        "--action=type", "--action=screenshot", token_file=owner,
    )  # fmt: skip
    pending = c.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run["id"]]
    c.cli_json("approvals", "approve", mine["id"])
    run_id: str = run["id"]
    return run_id


def _answer_watches(worker: RawWorker, stop: threading.Event, frames: int = 1) -> threading.Thread:
    """Answer each watch order with `frames` good frames (a worker that behaves)."""

    def serve() -> None:
        while not stop.is_set():
            try:
                order = worker.expect("watch", timeout=0.5).watch
            except TimeoutError:
                continue
            except (EOFError, grpc.RpcError):  # the stream ended with the test
                return
            if order.stop:
                continue
            for seq in range(1, frames + 1):
                worker.send(
                    frame=worker_pb2.ScreenFrame(
                        watch_id=order.watch_id, seq=seq, media_type="image/jpeg",
                        data=_jpeg(seq * 20), width=64, height=40, captured_at=time.time(),
                    )
                )  # fmt: skip

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _watch(stub: Any, md: Any, **target: Any) -> Any:
    return stub.WatchScreen(desktop_pb2.WatchScreenRequest(**target), metadata=md, timeout=60)


def _type(text: str) -> list[desktop_pb2.HumanEvent]:
    return [desktop_pb2.HumanEvent(kind="type", text=text)]


def test_an_owners_takeover_ends_with_their_run_no_input_of_theirs_reaches_the_desktop(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    """An owner takes over only a run of theirs that holds a desktop: once that run is
    cancelled the desktop is no longer theirs, and their takeover must not go on sending input
    to it (a watch by the same owner ends within seconds of the run letting go)."""
    stub, runs = _stubs(coordinator)
    desk = _worker(coordinator, raw, "owner-tk")
    ann = new_owner(coordinator, "ann-tk-ends")
    md = coordinator.admin_metadata(ann)
    run_id = _held_run(coordinator, desk, ann)
    took = stub.TakeOver(desktop_pb2.TakeOverRequest(run=run_id), metadata=md, timeout=30)
    assert took.status == "active" and took.run_id == run_id
    runs.CancelRun(runs_pb2.RunRef(id=run_id), metadata=md, timeout=30)

    answered = threading.Event()

    def answer() -> None:
        # A worker that runs whatever it is sent, as the real one does for an owner's input
        # where --allow-owner-takeover is on.
        try:
            order = desk.expect("human_input", timeout=15).human_input
        except (TimeoutError, EOFError):
            return
        answered.set()
        desk.send(
            input_result=worker_pb2.HumanInputResult(
                input_id=order.input_id, applied=len(order.events)
            )
        )

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with pytest.raises(grpc.RpcError) as refused:
        stub.SendInput(
            desktop_pb2.SendInputRequest(takeover=took.id, events=_type("after my run ended")),
            metadata=md,
            timeout=30,
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert run_id in (refused.value.details() or "")
    thread.join(16)
    assert not answered.is_set(), "the owner's input reached the desktop after the run ended"
    # The person can still give it back (a worker is never left taken over by a dead run).
    back = stub.HandBack(desktop_pb2.HandBackRequest(takeover=took.id), metadata=md, timeout=30)
    assert back.status == "handed_back"


def test_another_owner_cannot_take_over_send_to_or_hand_back_a_takeover_not_theirs(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "other-tk")
    ann = new_owner(coordinator, "ann-tk-other")
    bob = new_owner(coordinator, "bob-tk-other")
    ann_md, bob_md = coordinator.admin_metadata(ann), coordinator.admin_metadata(bob)
    run_id = _held_run(coordinator, desk, ann)
    try:
        for target, code in (
            ({"run": run_id}, grpc.StatusCode.NOT_FOUND),
            ({"worker": desk.worker_id}, grpc.StatusCode.PERMISSION_DENIED),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.TakeOver(desktop_pb2.TakeOverRequest(**target), metadata=bob_md, timeout=30)
            assert refused.value.code() == code, target
        took = stub.TakeOver(desktop_pb2.TakeOverRequest(run=run_id), metadata=ann_md, timeout=30)
        asks: list[tuple[str, Any]] = [
            ("SendInput", desktop_pb2.SendInputRequest(takeover=took.id, events=_type("bob"))),
            ("HandBack", desktop_pb2.HandBackRequest(takeover=took.id)),
            ("HandBack", desktop_pb2.HandBackRequest(worker=desk.worker_id)),
        ]
        for method, request in asks:
            with pytest.raises(grpc.RpcError) as refused:
                getattr(stub, method)(request, metadata=bob_md, timeout=30)
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(TimeoutError):
            desk.expect("human_input", timeout=1)
        # A second takeover of a taken-over desktop is refused, the first one's holder's too.
        with pytest.raises(grpc.RpcError) as twice:
            stub.TakeOver(desktop_pb2.TakeOverRequest(run=run_id), metadata=ann_md, timeout=30)
        assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        stub.HandBack(desktop_pb2.HandBackRequest(takeover=took.id), metadata=ann_md, timeout=30)
        with pytest.raises(grpc.RpcError) as again:
            stub.HandBack(
                desktop_pb2.HandBackRequest(takeover=took.id), metadata=ann_md, timeout=30
            )
        assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        coordinator.cli("runs", "cancel", run_id, token_file=ann, check=False)


def test_an_input_result_from_another_worker_is_ignored_and_silence_times_out(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    """A hostile worker answering another worker's input id changes nothing; a worker that
    never answers leaves SendInput UNAVAILABLE after its timeout, not hanging."""
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "silent-desk")
    liar = _worker(coordinator, raw, "liar-desk")
    took = stub.TakeOver(
        desktop_pb2.TakeOverRequest(worker=desk.worker_id),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    try:
        result: dict[str, Any] = {}

        def send() -> None:
            started = time.monotonic()
            try:
                stub.SendInput(
                    desktop_pb2.SendInputRequest(takeover=took.id, events=_type("x")),
                    metadata=coordinator.admin_metadata(),
                    timeout=60,
                )
                result["ok"] = True
            except grpc.RpcError as exc:
                result["code"] = exc.code()
            result["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        order = desk.expect("human_input", timeout=15).human_input
        liar.send(input_result=worker_pb2.HumanInputResult(input_id=order.input_id, applied=64))
        thread.join(30)
        assert not thread.is_alive(), "SendInput hung on a worker that never answers"
        assert result.get("code") == grpc.StatusCode.UNAVAILABLE, result
        assert 8 <= result["seconds"] <= 20, result
        # The late answer of the right worker, after the timeout, is dropped too.
        desk.send(input_result=worker_pb2.HumanInputResult(input_id=order.input_id, applied=1))
    finally:
        stub.HandBack(
            desktop_pb2.HandBackRequest(takeover=took.id),
            metadata=coordinator.admin_metadata(),
            timeout=30,
        )
    got = coordinator.cli_json("audit")["entries"]
    [back] = [
        e
        for e in got
        if e["action"] == "desktop.handback" and e["detail"].get("takeover") == took.id
    ]
    assert back["detail"]["events"] == 0, "a liar's or a late answer counted events"


def test_a_frame_for_another_workers_watch_never_reaches_its_viewer(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "watched-desk")
    liar = _worker(coordinator, raw, "forger-desk")
    stream = _watch(stub, coordinator.admin_metadata(), worker=desk.worker_id)
    order = desk.expect("watch", timeout=15).watch
    forged = _jpeg(250)
    liar.send(
        frame=worker_pb2.ScreenFrame(
            watch_id=order.watch_id, seq=1, media_type="image/jpeg", data=forged,
            width=64, height=40, captured_at=time.time(),
        )
    )  # fmt: skip
    real = _jpeg(10)
    time.sleep(0.5)
    desk.send(
        frame=worker_pb2.ScreenFrame(
            watch_id=order.watch_id, seq=1, media_type="image/jpeg", data=real,
            width=64, height=40, captured_at=time.time(),
        )
    )  # fmt: skip
    first = next(stream)
    stream.cancel()
    assert first.seq == 1 and first.data == real and first.worker_id == desk.worker_id


@pytest.mark.parametrize(
    "frame",
    [
        {"media_type": "image/png", "data": b"\x89PNG\r\n\x1a\n" + b"0" * 100},
        {"media_type": "image/jpeg", "data": b"<html>not a jpeg</html>"},
        {"media_type": "image/jpeg", "data": b"\xff\xd8\xff" + b"\0" * (4 * 1024 * 1024 + 1)},
        {"media_type": "image/jpeg", "data": b"\xff\xd8\xff\xe0", "width": 0},
        {"media_type": "image/jpeg", "data": b"\xff\xd8\xff\xe0", "width": 10**6},
    ],
    ids=["png", "html", "over-4-MiB", "no-width", "a-million-wide"],
)
def test_a_worker_frame_that_is_not_a_sane_jpeg_ends_the_view_in_one_line(
    coordinator: CoordinatorProcess, raw: list[RawWorker], frame: dict[str, Any]
) -> None:
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "bad-frames")
    stream = _watch(stub, coordinator.admin_metadata(), worker=desk.worker_id)
    order = desk.expect("watch", timeout=15).watch
    fields = {"width": 64, "height": 40, **frame}
    desk.send(
        frame=worker_pb2.ScreenFrame(
            watch_id=order.watch_id, seq=1, captured_at=time.time(), **fields
        )
    )
    with pytest.raises(grpc.RpcError) as ended:
        next(stream)
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = ended.value.details() or ""
    assert desk.worker_id in details and "\n" not in details and len(details) < 400


def test_a_flood_of_frames_reaches_a_slow_viewer_as_the_newest_not_all_of_them(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    """A worker sending thousands of frames (far over the asked rate) does not queue them for
    a viewer that is not reading: when it reads, it gets the newest, the stream stays up."""
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "flood-desk")
    stream = _watch(stub, coordinator.admin_metadata(), worker=desk.worker_id)
    order = desk.expect("watch", timeout=15).watch
    big = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 1024 * 3  # ~768 KiB each
    for seq in range(1, 401):
        desk.send(
            frame=worker_pb2.ScreenFrame(
                watch_id=order.watch_id, seq=seq, media_type="image/jpeg",
                data=big + seq.to_bytes(4, "big"), width=64, height=40, captured_at=time.time(),
            )
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while not desk.all_sent() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    seen = []
    for message in stream:
        if message.seq:
            seen.append(int.from_bytes(message.data[-4:], "big"))
        if seen and seen[-1] == 400:
            break
    stream.cancel()
    assert seen[-1] == 400 and len(seen) < 50, f"the viewer was sent {len(seen)} of 400 frames"


def test_a_direct_caller_cannot_pass_the_per_person_viewer_limit_with_new_client_values(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "many-viewers")
    stop = threading.Event()
    _answer_watches(desk, stop)
    md = coordinator.admin_metadata()
    opened: list[Any] = []
    try:
        for n in range(8):
            stream = _watch(stub, md, worker=desk.worker_id, client=f"c{n}", quality=10 + n)
            assert next(stream).seq == 1
            opened.append(stream)
        with pytest.raises(grpc.RpcError) as refused:
            next(_watch(stub, md, worker=desk.worker_id, client="c-ninth"))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The same session's third viewer is refused, whatever the worker.
        with pytest.raises(grpc.RpcError):
            next(_watch(stub, md, worker=desk.worker_id, client="c0"))
    finally:
        stop.set()
        for stream in opened:
            stream.cancel()


def test_a_kill_switch_refuses_input_a_takeover_would_send_and_new_views(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    stub, _ = _stubs(coordinator)
    desk = _worker(coordinator, raw, "kill-desk")
    md = coordinator.admin_metadata()
    took = stub.TakeOver(
        desktop_pb2.TakeOverRequest(worker=desk.worker_id), metadata=md, timeout=30
    )
    coordinator.cli_json("kill", "engage", "--worker", desk.worker_id, "--reason", "red team")
    try:
        with pytest.raises(grpc.RpcError) as cut:
            stub.SendInput(
                desktop_pb2.SendInputRequest(takeover=took.id, events=_type("x")),
                metadata=md,
                timeout=30,
            )
        assert cut.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as view:
            next(_watch(stub, md, worker=desk.worker_id))
        assert view.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(TimeoutError):
            desk.expect("human_input", timeout=1)
    finally:
        coordinator.cli_json("kill", "release", "--worker", desk.worker_id)
        stub.HandBack(desktop_pb2.HandBackRequest(takeover=took.id), metadata=md, timeout=30)


def test_an_owners_view_ends_soon_after_their_run_stops_holding_the_desktop(
    coordinator: CoordinatorProcess, raw: list[RawWorker]
) -> None:
    stub, runs = _stubs(coordinator)
    desk = _worker(coordinator, raw, "owner-view")
    stop = threading.Event()
    _answer_watches(desk, stop)
    ann = new_owner(coordinator, "ann-view-ends")
    md = coordinator.admin_metadata(ann)
    run_id = _held_run(coordinator, desk, ann)
    try:
        # Views through the run and through the worker; the run is cancelled: both end within
        # a recheck and a keepalive.
        views = [_watch(stub, md, run=run_id), _watch(stub, md, worker=desk.worker_id)]
        for view in views:
            assert next(view).seq == 1
        runs.CancelRun(runs_pb2.RunRef(id=run_id), metadata=md, timeout=30)
        cancelled = time.monotonic()
        for view in views:
            with pytest.raises(grpc.RpcError) as ended:
                for _ in view:
                    pass
            # Through the run: it holds no desktop; through the worker: not an owner's now.
            assert ended.value.code() in (
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.PERMISSION_DENIED,
            ), ended.value
            assert time.monotonic() - cancelled < 15
    finally:
        stop.set()
