"""The live stream (server-sent events) every page opens: the chrome and a run's status, shared
looks at the coordinator per session, at most a few streams a session, signed out when the
coordinator stops accepting the session's token."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from coordinator.console.pages import Pages, Refused
from coordinator.console.sessions import (
    Session,
)
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    TooManyFailuresError,
)
from shared.gen.deskfleet.v1 import runs_pb2
from shared.text import visible


class LiveLooks:
    """The live streams' looks at the coordinator, shared by the streams of one session that
    watch the same thing: a look younger than `interval` (or one under way) is reused, except
    for a stream's first, which is always new (the page it serves was just rendered: an older
    look would undo what the page shows)."""

    def __init__(
        self,
        look: Callable[[Session, str], Awaitable[dict[str, Any]]],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._look = look
        self._interval = interval
        self._clock = clock
        self._recent: dict[tuple[str, str], tuple[float, asyncio.Task[dict[str, Any]]]] = {}

    async def get(self, session: Session, run_id: str, *, fresh: bool = False) -> dict[str, Any]:
        key = (session.id, run_id)
        now = self._clock()
        for old in [k for k, (at, _) in self._recent.items() if at + self._interval <= now]:
            del self._recent[old]
        held = self._recent.get(key)
        if held is None or fresh:
            # Slightly less than the interval: a stream sleeping one interval finds it stale.
            task = asyncio.ensure_future(self._look(session, run_id))
            self._recent[key] = held = (now - 0.1 * self._interval, task)
        return await asyncio.shield(held[1])


class LivePages(Pages):
    """The live stream every page opens."""

    @functools.cached_property
    def looks(self) -> LiveLooks:
        return LiveLooks(self.live_state, self.settings.live_interval)

    async def events(self, request: Request, session: Session) -> Response:
        """Server-sent events: the chrome (approvals, fleet stop) and, given `run`, its status.

        A session holds at most `live_per_session` of them at once, and its streams share
        their looks at the coordinator (`LiveLooks`): more tabs of one session cost no more
        calls. A credential the coordinator no longer accepts ends the session: the page is
        told `signed-out` and the stream closes, instead of asking again every interval."""
        run_id = request.query_params.get("run", "")[:100]
        limit = self.settings.live_per_session
        if session.live >= limit:
            raise Refused(
                429,
                f"too many live connections for this session (the limit is {limit}): close"
                " another console tab",
            )
        session.live += 1

        async def stream() -> AsyncIterator[bytes]:
            last = ""
            try:
                yield b"retry: 3000\n\n"
                while not await request.is_disconnected():
                    if self.sessions.get(session.id) is None:
                        yield _sse("signed-out", {})
                        return
                    try:
                        doc = await self.looks.get(session, run_id, fresh=not last)
                    except (AuthenticationError, TooManyFailuresError):
                        self.sessions.end_for_token(session.token)
                        yield _sse("signed-out", {})
                        return
                    except DeskfleetError as exc:
                        doc = {"error": visible(str(exc))}
                    text = json.dumps(doc, sort_keys=True)
                    if text != last:
                        last = text
                        yield _sse("state", doc)
                    else:
                        yield b": keep-alive\n\n"
                    await asyncio.sleep(self.settings.live_interval)
            finally:
                session.live -= 1

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def live_state(self, session: Session, run_id: str) -> dict[str, Any]:
        """One look for the live stream: the chrome and, given a run, its status."""
        doc: dict[str, Any] = await self.chrome(session)
        if run_id:
            run = await self.rpc.call(
                session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id)
            )
            doc["run"] = {
                "status": run.status,
                "stop_reason": visible(run.stop_reason),
                "waiting": visible(
                    f"{run.waiting.code}: {run.waiting.detail}" if run.waiting.code else ""
                ),
                "last_seq": run.last_seq,
            }
        return doc


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
