"""Displays, coordinate spaces and screenshots: mss to capture, pillow to scale and encode."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from PIL import Image

from shared.desktop_scope import INVALID_ARGUMENT, NO_DISPLAY, scale
from worker_agent.actions import ActionRefused, Artifact

FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
DEFAULT_QUALITY = 80


@dataclass(frozen=True)
class Space:
    """The picture size an agent sees; its coordinates are mapped to a display's pixels."""

    width: int
    height: int

    def describe(self) -> dict[str, int]:
        return {"width": self.width, "height": self.height}


@dataclass(frozen=True)
class DisplayGeometry:
    """One monitor as mss reports it: `left`/`top` place it in the root window."""

    index: int
    left: int
    top: int
    width: int
    height: int

    def describe(self) -> dict[str, int]:
        return {"index": self.index, "width": self.width, "height": self.height}

    def to_real(self, x: int, y: int, space: Space | None) -> tuple[int, int]:
        """A point in `space` (or real pixels) -> real pixels relative to this display."""
        if space is None:
            return x, y
        return scale(x, space.width, self.width), scale(y, space.height, self.height)

    def to_space(self, x: int, y: int, space: Space | None) -> tuple[int, int]:
        """Real pixels relative to this display -> the caller's space."""
        if space is None:
            return x, y
        return scale(x, self.width, space.width), scale(y, self.height, space.height)

    def to_root(self, x: int, y: int) -> tuple[int, int]:
        return self.left + x, self.top + y

    def from_root(self, x: int, y: int) -> tuple[int, int]:
        return x - self.left, y - self.top

    def contains(self, x: int, y: int) -> bool:
        """Whether a display-relative point is on this display."""
        return 0 <= x < self.width and 0 <= y < self.height


@dataclass(frozen=True)
class Pixels:
    """A grab as mss filled it: BGRX rows of `size` (width, height)."""

    raw: bytearray
    size: tuple[int, int]


@dataclass(frozen=True)
class Capture:
    artifact: Artifact
    capture_ms: float  # grab and conversion to an image
    encode_ms: float  # scaling and encoding


class Screen:
    """Captures displays. mss holds an X connection that one thread may use at a time, so
    each thread that captures gets its own instance."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[Any] = []

    def _mss(self) -> Any:
        grabber = getattr(self._local, "mss", None)
        if grabber is None:
            problem = display_problem()
            if problem:
                raise ActionRefused(problem, code=NO_DISPLAY)
            try:
                import mss

                grabber = mss.MSS()
            except Exception as exc:
                raise ActionRefused(
                    f"cannot open display {os.environ.get('DISPLAY', '')!r}: {_short(exc)}",
                    code=NO_DISPLAY,
                ) from exc
            self._local.mss = grabber
            with self._lock:
                self._opened.append(grabber)
        return grabber

    def displays(self) -> list[DisplayGeometry]:
        monitors = self._mss().monitors[1:]  # [0] is the union of all monitors
        return [
            DisplayGeometry(i, int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"]))
            for i, m in enumerate(monitors)
        ]

    def display(self, index: int) -> DisplayGeometry:
        """The display at `index`; ActionRefused if there is none."""
        found = self.displays()
        if not found:
            raise ActionRefused("the display reports no monitors", code=NO_DISPLAY)
        if index >= len(found):
            raise ActionRefused(
                f"'display' {index} does not exist: this machine has {len(found)} "
                f"(indexes 0..{len(found) - 1})",
                code=INVALID_ARGUMENT,
            )
        return found[index]

    def grab(
        self, geometry: DisplayGeometry, box: tuple[int, int, int, int] | None = None
    ) -> Image.Image:
        """The display, or the part `box` (x0, y0, x1, y1 in its real pixels, the far corner
        exclusive) of it: only that part is read from the X server."""
        pixels = self.grab_pixels(geometry, box)
        return to_image(pixels.raw, pixels.size)

    def grab_pixels(
        self, geometry: DisplayGeometry, box: tuple[int, int, int, int] | None = None
    ) -> Pixels:
        """As `grab`, before any conversion: what a watch compares to learn whether the
        screen changed, without paying for an image of a screen that did not."""
        x0, y0, x1, y1 = box if box is not None else (0, 0, geometry.width, geometry.height)
        region = {
            "left": geometry.left + x0,
            "top": geometry.top + y0,
            "width": x1 - x0,
            "height": y1 - y0,
        }
        try:
            raw = self._mss().grab(region)
        except ActionRefused:
            raise
        except Exception as exc:
            raise ActionRefused(f"cannot capture the display: {_short(exc)}", NO_DISPLAY) from exc
        return Pixels(raw.raw, (int(raw.size[0]), int(raw.size[1])))

    def capture(
        self,
        geometry: DisplayGeometry,
        space: Space | None = None,
        fmt: str = "png",
        quality: int | None = None,
    ) -> Capture:
        started = time.perf_counter()
        image = self.grab(geometry)
        grabbed = time.perf_counter()
        if space is not None and (space.width, space.height) != image.size:
            image = image.resize((space.width, space.height), Image.Resampling.BILINEAR)
        data = encode(image, fmt, quality)
        done = time.perf_counter()
        artifact = Artifact(FORMATS[fmt], data, image.width, image.height)
        return Capture(artifact, (grabbed - started) * 1000, (done - grabbed) * 1000)

    def capture_box(
        self,
        geometry: DisplayGeometry,
        box: tuple[int, int, int, int],
        fmt: str = "png",
        quality: int | None = None,
    ) -> Capture:
        """`zoom`: a part of the display at its real resolution, never scaled."""
        started = time.perf_counter()
        image = self.grab(geometry, box)
        grabbed = time.perf_counter()
        data = encode(image, fmt, quality)
        done = time.perf_counter()
        artifact = Artifact(FORMATS[fmt], data, image.width, image.height)
        return Capture(artifact, (grabbed - started) * 1000, (done - grabbed) * 1000)

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for grabber in opened:
            try:
                grabber.close()
            except Exception:
                pass  # a capture thread's connection that is already gone


def to_image(bgrx: bytes | bytearray | memoryview, size: tuple[int, int]) -> Image.Image:
    """mss's pixels (BGRX rows) as an RGB image: one conversion straight from the buffer mss
    filled (its `bgra` property would copy the whole frame to `bytes` first)."""
    return Image.frombytes("RGB", size, bgrx, "raw", "BGRX")


def encode(image: Image.Image, fmt: str, quality: int | None = None) -> bytes:
    out = io.BytesIO()
    if fmt == "png":
        # Level 1 is half the time of the default for ~3x the bytes of a sparse screen;
        # screenshots are latency-bound (MACHINE-NOTES: 52 vs 106 ms at 1280x800).
        image.save(out, format="PNG", compress_level=1)
    elif fmt == "jpeg":
        image.save(out, format="JPEG", quality=quality or DEFAULT_QUALITY)
    else:
        # method 0 encodes ~3x faster than the default 4 for a little more size.
        image.save(out, format="WEBP", quality=quality or DEFAULT_QUALITY, method=0)
    return out.getvalue()


def display_problem() -> str | None:
    """Why there cannot be a display here, found without connecting; None if there may be."""
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        if os.environ.get("WAYLAND_DISPLAY"):
            return "no X display: Wayland without DISPLAY (XWayland) is not supported"
        return "no display: DISPLAY is not set, so there is no screen to capture or control"
    return None


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
