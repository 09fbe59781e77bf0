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
from coordinator.console.wording import for_people
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    TooManyFailuresError,
)
from shared.gen.deskfleet.v1 import runs_pb2
from shared.text import visible

Look = asyncio.Task[dict[str, Any]]


class LiveLooks:
    """The live streams' looks at the coordinator, shared by the streams of one session: the
    chrome (pending approvals, the fleet kill switch) by all of them whatever run they watch,
    a run's status by those that watch that run. A look younger than `interval` (or one under
    way) is reused, except for a stream's first, which is always new (the page it serves was
    just rendered: an older look would undo what the page shows)."""

    def __init__(
        self,
        chrome: Callable[[Session], Awaitable[dict[str, Any]]],
        run: Callable[[Session, str], Awaitable[dict[str, Any]]],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._chrome = chrome
        self._run = run
        self._interval = interval
        self._clock = clock
        # (session id, "") for the chrome, (session id, run id) for a run: when, and the look.
        self._recent: dict[tuple[str, str], tuple[float, Look]] = {}

    async def get(self, session: Session, run_id: str, *, fresh: bool = False) -> dict[str, Any]:
        """The chrome and, given `run_id`, {"run": its status}, as one document."""
        now = self._clock()
        for old in [k for k, (at, _) in self._recent.items() if at + self._interval <= now]:
            del self._recent[old]
        looks = [self._shared((session.id, ""), lambda: self._chrome(session), now, fresh)]
        if run_id:
            looks.append(
                self._shared((session.id, run_id), lambda: self._run(session, run_id), now, fresh)
            )
        # Shielded: a stream that goes away does not cancel a look other streams share.
        found = await asyncio.gather(*(asyncio.shield(look) for look in looks))
        doc = dict(found[0])
        if run_id:
            doc["run"] = found[1]
        return doc

    def _shared(
        self,
        key: tuple[str, str],
        look: Callable[[], Awaitable[dict[str, Any]]],
        now: float,
        fresh: bool,
    ) -> Look:
        held = self._recent.get(key)
        if held is None or fresh:
            # Slightly less than the interval: a stream sleeping one interval finds it stale.
            held = (now - 0.1 * self._interval, asyncio.ensure_future(look()))
            self._recent[key] = held
        return held[1]


class LivePages(Pages):
    """The live stream every page opens."""

    @functools.cached_property
    def looks(self) -> LiveLooks:
        return LiveLooks(self.chrome, self.live_run, self.settings.live_interval)

    async def events(self, request: Request, session: Session) -> Response:
        """Server-sent events: the chrome (approvals, fleet stop) and, given `run`, its status.

        A session holds at most `live_per_session` of them at once, and its streams share
        their looks at the coordinator (`LiveLooks`): more tabs of one session cost no more
        calls, and tabs on different runs share the chrome. A credential the coordinator no
        longer accepts ends the session: the page is told `signed-out` and the stream closes,
        instead of asking again every interval."""
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
                        doc = {"error": visible(for_people(exc, session.name, session.role))}
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

    async def live_run(self, session: Session, run_id: str) -> dict[str, Any]:
        """A run's status for the live stream."""
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        return {
            "status": run.status,
            "stop_reason": visible(run.stop_reason),
            "waiting": visible(
                f"{run.waiting.code}: {run.waiting.detail}" if run.waiting.code else ""
            ),
            "last_seq": run.last_seq,
        }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
