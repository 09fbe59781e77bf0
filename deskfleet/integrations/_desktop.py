"""`FittedDesktop`: a desktop session as a model sees it. Every point and every screenshot is in
one coordinate space that fits the model's image limits: the session's own `space` when it has
one, else the display's real pixels when they fit, else a scaled space the worker maps to the
real screen (so a model answers in pixels of the image it was sent, and the click lands there).

The display's size is learnt from the first receipt (every receipt names it), so no action is
spent on finding it out; a screenshot taken before the space is known is scaled here once.
"""

from __future__ import annotations

from typing import Any

from deskfleet.desktop import DesktopSession
from deskfleet.errors import ActionFailedError
from deskfleet.integrations import _images
from deskfleet.types import ActResult

_UNBOUNDED = 1 << 40


class FittedDesktop:
    def __init__(
        self,
        session: DesktopSession,
        *,
        max_long_edge: int | None,
        max_pixels: int | None,
    ) -> None:
        self.session = session
        self._limits: tuple[int, int] | None = None
        if max_long_edge is not None or max_pixels is not None:  # one alone bounds alone
            self._limits = (max_long_edge or _UNBOUNDED, max_pixels or _UNBOUNDED)
        self.space: tuple[int, int] | None = session.space
        self.display: tuple[int, int] | None = None  # the display's real pixels, once seen
        self._decided = session.space is not None
        limits = self._limits
        if (
            session.space is not None
            and limits is not None
            and not _images.within(session.space, *limits)
        ):
            w, h = session.space
            raise ValueError(
                f"the session's space {w}x{h} is larger than the model's image limits"
                f" ({limits[0]} px on the long edge, {limits[1]} pixels): request the desktop"
                " with a smaller space, or none"
            )

    @property
    def size(self) -> tuple[int, int] | None:
        """The model's screen: the space, or the display's real pixels (None before either
        is known)."""
        return self.space or self.display

    async def act(self, action: str, **args: Any) -> ActResult:
        """One action in the model's space; the outcome, whatever it is."""
        if self.space is not None:
            args["space"] = {"width": self.space[0], "height": self.space[1]}
        done = await self.session.act(action, **args)
        self._learn(done)
        return done

    async def image(self, done: ActResult, *, grow: bool = False) -> bytes:
        """The PNG a screenshot or zoom receipt names, sized for the model (`grow`: a zoomed
        crop is scaled up to the limits as well as down)."""
        art = next((a for a in done.artifacts if a.role in ("screenshot", "zoom")), None)
        if art is None and done.artifacts:
            art = done.artifacts[-1]
        if art is None:
            raise ActionFailedError(
                f"{done.action}: the receipt names no image",
                action=done.action,
                status=done.status,
                reason="no_artifact",
                action_id=done.action_id,
            )
        data = await self.session.artifact(art.sha256)
        size = _images.size_of(data)
        target = size
        if done.action == "screenshot" and self.space is not None:
            target = self.space  # taken before the space was known: scaled here, once
        elif self._limits is not None:
            target = _images.fitted_size(*size, *self._limits, grow=grow)
        return _images.resized(data, target)

    def _learn(self, done: ActResult) -> None:
        shown = (done.result or {}).get("display")
        if not isinstance(shown, dict):
            return
        width, height = shown.get("width"), shown.get("height")
        if not isinstance(width, int) or not isinstance(height, int) or width <= 0 or height <= 0:
            return
        self.display = (width, height)
        if not self._decided:
            self._decided = True
            if self._limits is not None and not _images.within(self.display, *self._limits):
                self.space = _images.fitted_size(width, height, *self._limits)
