"""Peeks at a requested screen, in-process: what the coordinator accepts from a worker (which
may be hostile), which answers it takes, and what the worker refuses before capturing."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from coordinator.runs.desktop.peeks import MAX_BYTES, PeekAnswer, Peeks, _checked
from coordinator.store.models import ApprovalRow
from shared.errors import FailedPreconditionError, UnavailableError
from shared.gen.deskfleet.v1 import worker_pb2
from worker_agent.desktop.peek import ScreenPeeker, no_desktop
from worker_agent.desktop.screen import Screen
from worker_agent.input_guard import InputGuard, Kill

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def _approval() -> ApprovalRow:
    return ApprovalRow(id="apr_1", run_id="run_1", worker_id="wrk_1", status="pending")


def _answer(**fields: Any) -> PeekAnswer:
    base: dict[str, Any] = {
        "peek_id": "pk_1",
        "media_type": "image/png",
        "data": PNG,
        "width": 1280,
        "height": 800,
    }
    return PeekAnswer(**(base | fields))


def test_a_worker_answer_is_taken_only_as_a_png_or_jpeg_of_bounded_size() -> None:
    peek = _checked(_answer(), _approval(), 0)
    assert (peek.width, peek.height, peek.media_type) == (1280, 800, "image/png")
    refused = {
        "html posing as an image": _answer(media_type="image/png", data=b"<script>x</script>"),
        "another media type": _answer(media_type="image/svg+xml", data=b"<svg/>"),
        "over the limit": _answer(data=PNG + b"\0" * MAX_BYTES),
        "no size": _answer(width=0),
        "an absurd size": _answer(height=10**6),
    }
    for what, answer in refused.items():
        with pytest.raises(FailedPreconditionError, match="worker wrk_1 sent"):
            _checked(answer, _approval(), 0)
            pytest.fail(f"{what}: accepted")


def test_a_worker_refusal_becomes_one_line_naming_the_display() -> None:
    gone = _answer(error="'display' 2 does not exist: this machine has 1", code="invalid_argument")
    with pytest.raises(FailedPreconditionError, match="display 2 is gone from worker wrk_1"):
        _checked(gone, _approval(), 2)
    stopped = _answer(error="kill switch k1 (fleet) is engaged", code="kill_switch")
    with pytest.raises(FailedPreconditionError, match="wrk_1 refused the peek: kill switch"):
        _checked(stopped, _approval(), 0)


async def test_an_answer_counts_only_from_the_worker_asked() -> None:
    peeks = Peeks(db=None, presence=None, replica="r1")  # type: ignore[arg-type]
    asked: asyncio.Future[PeekAnswer] = asyncio.get_running_loop().create_future()
    peeks._waiting["pk_1"] = ("wrk_1", asked)
    peeks.on_answer("wrk_2", _answer())  # another worker cannot answer for it
    peeks.on_answer("wrk_1", _answer(peek_id="pk_other"))  # nor an unasked peek land
    assert not asked.done()
    peeks.on_answer("wrk_1", _answer())
    assert asked.result().peek_id == "pk_1"
    other: asyncio.Future[PeekAnswer] = asyncio.get_running_loop().create_future()
    peeks._waiting["pk_2"] = ("wrk_1", other)
    peeks.on_disconnect("wrk_1")
    with pytest.raises(UnavailableError, match="went offline before it answered"):
        other.result()


def test_the_worker_refuses_under_a_kill_switch_before_capturing(tmp_path: Path) -> None:
    class NoCapture(Screen):
        def display(self, index: int) -> Any:
            raise AssertionError("captured under a kill switch")

    guard = InputGuard(tmp_path)
    peeker = ScreenPeeker(NoCapture(), guard)
    order = worker_pb2.PeekScreenNow(peek_id="pk_1", display=0, max_bytes=MAX_BYTES)
    guard.apply(Kill("k1", "run", "run_9", "stop"), True)
    result = peeker.answer(order)
    assert (result.code, result.data) == ("kill_switch", b"")
    assert "kill switch k1 (run) is engaged" in result.error
    guard.apply(Kill("k1", "run", "run_9", "stop"), False)
    guard.engage_local("a person took the machine")
    result = peeker.answer(order)
    assert result.code == "kill_switch" and "local kill switch" in result.error
    no = no_desktop(order)
    assert no.code == "no_display" and "--no-computer-use" in no.error


def test_the_worker_falls_back_to_jpeg_when_png_is_too_large(tmp_path: Path) -> None:
    # One noisy frame for every grab: PNG cannot shrink it much, and the two answers below
    # must be of the same screen (a new noise per grab made PNG fit by chance).
    frame = Image.effect_noise((640, 400), 128).convert("RGB")

    class Noise(Screen):
        def display(self, index: int) -> Any:
            return object()

        def grab(self, geometry: Any) -> Image.Image:
            return frame.copy()

    order = worker_pb2.PeekScreenNow(peek_id="pk_1", display=0, max_bytes=MAX_BYTES)
    png = ScreenPeeker(Noise(), InputGuard(tmp_path)).answer(order)
    assert png.media_type == "image/png" and (png.width, png.height) == (640, 400)
    order.max_bytes = len(png.data) - 1
    jpeg = ScreenPeeker(Noise(), InputGuard(tmp_path)).answer(order)
    assert jpeg.media_type == "image/jpeg" and len(jpeg.data) <= order.max_bytes
    with Image.open(io.BytesIO(jpeg.data)) as decoded:
        assert decoded.size == (640, 400)
    order.max_bytes = 100
    small = ScreenPeeker(Noise(), InputGuard(tmp_path)).answer(order)
    assert small.code == "too_large" and not small.data
