"""`DesktopSession`: control of one worker's desktop under a person's approval.

Every method is one desktop action: the coordinator checks it against the approved scope, the
worker checks it again, runs it under the kill switch, and the receipt is journaled. An action
that does not succeed raises `ActionRefusedError` (nothing ran: out of scope, kill switch,
a person at the desk...) or `ActionFailedError`; `act()` returns the outcome instead.
Points are in the screen's pixels, or in `space` when the session was given one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from deskfleet._connection import Connection
from deskfleet.errors import (
    ActionFailedError,
    ActionRefusedError,
    ApprovalDeniedError,
    ApprovalGuidedError,
)
from deskfleet.types import ActResult, DesktopGrant, Run
from shared import desktop_scope as contract
from shared.errors import DeskfleetError, InvalidArgumentError
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.states import ACTIVE, RunState

ACT_TIMEOUT = 60.0
# Events of a desktop run that end a wait for its approval, one way or the other.
_ANSWERS = ("approval.granted", "approval.denied", "approval.guided", "approval.withdrawn")


def scope_message(
    actions: Sequence[str],
    displays: Sequence[int],
    region: tuple[int, int, int, int] | None,
    ttl: float,
    max_actions: int | None,
) -> desktop_pb2.DesktopScope:
    if isinstance(actions, str):
        raise InvalidArgumentError("actions: a list of action names, e.g. ['screenshot']")
    unknown = sorted(set(actions) - set(contract.ACTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"actions: unknown {', '.join(unknown)} (known: {', '.join(contract.ACTIONS)})"
        )
    scope = desktop_pb2.DesktopScope(
        actions=list(actions),
        displays=list(displays),
        ttl_seconds=ttl,
        max_actions=contract.DEFAULT_MAX_ACTIONS if max_actions is None else max_actions,
    )
    if region is not None:
        x, y, w, h = region
        scope.region.CopyFrom(desktop_pb2.Region(x=x, y=y, width=w, height=h))
    return scope


def _point(x: int | None, y: int | None) -> dict[str, int]:
    if (x is None) != (y is None):
        raise InvalidArgumentError("give both x and y, or neither (the cursor's position)")
    return {} if x is None or y is None else {"x": x, "y": y}


class DesktopSession:
    """A desktop run: its approval, then one method per Computer Use action. Close it (or
    use it as an async context manager) to give the desktop back."""

    def __init__(
        self,
        connection: Connection,
        run: Run,
        worker_id: str,
        *,
        space: tuple[int, int] | None = None,
    ) -> None:
        self._c = connection
        self.run = run
        self.run_id = run.id
        self.worker_id = worker_id
        self.space = space
        self._seen = 0  # journal events already read by wait_approved
        self._button_down = False  # left_mouse_down sent and no left_mouse_up since
        self._grant: DesktopGrant | None = None
        self._granted_by = ""  # the approval whose grant wait_approved saw in the journal

    def __repr__(self) -> str:
        return f"DesktopSession(run={self.run_id!r}, worker={self.worker_id!r})"

    async def __aenter__(self) -> DesktopSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------------ approval

    async def wait_approved(self, timeout: float | None = None) -> Run:  # noqa: ASYNC109
        """Wait until a person approves the request and the desktop is this run's to use.

        ApprovalDeniedError when it is denied, withdrawn, or its run stops; ApprovalGuidedError
        when a person answers with guidance instead (nothing is granted; the request is asked
        anew, and waiting again goes on from there); TimeoutError after `timeout` seconds."""

        async def until_approved() -> Run:
            run = await self._run()
            if run.status == RunState.RUNNING:
                return run
            request = runs_pb2.WatchRunRequest(id=self.run_id, after_seq=self._seen, follow=True)
            async for event in self._c.stream(self._c.runs.WatchRun, request):
                self._seen = max(self._seen, event.seq)
                if event.kind == "approval.granted":
                    self._granted_by = str(json.loads(event.data_json or "{}").get("approval", ""))
                if event.kind == "approval.guided":
                    data = json.loads(event.data_json or "{}")
                    raise ApprovalGuidedError(
                        f"desktop request {self.run_id} was answered with guidance, not"
                        f" approved: {data.get('text', '')}",
                        run_id=self.run_id,
                        guidance=str(data.get("text", "")),
                    )
                if event.kind in _ANSWERS or event.kind == "run.state":
                    run = await self._run()
                    if run.status == RunState.RUNNING:
                        return run
                    if run.status not in ACTIVE:
                        break
            run = await self._run()
            if run.status == RunState.RUNNING:
                return run
            raise ApprovalDeniedError(
                f"desktop request {self.run_id} was not approved: {run.status}"
                + (f" ({run.stop_reason})" if run.stop_reason else ""),
                run_id=self.run_id,
                status=run.status,
            )

        async def approved_with_grant() -> Run:
            run = await until_approved()
            self._grant = await self._read_grant()
            return run

        if timeout is None:
            return await approved_with_grant()
        try:
            return await asyncio.wait_for(approved_with_grant(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"desktop request {self.run_id} is not approved after {timeout:g} s"
                f" (deskfleet approvals list shows it)"
            ) from None

    @property
    def grant(self) -> DesktopGrant | None:
        """The scope the person approved, as `wait_approved` last read it (None before)."""
        return self._grant

    @property
    def approved_actions(self) -> tuple[str, ...]:
        """The actions the person approved (which may be fewer than were asked for); empty
        until `wait_approved` has returned."""
        return () if self._grant is None else self._grant.actions

    async def _read_grant(self) -> DesktopGrant:
        # The run's journal names the approval that granted it (the last one: a kill switch
        # or a lost connection asks anew); the approval itself holds the typed scope.
        request = runs_pb2.WatchRunRequest(id=self.run_id, after_seq=self._seen, follow=False)
        async for event in self._c.stream(self._c.runs.WatchRun, request):
            self._seen = max(self._seen, event.seq)
            if event.kind == "approval.granted":
                self._granted_by = str(json.loads(event.data_json or "{}").get("approval", ""))
        approval_id = self._granted_by
        if not approval_id:
            raise ApprovalDeniedError(
                f"desktop run {self.run_id} is running but its journal names no granted approval",
                run_id=self.run_id,
                status=self.run.status,
            )
        reply = await self._c.unary(
            self._c.approvals.DiscussApproval, desktop_pb2.DiscussApprovalRequest(id=approval_id)
        )
        return DesktopGrant.from_proto(reply.approval)

    async def _run(self) -> Run:
        reply = await self._c.unary(self._c.runs.GetRun, runs_pb2.RunRef(id=self.run_id))
        self.run = Run.from_proto(reply)
        return self.run

    async def close(self) -> Run:
        """End the desktop run (its approval with it), letting go of a button this session
        pressed first; safe to call twice."""
        if self._button_down and self.run.active:
            try:
                await self.act("left_mouse_up")
            except DeskfleetError:
                pass  # the worker lets go by itself once the run is silent
            self._button_down = False
        if self.run.active:
            try:
                reply = await self._c.unary(self._c.runs.CancelRun, runs_pb2.RunRef(id=self.run_id))
                self.run = Run.from_proto(reply)
            except Exception:
                await self._run()
                if self.run.active:
                    raise
        return self.run

    # ------------------------------------------------------------------------- actions

    async def act(
        self,
        action: str,
        *,
        timeout: float = ACT_TIMEOUT,  # noqa: ASYNC109
        **args: Any,
    ) -> ActResult:
        """One action by name with its arguments (`x`, `y`, `text`, `key`, ...), whatever its
        outcome: read `status`, `reason` and `result`."""
        if self.space is not None and "space" not in args:
            args["space"] = {"width": self.space[0], "height": self.space[1]}
        reply = await self._c.unary(
            self._c.desktop.Act,
            desktop_pb2.DesktopActRequest(
                run_id=self.run_id,
                action=action,
                args_json=json.dumps(args, ensure_ascii=True),
                timeout_seconds=timeout,
            ),
            timeout=timeout + 15,
        )
        return ActResult.from_proto(action, reply)

    async def _do(self, action: str, **args: Any) -> ActResult:
        done = await self.act(action, **{k: v for k, v in args.items() if v is not None})
        if done.succeeded:
            return done
        cls = ActionRefusedError if done.status == "refused" else ActionFailedError
        raise cls(
            f"{action}: {done.status}: {done.error or done.reason or 'no reason given'}",
            action=action,
            status=done.status,
            reason=done.reason,
            action_id=done.action_id,
            result=done.result,
        )

    async def _image(self, done: ActResult, *roles: str) -> bytes:
        if not done.artifacts:
            raise ActionFailedError(
                f"{done.action}: the receipt names no image",
                action=done.action,
                status=done.status,
                reason="no_artifact",
                action_id=done.action_id,
            )
        art = next((a for a in done.artifacts if a.role in roles), done.artifacts[-1])
        return await self.artifact(art.sha256)

    async def artifact(self, sha256: str) -> bytes:
        """The bytes of an image a receipt of this run names (by its sha256)."""
        reply = await self._c.unary(
            self._c.desktop.GetArtifact,
            desktop_pb2.GetArtifactRequest(run_id=self.run_id, sha256=sha256),
            timeout=60,
        )
        data: bytes = reply.data
        return data

    async def screenshot(self, *, display: int | None = None, format: str = "png") -> bytes:
        """The screen as an image (PNG by default; in `space` when the session has one)."""
        done = await self._do("screenshot", display=display, format=format)
        return await self._image(done, "screenshot")

    async def zoom(self, region: tuple[int, int, int, int], *, display: int | None = None) -> bytes:
        """A PNG of the rectangle (x0, y0, x1, y1) at the screen's full resolution."""
        done = await self._do("zoom", region=list(region), display=display)
        return await self._image(done, "zoom", "screenshot")

    async def cursor_position(self) -> tuple[int, int]:
        done = await self._do("cursor_position")
        cursor = (done.result or {}).get("cursor") or {}
        return int(cursor.get("x", 0)), int(cursor.get("y", 0))

    async def mouse_move(self, x: int, y: int) -> ActResult:
        return await self._do("mouse_move", x=x, y=y)

    async def left_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return await self._do("left_click", **_point(x, y))

    async def right_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return await self._do("right_click", **_point(x, y))

    async def middle_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return await self._do("middle_click", **_point(x, y))

    async def double_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return await self._do("double_click", **_point(x, y))

    async def triple_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return await self._do("triple_click", **_point(x, y))

    async def left_click_drag(self, x: int, y: int, to_x: int, to_y: int) -> ActResult:
        """Press at (x, y), move to (to_x, to_y), release."""
        return await self._do("left_click_drag", x=x, y=y, to_x=to_x, to_y=to_y)

    async def left_mouse_down(self, x: int | None = None, y: int | None = None) -> ActResult:
        """Press the left button and keep it down until `left_mouse_up` (or `close`). The
        worker lets it go by itself at a kill switch, a lost coordinator, the scope's end, a
        person at the desk, or after 30 s without input from this run."""
        done = await self._do("left_mouse_down", **_point(x, y))
        self._button_down = True
        return done

    async def left_mouse_up(self, x: int | None = None, y: int | None = None) -> ActResult:
        done = await self._do("left_mouse_up", **_point(x, y))
        self._button_down = False
        return done

    async def scroll(
        self, x: int | None = None, y: int | None = None, *, dx: int = 0, dy: int = 0
    ) -> ActResult:
        """Scroll `dy` clicks down (negative: up) and `dx` right (negative: left)."""
        return await self._do("scroll", **_point(x, y), dx=dx, dy=dy)

    async def type(self, text: str) -> ActResult:
        """Type `text` as written (key names in it are typed, never pressed)."""
        return await self._do("type", text=text)

    async def key(self, combo: str) -> ActResult:
        """Press key combos in xdotool notation: "ctrl+a", "Return", "ctrl+a Delete"."""
        return await self._do("key", key=combo)

    async def hold_key(self, combo: str, seconds: float) -> ActResult:
        """Hold one key combo down for `seconds`, then release it."""
        return await self._do("hold_key", key=combo, seconds=seconds)

    async def wait(self, seconds: float) -> ActResult:
        return await self._do("wait", seconds=seconds)
