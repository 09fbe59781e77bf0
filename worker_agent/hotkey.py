"""The local kill switch's hotkey on X11: a person at the desk presses it to stop all input.

The key is grabbed on the root window, so it reaches us whichever window has focus, and the
application under the agent never sees it. Where there is no X display (macOS, Windows,
Wayland) the signal and the file remain the local kill switches.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from worker_agent import x_authority

log = logging.getLogger("deskfleet.worker")

DEFAULT_HOTKEY = "ctrl+alt+shift+k"
_MODIFIERS = {"ctrl": "ControlMask", "alt": "Mod1Mask", "shift": "ShiftMask", "super": "Mod4Mask"}
# NumLock (Mod2) and CapsLock (Lock) would otherwise make the grab miss the key.
_IGNORED = ("", "LockMask", "Mod2Mask", "LockMask|Mod2Mask")


def parse(combo: str) -> tuple[list[str], str]:
    """`ctrl+alt+shift+k` -> (modifier mask names, key name); ValueError when malformed."""
    *mods, key = [p.strip().lower() for p in combo.split("+")]
    unknown = [m for m in mods if m not in _MODIFIERS]
    if not key or unknown or not mods:
        raise ValueError(
            f"kill hotkey {combo!r}: modifiers ({'/'.join(_MODIFIERS)}) then one key, e.g."
            f" {DEFAULT_HOTKEY}"
        )
    return [_MODIFIERS[m] for m in mods], key


def listen(combo: str, on_press: Callable[[], None]) -> str | None:
    """Grab the hotkey in a daemon thread; returns why not (no X display, key taken), or None."""
    if not os.environ.get("DISPLAY"):
        return "no X display"
    try:
        from Xlib import XK, X, error  # type: ignore[import-untyped]
        from Xlib.display import Display  # type: ignore[import-untyped]
    except ImportError as exc:
        return f"python-xlib is not available ({exc})"
    masks, key = parse(combo)
    x_authority.allow_missing_file()
    try:
        display = Display()
    except Exception as exc:  # Xlib raises its own error types and plain ones
        return f"cannot open the display ({exc})"
    keysym = XK.string_to_keysym(key)
    keycode = display.keysym_to_keycode(keysym) if keysym else 0
    if not keycode:
        display.close()
        return f"the key {key!r} is not on this keyboard"
    mask = 0
    for name in masks:
        mask |= getattr(X, name)
    root = display.screen().root
    caught = error.CatchError(error.BadAccess)
    for extra in _IGNORED:
        extra_mask = 0
        for name in filter(None, extra.split("|")):
            extra_mask |= getattr(X, name)
        root.grab_key(
            keycode, mask | extra_mask, True, X.GrabModeAsync, X.GrabModeAsync, onerror=caught
        )
    display.sync()
    if caught.get_error():
        display.close()
        return f"{combo} is already grabbed by another program"

    def loop() -> None:
        while True:
            event = display.next_event()
            if event.type == X.KeyPress and event.detail == keycode:
                log.warning("kill hotkey %s pressed: desktop input stops", combo)
                on_press()

    threading.Thread(target=loop, name="kill-hotkey", daemon=True).start()
    return None
