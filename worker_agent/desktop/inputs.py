"""Mouse and keyboard input, and whether a person is using the desktop too.

The pointer goes through pyautogui. The keyboard on X11 goes straight through XTest (with
python-xlib, which pyautogui itself uses): pyautogui's `write()` cannot type characters
outside the keyboard map, and `xdotool type --delay 0` loses or swaps them (measured on
Xvfb + Chromium: 2-4 of 11 non-ASCII characters wrong per sentence), because it rebinds one
spare keycode per character and the application re-reads the keymap after it has already
moved on. Here each character the keymap lacks gets its own spare keycode and keeps it for
the process, so the keymap does not change under typing that is still being processed.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from shared.desktop_scope import HELD_BUTTON_IDLE, HUMAN_ACTIVE, INVALID_ARGUMENT, NO_DISPLAY
from worker_agent import x_authority
from worker_agent.actions import ActionCancelled, ActionFailed, ActionRefused
from worker_agent.desktop.keys import KeyCombo
from worker_agent.desktop.screen import display_problem

# After binding a keysym to a spare keycode, give the application a moment to take the new
# keymap before the first key press that needs it.
BIND_SETTLE = 0.02
# Before rebinding a keycode that already typed something: its earlier presses may still be
# queued in the application, which would read them with the new binding.
REBIND_SETTLE = 0.15
DRAG_STEPS = 10
# Between the clicks of a double click. X timestamps are in milliseconds, and Chromium does
# not count a press with the same timestamp as the previous one as a repeat: with no pause,
# ~1 double click in 15 arrived as two single clicks (measured on Xvfb).
REPEAT_INTERVAL = 0.02
SHIFT = 0xFFE1  # the Shift_L keysym


def load_pyautogui() -> ModuleType:
    """pyautogui, imported only now (it raises at import without a display), set up for us."""
    problem = display_problem()
    if problem:
        raise ActionRefused(problem, code=NO_DISPLAY)
    try:
        x_authority.allow_missing_file()  # a plain `Xvfb :N` has no cookie file to read
        with library_leaks_ignored():
            import pyautogui
    except (Exception, SystemExit) as exc:  # mouseinfo calls sys.exit() without tkinter
        raise ActionRefused(
            f"cannot control display {os.environ.get('DISPLAY', '')!r}: {_short(exc)}",
            code=NO_DISPLAY,
        ) from exc
    pyautogui.PAUSE = 0  # its default sleeps 0.1 s after every call
    # The kill switch (coordinator, local signal and file) is our failsafe; pyautogui's
    # "pointer in a corner" failsafe would only fail legitimate clicks near the corners.
    pyautogui.FAILSAFE = False
    _close_import_leftovers()
    return pyautogui


# Modules imported with pyautogui that keep a `which` probe (open pipes) and an X connection
# in module globals for the life of the process.
_LEFTOVERS = ("pyscreeze", "mouseinfo", "pyautogui._pyautogui_x11")


def _close_import_leftovers() -> None:
    """Close the probes' pipes now, and the X connections at exit, so that a process that
    treats warnings as errors does not see ResourceWarnings that are not its own."""
    for name in _LEFTOVERS:
        probe = getattr(sys.modules.get(name), "whichProc", None)
        for pipe in (getattr(probe, "stdout", None), getattr(probe, "stderr", None)):
            if pipe is not None:
                pipe.close()
    atexit.unregister(_close_import_displays)  # once, however many sessions load it
    atexit.register(_close_import_displays)


def _close_import_displays() -> None:
    for name in _LEFTOVERS:
        connection = getattr(sys.modules.get(name), "_display", None)
        if connection is not None:
            try:
                connection.close()
            except Exception:
                pass  # the X server is already gone: nothing left to close


@contextmanager
def library_leaks_ignored() -> Iterator[None]:
    """Connecting with python-xlib leaves the Xauthority file open, and importing pyautogui
    leaves the pipes of pyscreeze's `which` probes open: their ResourceWarnings are theirs,
    not ours, and would fail a process that treats warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        yield


