"""A takeover page's input, as the console takes it from a browser: one JSON body of at most
MAX_BODY bytes, `{"events": [...]}` with at most MAX_EVENTS events, each of a kind and with the
fields `HumanEvent` has (desktop.proto), or refused in one line before anything is sent.

The console checks the shape only, so that a hostile page's body never becomes a call; what
may run (whose takeover, a kill switch, the display's size, which keys exist) is decided by the
coordinator and the worker, which check every event again.
"""

from __future__ import annotations

import json
from typing import Any

from shared.gen.deskfleet.v1 import desktop_pb2

MAX_BODY = 64 * 1024  # bytes of one input POST: 64 events of typed text fit with room to spare
MAX_EVENTS = 64  # per POST, as SendInput takes them
MAX_TEXT = 2000  # characters of one `type` event
MAX_KEY = 100  # characters of one `key` combo ("ctrl+shift+Tab")
MAX_PIXEL = 32767  # a display's pixel, either axis
MAX_SCROLL = 100  # clicks of one scroll, either way
KINDS = ("move", "down", "up", "click", "scroll", "key", "type")
BUTTONS = ("left", "middle", "right")
# The fields each kind carries; any other field is refused (a typo is not silently dropped).
FIELDS: dict[str, frozenset[str]] = {
    "move": frozenset({"x", "y"}),
    "down": frozenset({"x", "y", "button"}),
    "up": frozenset({"x", "y", "button"}),
    "click": frozenset({"x", "y", "button"}),
    "scroll": frozenset({"x", "y", "dx", "dy"}),
    "key": frozenset({"key"}),
    "type": frozenset({"text"}),
}


class InputRefused(Exception):
    """A body the console refuses: the HTTP status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_body(body: bytes, content_type: str) -> list[desktop_pb2.HumanEvent]:
    """The events of one input POST, checked; InputRefused names the first problem."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise InputRefused(400, "input: the body must be application/json")
    if len(body) > MAX_BODY:
        raise InputRefused(413, f"input: a body is at most {MAX_BODY} bytes")
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InputRefused(400, "input: the body is not JSON") from None
    if not isinstance(doc, dict) or set(doc) != {"events"}:
        raise InputRefused(400, 'input: the body is {"events": [...]} and nothing else')
    events = doc["events"]
    if not isinstance(events, list):
        raise InputRefused(400, "input: events must be a list")
    if len(events) > MAX_EVENTS:
        raise InputRefused(400, f"input: at most {MAX_EVENTS} events per request")
    return [_event(i, e) for i, e in enumerate(events)]


def _event(index: int, raw: Any) -> desktop_pb2.HumanEvent:
    where = f"input: events[{index}]"
    if not isinstance(raw, dict):
        raise InputRefused(400, f"{where} must be an object")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise InputRefused(400, f"{where}.kind must be one of {', '.join(KINDS)}")
    extra = set(raw) - FIELDS[kind] - {"kind"}
    if extra:
        shown = ", ".join(sorted(repr(str(k)[:40]) for k in extra)[:3])
        raise InputRefused(400, f"{where}: a {kind} event has no field {shown}")
    event = desktop_pb2.HumanEvent(kind=kind)
    if "x" in FIELDS[kind]:
        event.x = _int(raw, "x", where, 0, MAX_PIXEL)
        event.y = _int(raw, "y", where, 0, MAX_PIXEL)
    if "button" in FIELDS[kind]:
        button = raw.get("button", "left")
        if button not in BUTTONS:
            raise InputRefused(400, f"{where}.button must be one of {', '.join(BUTTONS)}")
        event.button = button
    if kind == "scroll":
        event.dx = _int(raw, "dx", where, -MAX_SCROLL, MAX_SCROLL, default=0)
        event.dy = _int(raw, "dy", where, -MAX_SCROLL, MAX_SCROLL, default=0)
        if not (event.dx or event.dy):
            raise InputRefused(400, f"{where}: a scroll moves dx or dy clicks, not none")
    if kind == "key":
        event.key = _text(raw, "key", where, MAX_KEY)
    if kind == "type":
        event.text = _text(raw, "text", where, MAX_TEXT)
    return event


def _int(raw: dict[str, Any], name: str, where: str, low: int, high: int, **kw: int) -> int:
    value = raw.get(name, kw.get("default"))
    # bool is an int to Python, not to a browser: `true` is not a pixel.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InputRefused(400, f"{where}.{name} must be a whole number in {low}..{high}")
    return value


def _text(raw: dict[str, Any], name: str, where: str, most: int) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value:
        raise InputRefused(400, f"{where}.{name} must be a non-empty string")
    if len(value) > most:
        raise InputRefused(400, f"{where}.{name} is at most {most} characters")
    if "\x00" in value:
        raise InputRefused(400, f"{where}.{name} must not contain NUL")
    return value
