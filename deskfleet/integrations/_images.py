"""Screenshots as a model is sent them: sized to its image limits, encoded, and (for a framework
whose computer tool has no text channel) carrying a line that says what was refused.

Pillow is a dependency of deskfleet itself, so these need no extra.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

MediaType = Literal["image/png", "image/jpeg"]

# Conservative limits every current Claude model accepts: a longer edge or more pixels is
# refused by the API (a computer toolset's screenshot is not scaled down for it) or silently
# shrunk by an older model, which then answers in pixels of an image it was never sent.
MAX_LONG_EDGE = 1568
MAX_PIXELS = 1_150_000
# The API's bound on one image, on its base64 form.
MAX_BASE64_BYTES = 5 * 1024 * 1024


def fitted_size(
    width: int, height: int, max_long_edge: int, max_pixels: int, *, grow: bool = False
) -> tuple[int, int]:
    """The largest (width, height) of the same aspect within both limits. Never larger than
    given unless `grow` (a zoomed crop is scaled up to the budget, so details are legible)."""
    if width <= 0 or height <= 0:
        raise ValueError(f"an image has a positive size, not {width}x{height}")
    scale = min(max_long_edge / max(width, height), math.sqrt(max_pixels / (width * height)))
    if not grow:
        scale = min(scale, 1.0)
    if scale == 1.0:
        return width, height
    # A side the limit binds comes out exact (3000 * 1568/3000 is 1567.99... in floats).
    fitted = max(1, math.floor(width * scale + 1e-6)), max(1, math.floor(height * scale + 1e-6))
    if not within(fitted, max_long_edge, max_pixels):
        fitted = max(1, fitted[0] - 1), max(1, fitted[1] - 1)
    return fitted


def within(size: tuple[int, int], max_long_edge: int, max_pixels: int) -> bool:
    width, height = size
    return max(width, height) <= max_long_edge and width * height <= max_pixels


def size_of(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def resized(data: bytes, size: tuple[int, int]) -> bytes:
    """The image at `size`, as PNG (the same bytes when it already has that size)."""
    with Image.open(io.BytesIO(data)) as image:
        if image.size == size:
            return data
        out = io.BytesIO()
        image.convert("RGB").resize(size, Image.Resampling.LANCZOS).save(out, "PNG")
        return out.getvalue()


def for_model(data: bytes) -> tuple[str, MediaType]:
    """Base64 of the image and its media type, re-encoded as JPEG when it is neither PNG nor
    JPEG, or when the PNG of a busy screen would pass the API's per-image bound."""
    with Image.open(io.BytesIO(data)) as image:
        kind = image.format
    encoded = base64.b64encode(data).decode("ascii")
    if kind in ("PNG", "JPEG") and len(encoded) <= MAX_BASE64_BYTES:
        return encoded, "image/png" if kind == "PNG" else "image/jpeg"
    for quality in (85, 70, 50):
        out = io.BytesIO()
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB").save(out, "JPEG", quality=quality)
        encoded = base64.b64encode(out.getvalue()).decode("ascii")
        if len(encoded) <= MAX_BASE64_BYTES:
            return encoded, "image/jpeg"
    raise ValueError("the screenshot does not fit the model's image size even as a JPEG")


NOTICE_BACKGROUND = (255, 240, 160)
NOTICE_INK = (0, 0, 0)
NOTICE_FONT_SIZE = 18


def with_notice(data: bytes, lines: Sequence[str]) -> bytes:
    """The screenshot with a strip added below it that holds `lines`: the screen's pixels and
    coordinates are untouched, and the model reads what happened to its actions."""
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont
    try:
        font = ImageFont.load_default(size=NOTICE_FONT_SIZE)
    except (OSError, TypeError):  # a Pillow built without FreeType has only the bitmap font
        font = ImageFont.load_default()
    with Image.open(io.BytesIO(data)) as screen:
        width = screen.width
        wrapped = [part for line in lines for part in _wrap(line, font, width - 16)]
        line_height = NOTICE_FONT_SIZE + 6
        strip = 10 + line_height * len(wrapped)
        canvas = Image.new("RGB", (width, screen.height + strip), NOTICE_BACKGROUND)
        canvas.paste(screen.convert("RGB"), (0, 0))
    draw = ImageDraw.Draw(canvas)
    y = canvas.height - strip + 5
    for line in wrapped:
        draw.text((8, y), line, fill=NOTICE_INK, font=font)
        y += line_height
    out = io.BytesIO()
    canvas.save(out, "PNG")
    return out.getvalue()


def blank(size: tuple[int, int]) -> bytes:
    """A plain image of `size`, for when no screenshot could be taken."""
    out = io.BytesIO()
    Image.new("RGB", size, (255, 255, 255)).save(out, "PNG")
    return out.getvalue()


def _wrap(line: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int) -> list[str]:
    words, rows, row = line.split(), [], ""
    for word in words:
        candidate = f"{row} {word}".strip()
        if row and font.getlength(candidate) > width:
            rows.append(row)
            row = word
        else:
            row = candidate
    return [*rows, row] if row else rows