class Pointer:
    """The mouse, in root-window pixels."""

    def __init__(self, gui: ModuleType) -> None:
        self._gui = gui

    def position(self) -> tuple[int, int]:
        x, y = self._gui.position()
        return int(x), int(y)

    def move(self, x: int, y: int) -> None:
        self._gui.moveTo(x, y)

    def click(self, at: tuple[int, int] | None, button: str, clicks: int = 1) -> None:
        x, y = at if at else (None, None)
        interval = REPEAT_INTERVAL if clicks > 1 else 0.0  # pyautogui sleeps after each click
        self._gui.click(x, y, clicks=clicks, interval=interval, button=button)

    def drag(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        self._gui.mouseDown(*start, button="left")
        try:
            # Applications recognise a drag from motion with the button held, not a jump.
            for step in range(1, DRAG_STEPS + 1):
                x = start[0] + (end[0] - start[0]) * step // DRAG_STEPS
                y = start[1] + (end[1] - start[1]) * step // DRAG_STEPS
                self._gui.moveTo(x, y)
                time.sleep(0.005)
        finally:
            self._gui.mouseUp(*end, button="left")

    def press(self, at: tuple[int, int] | None, button: str = "left") -> None:
        x, y = at if at else (None, None)
        self._gui.mouseDown(x, y, button=button)

    def release(self, at: tuple[int, int] | None, button: str = "left") -> None:
        x, y = at if at else (None, None)
        self._gui.mouseUp(x, y, button=button)

    def scroll(self, at: tuple[int, int] | None, dx: int, dy: int) -> None:
        x, y = at if at else (None, None)
        if dy:
            self._gui.scroll(-dy, x, y)  # pyautogui: positive is up; ours: positive is down
        if dx:
            self._gui.hscroll(dx, x, y)


class Keyboard(Protocol):
    def type(self, text: str) -> None: ...
    def press(self, combo: KeyCombo) -> None: ...
    def hold(self, combo: KeyCombo, until: Callable[[], bool], seconds: float) -> None: ...
    def close(self) -> None: ...


class XTestKeyboard:
    """Types any character on X11 through XTest, binding spare keycodes for missing ones."""

    def __init__(self) -> None:
        from Xlib import XK, X, display  # type: ignore[import-untyped]
        from Xlib.ext import xtest  # type: ignore[import-untyped]

        self._xk, self._x, self._xtest = XK, X, xtest
        x_authority.allow_missing_file()
        with library_leaks_ignored():
            self._display = display.Display()
        info = self._display.display.info
        self._low, self._high = int(info.min_keycode), int(info.max_keycode)
        self._bound: OrderedDict[int, int] = OrderedDict()  # keysym -> our keycode, LRU order
        self._used: set[int] = set()  # our keycodes that have typed something
        self._keymap: dict[int, tuple[int, bool]] = {}
        self._spare: list[int] = []
        self._per = 2
        self.refresh()

    def refresh(self) -> None:
        """Read the keymap again: a person may have switched layouts since the last action."""
        rows = self._display.get_keyboard_mapping(self._low, self._high - self._low + 1)
        self._per = len(rows[0]) if rows else 2
        keymap: dict[int, tuple[int, bool]] = {}
        spare: list[int] = []
        for offset, row in enumerate(rows):
            keycode = self._low + offset
            if all(sym == 0 for sym in row):
                spare.append(keycode)
            for level, sym in enumerate(row[:2]):  # group 1 only: plain and shifted
                if sym and sym not in keymap:
                    keymap[sym] = (keycode, level == 1)
        for sym, keycode in list(self._bound.items()):
            if keymap.get(sym) != (keycode, False):
                del self._bound[sym]  # someone else rebound it
        self._keymap, self._spare = keymap, spare

    def type(self, text: str) -> None:
        syms = [char_keysym(ch) for ch in text]
        self._bind(syms)
        for sym in syms:
            self._tap(sym, ())
        self._display.sync()

    def press(self, combo: KeyCombo) -> None:
        mods = tuple(self._keysym(name) for name in combo.modifiers)
        key = self._keysym(combo.key)
        self._bind([*mods, key])
        self._tap(key, mods)
        self._display.sync()

    def hold(self, combo: KeyCombo, until: Callable[[], bool], seconds: float) -> None:
        """Press the combo, keep it down for `seconds` or until `until()` says stop (asked
        every HOLD_POLL), then release it: released whatever happens meanwhile."""
        press, release, fake = self._x.KeyPress, self._x.KeyRelease, self._xtest.fake_input
        mods = tuple(self._keysym(name) for name in combo.modifiers)
        key = self._keysym(combo.key)
        self._bind([*mods, key])
        codes = [self._keymap[m][0] for m in mods] + [self._keymap[key][0]]
        try:
            for code in codes:
                fake(self._display, press, code)
            self._display.sync()
            _held_for(seconds, until)
        finally:
            for code in reversed(codes):
                fake(self._display, release, code)
            self._display.sync()

    def close(self) -> None:
        """Give the borrowed keycodes back to the keymap."""
        for keycode in self._bound.values():
            self._display.change_keyboard_mapping(keycode, [(0,) * self._per])
        self._bound.clear()
        self._display.sync()
        self._display.close()

    def _keysym(self, name: str) -> int:
        sym = int(self._xk.string_to_keysym(name))
        if not sym:
            raise ActionRefused(f"this X server knows no key named {name!r}", INVALID_ARGUMENT)
        return sym

    def _bind(self, syms: list[int]) -> None:
        wanted = list(dict.fromkeys(syms))
        for sym in wanted:
            if sym in self._bound:
                self._bound.move_to_end(sym)
        missing = [sym for sym in wanted if sym not in self._keymap]
        if not missing:
            return
        for sym in missing:
            if self._spare:
                keycode = self._spare.pop()
            else:
                victim = next((s for s in self._bound if s not in wanted), None)  # LRU first
                if victim is None:
                    raise ActionFailed(
                        "the keymap has too few spare keycodes for the characters of one chunk"
                    )
                keycode = self._bound.pop(victim)
                del self._keymap[victim]
                if keycode in self._used:
                    self._display.sync()
                    time.sleep(REBIND_SETTLE)
            self._display.change_keyboard_mapping(keycode, [(sym,) * self._per])
            self._bound[sym] = keycode
            self._keymap[sym] = (keycode, False)
            self._used.discard(keycode)
        self._display.sync()
        time.sleep(BIND_SETTLE)

    def _tap(self, sym: int, mods: tuple[int, ...]) -> None:
        press, release, fake = self._x.KeyPress, self._x.KeyRelease, self._xtest.fake_input
        keycode, shifted = self._keymap[sym]
        if sym in self._bound:
            self._used.add(keycode)
        held = [self._keymap[m][0] for m in mods]
        if shifted and SHIFT not in mods:
            held.append(self._keymap[SHIFT][0])
        for code in held:
            fake(self._display, press, code)
        fake(self._display, press, keycode)
        fake(self._display, release, keycode)
        for code in reversed(held):
            fake(self._display, release, code)


def char_keysym(ch: str) -> int:
    """The X keysym that types `ch`: Latin-1 keysyms equal their code point, the rest are
    0x1000000 + code point (X11's Unicode keysyms)."""
    if ch == "\n":
        return 0xFF0D  # Return
    if ch == "\t":
        return 0xFF09  # Tab
    code = ord(ch)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x1000000 + code


# pyautogui's names for the keysyms whose lower-case form is not already its name.
GUI_KEY_NAMES = {
    "Return": "enter",
    "Escape": "esc",
    "BackSpace": "backspace",
    "Prior": "pageup",
    "Next": "pagedown",
    "Control_L": "ctrl",
    "Control_R": "ctrlright",
    "Shift_L": "shift",
    "Shift_R": "shiftright",
    "Alt_L": "alt",
    "Alt_R": "altright",
    "Super_L": "win",
    "Super_R": "winright",
    "Meta_L": "command",
}


class GuiKeyboard:
    """Off X11 (macOS, Windows): pyautogui, which types only what the keyboard map has."""

    def __init__(self, gui: ModuleType) -> None:
        self._gui = gui

    def type(self, text: str) -> None:
        if not text.isascii():
            raise ActionRefused(
                "this platform's keyboard path types ASCII only", code=INVALID_ARGUMENT
            )
        self._gui.write(text, interval=0.0)

    def press(self, combo: KeyCombo) -> None:
        names = [GUI_KEY_NAMES.get(n, n.lower()) for n in (*combo.modifiers, combo.key)]
        self._gui.hotkey(*names, interval=0.0)

    def hold(self, combo: KeyCombo, until: Callable[[], bool], seconds: float) -> None:
        names = [GUI_KEY_NAMES.get(n, n.lower()) for n in (*combo.modifiers, combo.key)]
        try:
            for name in names:
                self._gui.keyDown(name)
            _held_for(seconds, until)
        finally:
            for name in reversed(names):
                self._gui.keyUp(name)

    def close(self) -> None:
        pass


HOLD_POLL = 0.02  # seconds between the checks of a held key or button


def _held_for(seconds: float, until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if until():
            return
        time.sleep(min(HOLD_POLL, left))


@dataclass
class HeldButton:
    """The button `left_mouse_down` (or a takeover's `down`) pressed and nothing has let go
    yet."""

    run_id: str
    blocked: Callable[[], str | None]  # the run's kill switches and link, as its actions ask
    expires: float  # monotonic: the end of the approved scope it was pressed under
    touched: float  # monotonic: the holding run's last input action
    button: str = "left"


class DesktopSession:
    """Input state of this process: one pointer, one keyboard, and whether a person is here.

    Input actions take turns (`turn()`): two at once would interleave keystrokes and race
    the presence check. The position our last input left the pointer at tells whether a
    person has moved it since; if so input pauses until an action says `resume: true`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = threading.Lock()
        self._gui: ModuleType | None = None
        self._keyboard: Keyboard | None = None
        self.last_position: tuple[int, int] | None = None
        self.paused: str | None = None  # why input is paused, or None
        self.held: HeldButton | None = None
        self.let_go_because: list[str] = []  # why held buttons were let go, newest last
        self._watchdog: threading.Thread | None = None

    def pointer(self) -> Pointer:
        with self._state:
            if self._gui is None:
                self._gui = load_pyautogui()
            return Pointer(self._gui)

    def keyboard(self) -> Keyboard:
        with self._state:
            if self._keyboard is None:
                if sys.platform.startswith("linux"):
                    self._keyboard = _open_xtest()
                else:
                    self._gui = self._gui or load_pyautogui()
                    self._keyboard = GuiKeyboard(self._gui)
            elif isinstance(self._keyboard, XTestKeyboard):
                self._keyboard.refresh()
            return self._keyboard

    @contextmanager
    def turn(self, cancelled: threading.Event) -> Iterator[None]:
        """Hold the input turn; ActionCancelled if cancelled while waiting for it."""
        while not self._lock.acquire(timeout=0.05):
            if cancelled.is_set():
                raise ActionCancelled("cancelled while waiting for another input action")
        try:
            yield
        finally:
            self._lock.release()

    def check_presence(self, position: tuple[int, int], resume: bool) -> None:
        """Refuse (human_active) if a person moved the pointer; call while holding the turn."""
        if resume:
            self.paused = None
            self.last_position = None
            return
        if self.paused:
            raise ActionRefused(self.paused, code=HUMAN_ACTIVE)
        if self.last_position is not None and position != self.last_position:
            lx, ly = self.last_position
            self.paused = (
                f"a person is using this desktop: the pointer is at {position[0]},{position[1]}, "
                f"not at {lx},{ly} where the last input left it (real screen pixels); input is "
                "paused until an action is sent with resume: true"
            )
            raise ActionRefused(self.paused, code=HUMAN_ACTIVE)

    def record(self, position: tuple[int, int]) -> None:
        self.last_position = position

    # A pressed button outlives the action that pressed it, so the session, not an action,
    # makes sure it is let go: a watchdog thread asks what the run's actions would ask (kill
    # switches, the link, the scope's end, a person, the run gone quiet) while it is down.

    def hold(
        self,
        run_id: str,
        blocked: Callable[[], str | None],
        seconds_left: float,
        button: str = "left",
    ) -> None:
        """Note `button` as pressed by `run_id`; call while holding the turn."""
        now = time.monotonic()
        self.held = HeldButton(run_id, blocked, now + seconds_left, now, button)
        # `_watchdog` is cleared by the watchdog itself, under the turn, when it stops
        # watching: a thread that is merely still alive may already have decided to end.
        if self._watchdog is None or not self._watchdog.is_alive():
            self._watchdog = threading.Thread(
                target=self._watch_held, name="held-button", daemon=True
            )
            self._watchdog.start()

    def touch(self, run_id: str) -> None:
        """An input action of `run_id` ran: the button it holds is not forgotten."""
        held = self.held
        if held is not None and held.run_id == run_id:
            held.touched = time.monotonic()

    def let_go(self, reason: str) -> bool:
        """Release a held button (call while holding the turn); False if none was held."""
        held, self.held = self.held, None
        if held is None:
            return False
        self.let_go_because.append(reason)
        del self.let_go_because[:-20]
        try:
            self.pointer().release(None, held.button)
        except Exception:
            pass  # the display is gone: so is the press
        return True

    def _held_reason(self, held: HeldButton) -> str | None:
        why = held.blocked()
        if why is not None:
            return why
        now = time.monotonic()
        if now >= held.expires:
            return "the approved scope ended"
        if now - held.touched >= HELD_BUTTON_IDLE:
            return f"no input from run {held.run_id} for {HELD_BUTTON_IDLE:g} s"
        gui = self._gui
        if gui is not None and self.last_position not in (None, Pointer(gui).position()):
            return "a person moved the pointer"
        return None

    def _watch_held(self) -> None:
        while True:
            time.sleep(HOLD_POLL)
            # Checked while holding the turn, so X calls stay on one thread at a time; an
            # input action that has the turn is short or stops on its own at the same checks
            # (typing, holding a key), and is asked again right after.
            if not self._lock.acquire(timeout=0.2):
                continue
            try:
                held = self.held
                if held is None:
                    # Decided under the turn, so a press that comes next starts a new watchdog.
                    self._watchdog = None
                    return
                try:
                    reason = self._held_reason(held)
                except Exception as exc:  # fail closed: a check not made is a reason to let go
                    reason = f"the watchdog could not check the held button: {_short(exc)}"
                if reason is not None:
                    self.let_go(reason)
            finally:
                self._lock.release()

    def close(self) -> None:
        if self._lock.acquire(timeout=5.0):
            try:
                self.let_go("the worker stops")
            finally:
                self._lock.release()
        with self._state:
            keyboard, self._keyboard = self._keyboard, None
        if keyboard is not None:
            keyboard.close()


def _open_xtest() -> XTestKeyboard:
    problem = display_problem()
    if problem:
        raise ActionRefused(problem, code=NO_DISPLAY)
    try:
        return XTestKeyboard()
    except Exception as exc:
        raise ActionRefused(
            f"cannot open the keyboard of display {os.environ.get('DISPLAY', '')!r}: {_short(exc)}",
            code=NO_DISPLAY,
        ) from exc


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
