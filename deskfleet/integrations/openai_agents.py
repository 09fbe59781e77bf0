"""A fleet desktop as the OpenAI Agents SDK's `AsyncComputer`, for `ComputerTool`.

    desk = await fleet.request_desktop("lab-desk", actions=["screenshot", "left_click", "type"])
    await desk.wait_approved()
    agent = Agent(name="desk", model="gpt-5.5", tools=[ComputerTool(computer=FleetComputer(desk))])
    result = await Runner.run(agent, "fill in the form")

Needs the SDK: `pip install 'deskfleet[openai-agents]'`.

Each action the model asks for is one action of the approved desktop run, checked by the
coordinator and the worker against the scope a person approved and run under the kill switch.

The SDK ends the whole run when a computer method raises, and a computer call's output is
only a screenshot: there is no text a tool error could travel in. So a refused or failed
action does not raise. It is recorded (`refusals`), the later actions of the same batch are
not done (they were planned on the assumption that it happened), and the screenshot that
answers the batch carries a strip below the screen that says what was not done and why. The
screen's pixels and coordinates are untouched by it.

Keys held during a mouse action (the SDK's `keys`) cannot be held by the desktop, so such an
action is refused that way rather than done without them.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

try:
    from agents.computer import AsyncComputer, Button, Environment
except ImportError as exc:
    if exc.name is None or exc.name.split(".")[0] != "agents":
        raise
    raise ImportError(
        "deskfleet.integrations.openai_agents needs the OpenAI Agents SDK:"
        " pip install 'deskfleet[openai-agents]'"
    ) from None

from deskfleet.desktop import DesktopSession
from deskfleet.errors import ApprovalError, DeskfleetError
from deskfleet.integrations import _images
from deskfleet.integrations._desktop import FittedDesktop
from deskfleet.integrations._outcomes import explain, modifiers_refused, no_answer
from shared.desktop_scope import MAX_SCROLL

__all__ = ["FleetComputer"]

WHEEL_PIXELS = 100  # the model scrolls in pixels; the desktop in wheel clicks of about this
WAIT_SECONDS = 1.0
NOTICE_TITLE = "Note from the desktop's controller, below the screen (not part of it):"
_BUTTONS = {"left": "left_click", "right": "right_click", "wheel": "middle_click"}
_MODIFIERS = frozenset({"ctrl", "control", "shift", "alt", "meta", "super", "cmd", "win"})
# The model's key names that the desktop's (X keysym names and their usual aliases) lack.
_KEY_NAMES = {
    "option": "alt",
    "command": "cmd",
    "windows": "super",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "printscreen": "Print",
}


def key_combo(keys: list[str]) -> str:
    """`["CTRL", "A"]` -> `"ctrl+a"`, the desktop's notation: modifiers first, a letter is the
    key itself (never shift+letter), `+` is `plus`."""
    names: list[str] = []
    for key in keys:
        if key in ("+", " "):
            names.append("plus" if key == "+" else "space")
        elif len(key) == 1:
            names.append(key.lower() if key.isalpha() else key)
        else:
            lower = key.strip().lower()
            names.append(_KEY_NAMES.get(lower, lower))
    held = [n for n in names if n in _MODIFIERS]
    return "+".join([*held, *(n for n in names if n not in _MODIFIERS)])


def _wheel(pixels: int) -> int:
    if pixels == 0:
        return 0
    clicks = max(1, round(abs(pixels) / WHEEL_PIXELS))
    return min(clicks, MAX_SCROLL) * (1 if pixels > 0 else -1)


class FleetComputer(AsyncComputer):
    """The Agents SDK's computer on an approved `deskfleet.AsyncDesktopSession`.

    Construct it after `await session.wait_approved()`. `environment` is only needed by the
    preview computer tool (`computer-use-preview`), which also needs `dimensions`: request
    the desktop with `space=(width, height)` for it. `max_long_edge` and `max_pixels`, when
    given, bound the screenshots (the worker scales the screen to fit, and maps the model's
    points back). Closing the session gives the desktop back; the computer holds nothing."""

    def __init__(
        self,
        session: DesktopSession,
        *,
        environment: Environment | None = None,
        max_long_edge: int | None = None,
        max_pixels: int | None = None,
    ) -> None:
        if not session.approved_actions:
            raise ApprovalError(
                f"desktop run {session.run_id} has no approved scope yet:"
                " await session.wait_approved() before making its computer",
                run_id=session.run_id,
                status=session.run.status,
            )
        self.session = session
        self._desktop = FittedDesktop(session, max_long_edge=max_long_edge, max_pixels=max_pixels)
        self._environment = environment
        self.refusals: list[str] = []
        """What was not done and why, in order: the lines the model was shown."""
        self._notices: list[str] = []  # for the next screenshot
        self._halted = False  # an action of this batch did not succeed

    @property
    def environment(self) -> Environment | None:
        return self._environment

    @property
    def dimensions(self) -> tuple[int, int] | None:
        return self._desktop.size

    # ----------------------------------------------------------------------- the screen

    async def screenshot(self) -> str:
        """The screen as base64 PNG, with what was not done since the last one below it."""
        notices, self._notices, self._halted = self._notices, [], False
        png: bytes | None = None
        try:
            done = await self._desktop.act("screenshot")
            if done.succeeded:
                png = await self._desktop.image(done)
            else:
                notices.append(self._refused(explain(done)))
        except DeskfleetError as exc:
            notices.append(self._refused(no_answer("screenshot", exc)))
        except (OSError, ValueError) as exc:  # an image that cannot be read
            notices.append(self._refused(f"screenshot: the image could not be read: {exc}"))
        if png is None:
            png = _images.blank(self._desktop.size or (1024, 768))
        if notices:
            png = _images.with_notice(png, [NOTICE_TITLE, *notices])
        return base64.b64encode(png).decode("ascii")

    # ------------------------------------------------------------------------ the mouse

    async def click(self, x: int, y: int, button: Button, *, keys: list[str] | None = None) -> None:
        action = _BUTTONS.get(button)
        if action is None:
            self._skip(
                f"click with the {button} button was refused and nothing was done: this"
                " desktop's mouse has left, right and wheel buttons only"
            )
        elif self._no_keys_held(action, keys):
            await self._input(action, x=x, y=y)

    async def double_click(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        if self._no_keys_held("double_click", keys):
            await self._input("double_click", x=x, y=y)

    async def move(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        if self._no_keys_held("mouse_move", keys):
            await self._input("mouse_move", x=x, y=y)

    async def scroll(
        self, x: int, y: int, scroll_x: int, scroll_y: int, *, keys: list[str] | None = None
    ) -> None:
        if self._no_keys_held("scroll", keys):
            await self._input("scroll", x=x, y=y, dx=_wheel(scroll_x), dy=_wheel(scroll_y))

    async def drag(self, path: list[tuple[int, int]], *, keys: list[str] | None = None) -> None:
        if not self._no_keys_held("left_click_drag", keys):
            return
        if len(path) < 2:
            self._skip("drag was refused and nothing was done: a drag needs two points at least")
            return
        if len(path) == 2:
            (x, y), (to_x, to_y) = path
            await self._input("left_click_drag", x=x, y=y, to_x=to_x, to_y=to_y)
            return
        # Along a path: press, move through every point, release; the desktop's own drag
        # goes straight from one point to the other.
        stepwise = ("mouse_move", "left_mouse_down", "left_mouse_up")
        missing = [a for a in stepwise if a not in self.session.approved_actions]
        if missing:
            self._skip(
                f"drag along {len(path)} points was refused and nothing was done: it needs"
                f" {', '.join(missing)} approved; a drag between two points needs only"
                " left_click_drag"
            )
            return
        (x, y), *rest = path
        await self._input("mouse_move", x=x, y=y)
        await self._input("left_mouse_down")
        if self._halted:
            return  # the button was not pressed
        for x, y in rest:
            await self._input("mouse_move", x=x, y=y)
        # Released even after a refusal on the way: a button left down would drag on.
        halted, self._halted = self._halted, False
        await self._input("left_mouse_up")
        self._halted = self._halted or halted

    # --------------------------------------------------------------------- the keyboard

    async def type(self, text: str) -> None:
        await self._input("type", text=text)

    async def keypress(self, keys: list[str]) -> None:
        await self._input("key", key=key_combo(keys))

    async def wait(self) -> None:
        # Waiting is no action on the desktop: nothing to approve or journal.
        await asyncio.sleep(WAIT_SECONDS)

    # -------------------------------------------------------------------------- outcomes

    async def _input(self, action: str, **args: Any) -> None:
        if self._halted:
            self._notices.append(
                f"{action} was not done: an earlier action of the same batch did not succeed."
            )
            return
        try:
            done = await self._desktop.act(action, **args)
        except DeskfleetError as exc:
            self._skip(no_answer(action, exc))
            return
        if not done.succeeded:
            self._skip(explain(done))

    def _no_keys_held(self, action: str, keys: list[str] | None) -> bool:
        if keys:
            self._skip(modifiers_refused(action, "+".join(keys)))
            return False
        return True

    def _skip(self, line: str) -> None:
        self._notices.append(self._refused(line))
        self._halted = True

    def _refused(self, line: str) -> str:
        self.refusals.append(line)
        return line
