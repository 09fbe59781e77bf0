"""One screenshot for an approver deciding a desktop request: no scope, no input, nothing kept.

The coordinator asks only for pending requests, on an admin's audited order. The worker still
refuses while any kill switch applies to it, its local one included: a person who stopped this
desktop may be at it, and the coordinator does not know of a local stop.
"""

from __future__ import annotations

from shared.gen.deskfleet.v1 import worker_pb2
from worker_agent.actions import ActionRefused
from worker_agent.desktop.screen import FORMATS, Screen, encode
from worker_agent.input_guard import InputGuard

# Tried in order until the image fits the coordinator's limit: lossless first.
ENCODINGS: tuple[tuple[str, int | None], ...] = (("png", None), ("jpeg", 80), ("jpeg", 50))


class ScreenPeeker:
    def __init__(self, screen: Screen, guard: InputGuard | None) -> None:
        self._screen = screen
        self._guard = guard

    def answer(self, order: worker_pb2.PeekScreenNow) -> worker_pb2.PeekResult:
        """The image, or why not (never raises: the coordinator is waiting for an answer)."""
        result = worker_pb2.PeekResult(peek_id=order.peek_id)
        why = self._stopped()
        if why:
            result.error, result.code = why, "kill_switch"
            return result
        try:
            geometry = self._screen.display(order.display)
            image = self._screen.grab(geometry)
        except ActionRefused as exc:
            result.error, result.code = str(exc), exc.code
            return result

        for fmt, quality in ENCODINGS:
            data = encode(image, fmt, quality)
            if len(data) <= order.max_bytes:
                result.media_type, result.data = FORMATS[fmt], data
                result.width, result.height = image.width, image.height
                return result
        result.error = (
            f"the {image.width}x{image.height} screen does not fit in {order.max_bytes} bytes"
            " even as a JPEG"
        )
        result.code = "too_large"
        return result

    def _stopped(self) -> str | None:
        return None if self._guard is None else self._guard.stopped()


NO_DESKTOP = "this worker runs without computer use (--no-computer-use): no screen to show"


def no_desktop(order: worker_pb2.PeekScreenNow) -> worker_pb2.PeekResult:
    return worker_pb2.PeekResult(peek_id=order.peek_id, error=NO_DESKTOP, code="no_display")
