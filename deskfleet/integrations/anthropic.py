"""A fleet desktop as the Anthropic SDK's computer toolset (`computer_toolset_20260801`).

    desk = await fleet.request_desktop("lab-desk", actions=["screenshot", "left_click", "type"])
    await desk.wait_approved()
    runner = AsyncAnthropic().beta.messages.tool_runner(
        model="claude-opus-4-8", max_tokens=4096, tools=[FleetComputer(desk)], messages=[...]
    )
    final = await runner.until_done()

Each member the model calls is one action of the approved desktop run: the coordinator checks
it against the scope a person approved, the worker runs it under the kill switch, and its
receipt is journaled. The toolset offers the model only the members of that scope (the others
are disabled in `configs`, so they are not in its schema); `confirm` answers from the same
scope, since the person already approved those actions. A refusal (out of scope, the kill
switch, the approval's limits) or a failure reaches the model as the SDK's `ToolError`, an
`is_error` tool result, and the loop goes on; it never raises out of the runner.

Points and screenshots are in one space that fits the model's image limits (see
`deskfleet.integrations._desktop`): a larger display is scaled by the worker, and the model's
coordinates are mapped back to the real screen there.
"""

from __future__ import annotations

from typing import Any, cast, get_args

from anthropic.tools import (
    BetaAsyncAbstractComputerToolset20260801,
    BetaComputerConfirmContext,
    BetaComputerCursorPositionResult,
    BetaScreenshotResult,
    BetaToolConfigs,
    BetaToolsetCallContext,
    ToolError,
)
from anthropic.types.beta import (
    BetaComputerCursorPositionInput,
    BetaComputerDoubleClickInput,
    BetaComputerHoldKeyInput,
    BetaComputerKeyInput,
    BetaComputerLeftClickDragInput,
    BetaComputerLeftClickInput,
    BetaComputerLeftMouseDownInput,
    BetaComputerLeftMouseUpInput,
    BetaComputerMemberName,
    BetaComputerMiddleClickInput,
    BetaComputerMouseMoveInput,
    BetaComputerRightClickInput,
    BetaComputerScreenshotInput,
    BetaComputerScrollInput,
    BetaComputerToolsetConfigsParam,
    BetaComputerTripleClickInput,
    BetaComputerTypeInput,
    BetaComputerWaitInput,
    BetaComputerZoomInput,
)

from deskfleet.desktop import DesktopSession
from deskfleet.errors import ApprovalError, DeskfleetError
from deskfleet.integrations import _images
from deskfleet.integrations._desktop import FittedDesktop
from deskfleet.integrations._outcomes import explain, modifiers_refused, no_answer
from deskfleet.types import ActResult
from shared.desktop_scope import MAX_COMBOS

__all__ = ["MEMBERS", "FleetComputer"]

MEMBERS: tuple[str, ...] = get_args(BetaComputerMemberName)
"""Every member of the toolset; a desktop action of the same name backs each."""

_SCROLL = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def _point(coordinate: list[int] | None) -> dict[str, int]:
    return {} if coordinate is None else {"x": coordinate[0], "y": coordinate[1]}


