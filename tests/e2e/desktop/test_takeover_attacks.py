"""A takeover's input against a real worker on a real X display with a real xterm: what a person
holding the controls can still make the desktop do after they let go of them.

The xterm's shell appends what is typed into it to a file, so what reached the desktop, and
when, is read from that file.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, wait_until

pytestmark = pytest.mark.slow

XTERM_AT = (120, 90)  # inside the xterm (placed by its geometry; there is no window manager)


@pytest.fixture(scope="module")
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture(scope="module")
def typed(xvfb: Xvfb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which("xterm") is None:
        pytest.skip("xterm is not installed (scripts/setup.sh installs it)")
    out = tmp_path_factory.mktemp("xterm") / "typed.txt"
    out.write_text("")
    proc = subprocess.Popen(
        ["xterm", "-geometry", "60x12+0+0", "-e", "sh", "-c", f"stdbuf -oL cat >> {out}"],
        env=xvfb.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    assert proc.poll() is None, "xterm did not start"
    yield out
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def desk(
    module_workers: Any, xvfb: Xvfb, typed: Path, coordinator: CoordinatorProcess
) -> WorkerProcess:
    worker: WorkerProcess = module_workers("attack-desk", display_env=xvfb.env, browser=False)
    worker.wait_online()
    return worker


def test_no_input_of_a_takeover_reaches_the_desktop_after_it_is_handed_back(
    coordinator: CoordinatorProcess, desk: WorkerProcess, typed: Path
) -> None:
    channel = coordinator.channel()
    assert channel is not None
    stub = desktop_pb2_grpc.DesktopServiceStub(channel)
    md = coordinator.admin_metadata()
    took = stub.TakeOver(
        desktop_pb2.TakeOverRequest(worker=desk.worker_id), metadata=md, timeout=30
    )
    line = "x" * 99 + "\n"
    # The most text one call may carry (2,000 characters); a batch over it is refused whole.
    batch = [desktop_pb2.HumanEvent(kind="click", x=XTERM_AT[0], y=XTERM_AT[1])] + [
        desktop_pb2.HumanEvent(kind="type", text=line * 4) for _ in range(5)
    ]
    with pytest.raises(grpc.RpcError) as too_much:
        stub.SendInput(
            desktop_pb2.SendInputRequest(takeover=took.id, events=[*batch, batch[1]]),
            metadata=md,
            timeout=30,
        )
    assert too_much.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    answers: list[str] = []

    def send() -> None:
        try:
            done = stub.SendInput(
                desktop_pb2.SendInputRequest(takeover=took.id, events=batch),
                metadata=md,
                timeout=60,
            )
            answers.append(f"applied {done.applied}")
        except grpc.RpcError as exc:
            answers.append(f"{exc.code().name}: {exc.details()}")

    senders = [threading.Thread(target=send, daemon=True) for _ in range(4)]
    for thread in senders:
        thread.start()
    wait_until(lambda: typed.stat().st_size > 0, 15, 0.05, "the person's typing")
    stub.HandBack(desktop_pb2.HandBackRequest(takeover=took.id), metadata=md, timeout=30)
    time.sleep(1.0)  # a chunk typing as the hand back came in may finish
    at_hand_back = typed.stat().st_size
    time.sleep(4.0)
    later = typed.stat().st_size
    for thread in senders:
        thread.join(60)
    assert later == at_hand_back, (
        f"{later - at_hand_back} bytes were typed more than a second after the hand back;"
        f" SendInput said: {answers}"
    )
    # One batch at a time per desktop: those sent while one ran were refused, not queued
    # behind it (one sent after the hand back is refused as ended).
    assert any(a.startswith("applied") for a in answers), answers
    assert any(a.startswith("RESOURCE_EXHAUSTED") for a in answers), answers
    assert all(
        a.startswith(("applied", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION")) for a in answers
    ), answers