class FleetComputer(BetaAsyncAbstractComputerToolset20260801):
    """The computer toolset on an approved `deskfleet.AsyncDesktopSession`.

    Construct it after `await session.wait_approved()`: the approved actions decide which
    members the model is offered. `max_long_edge` and `max_pixels` bound the screenshots the
    model is sent (the defaults suit every current Claude model; a model with larger limits
    may be given more). Closing the toolset leaves the session open: close the session to
    give the desktop back."""

    def __init__(
        self,
        session: DesktopSession,
        *,
        max_long_edge: int = _images.MAX_LONG_EDGE,
        max_pixels: int = _images.MAX_PIXELS,
        tool_configs: BetaToolConfigs | None = None,
    ) -> None:
        approved = session.approved_actions
        if not approved:
            raise ApprovalError(
                f"desktop run {session.run_id} has no approved scope yet:"
                " await session.wait_approved() before making its toolset",
                run_id=session.run_id,
                status=session.run.status,
            )
        self.session = session
        self._desktop = FittedDesktop(session, max_long_edge=max_long_edge, max_pixels=max_pixels)
        # Only what a person approved is offered; the rest is withheld from the model's schema.
        configs = {name: {"enabled": False} for name in MEMBERS if name not in approved}
        super().__init__(
            configs=cast(BetaComputerToolsetConfigsParam, configs) if configs else None,
            confirm=self._confirm,
            tool_configs=tool_configs,
        )

    def _confirm(self, context: BetaComputerConfirmContext) -> bool:
        # The person's approval is the confirmation; read live, so a narrower grant after a
        # kill switch and a new approval is what answers.
        return context.member in self.session.approved_actions

    async def _act(self, action: str, **args: Any) -> ActResult:
        try:
            done = await self._desktop.act(action, **args)
        except DeskfleetError as exc:
            raise ToolError(no_answer(action, exc)) from exc
        if not done.succeeded:
            raise ToolError(explain(done))
        return done

    async def _screenshot_of(self, done: ActResult, *, grow: bool) -> BetaScreenshotResult:
        try:
            png = await self._desktop.image(done, grow=grow)
            data, media_type = _images.for_model(png)
        except (DeskfleetError, OSError, ValueError) as exc:
            raise ToolError(f"{done.action}: the image could not be read: {exc}") from exc
        return BetaScreenshotResult(data=data, media_type=media_type)

    @staticmethod
    def _no_keys_held(action: str, text: str | None) -> None:
        if text:
            raise ToolError(modifiers_refused(action, text))

    # ----------------------------------------------------------------------- the screen

    async def screenshot(
        self, context: BetaToolsetCallContext, input: BetaComputerScreenshotInput
    ) -> BetaScreenshotResult:
        return await self._screenshot_of(await self._act("screenshot"), grow=False)

    async def zoom(
        self, context: BetaToolsetCallContext, input: BetaComputerZoomInput
    ) -> BetaScreenshotResult:
        done = await self._act("zoom", region=list(input.region))
        return await self._screenshot_of(done, grow=True)

    async def cursor_position(
        self, context: BetaToolsetCallContext, input: BetaComputerCursorPositionInput
    ) -> BetaComputerCursorPositionResult:
        cursor = ((await self._act("cursor_position")).result or {}).get("cursor") or {}
        return BetaComputerCursorPositionResult(
            x=int(cursor.get("x", 0)), y=int(cursor.get("y", 0))
        )

    # ------------------------------------------------------------------------ the mouse

    async def mouse_move(
        self, context: BetaToolsetCallContext, input: BetaComputerMouseMoveInput
    ) -> str | None:
        await self._act("mouse_move", **_point(input.coordinate))
        return None

    async def left_click(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickInput
    ) -> str | None:
        self._no_keys_held("left_click", input.text)
        await self._act("left_click", **_point(input.coordinate))
        return None

    async def right_click(
        self, context: BetaToolsetCallContext, input: BetaComputerRightClickInput
    ) -> str | None:
        self._no_keys_held("right_click", input.text)
        await self._act("right_click", **_point(input.coordinate))
        return None

    async def middle_click(
        self, context: BetaToolsetCallContext, input: BetaComputerMiddleClickInput
    ) -> str | None:
        self._no_keys_held("middle_click", input.text)
        await self._act("middle_click", **_point(input.coordinate))
        return None

    async def double_click(
        self, context: BetaToolsetCallContext, input: BetaComputerDoubleClickInput
    ) -> str | None:
        self._no_keys_held("double_click", input.text)
        await self._act("double_click", **_point(input.coordinate))
        return None

    async def triple_click(
        self, context: BetaToolsetCallContext, input: BetaComputerTripleClickInput
    ) -> str | None:
        self._no_keys_held("triple_click", input.text)
        await self._act("triple_click", **_point(input.coordinate))
        return None

    async def left_click_drag(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickDragInput
    ) -> str | None:
        self._no_keys_held("left_click_drag", input.text)
        (x, y), (to_x, to_y) = input.start_coordinate, input.coordinate
        await self._act("left_click_drag", x=x, y=y, to_x=to_x, to_y=to_y)
        return None

    async def left_mouse_down(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseDownInput
    ) -> str | None:
        await self._act("left_mouse_down")
        return None

    async def left_mouse_up(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseUpInput
    ) -> str | None:
        await self._act("left_mouse_up")
        return None

    async def scroll(
        self, context: BetaToolsetCallContext, input: BetaComputerScrollInput
    ) -> str | None:
        self._no_keys_held("scroll", input.text)
        sx, sy = _SCROLL[input.scroll_direction]
        amount = input.scroll_amount
        await self._act("scroll", **_point(input.coordinate), dx=sx * amount, dy=sy * amount)
        return None

    # --------------------------------------------------------------------- the keyboard

    async def type(
        self, context: BetaToolsetCallContext, input: BetaComputerTypeInput
    ) -> str | None:
        await self._act("type", text=input.text)
        return None

    async def key(self, context: BetaToolsetCallContext, input: BetaComputerKeyInput) -> str | None:
        repeat = 1 if input.repeat is None else input.repeat
        if repeat < 1:
            raise ToolError(f"key: repeat is at least 1, not {repeat}; nothing was pressed")
        combos = input.text.split() * repeat
        # One action takes a bounded number of combos; a longer repeat is several actions.
        for start in range(0, len(combos), MAX_COMBOS):
            await self._act("key", key=" ".join(combos[start : start + MAX_COMBOS]))
        return None

    async def hold_key(
        self, context: BetaToolsetCallContext, input: BetaComputerHoldKeyInput
    ) -> str | None:
        await self._act("hold_key", key=input.text, seconds=input.duration)
        return None

    async def wait(
        self, context: BetaToolsetCallContext, input: BetaComputerWaitInput
    ) -> str | None:
        await self._act("wait", seconds=input.duration)
        return None
