"""The live view and takeover pages: a desktop's screen as it changes (server-sent events of
the coordinator's `WatchScreen`), and a person's mouse and keyboard while they hold a takeover
(POSTs that become `SendInput`).

The console decides nothing here: every call carries the signed-in user's token, so the
coordinator decides who watches (admins any desktop worker, an owner through a desktop run of
theirs while it holds the desktop), who takes over and who sends input (only the person who
took over). Watching passes the console session's id as the watch's `client`, so the
coordinator's viewer limit counts per console session.

A view page is refused, with the coordinator's reason, when its first look is: the page opens
the watch, waits for its first frame and hands that open call to the page's stream (one
viewing, as the audit shows it, not a look and then another). A stream without such a call
(the browser reconnecting) opens its own, and a refusal before its first frame is an HTTP
error, after it an `end` event. The view pages load no input code; the takeover page's input
goes only to `SendInput` with that takeover's id, which the coordinator runs only for the
person holding it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import grpc
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from coordinator.console.auth import _same_origin
from coordinator.console.human_input import MAX_BODY, InputRefused, parse_body
from coordinator.console.pages import Pages, Refused, form_reason, status_of
from coordinator.console.sessions import Session, tokens_equal
from coordinator.console.wording import for_people
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    NotFoundError,
    TooManyFailuresError,
    UnavailableError,
    from_rpc_error,
)
from shared.gen.deskfleet.v1 import admin_pb2, desktop_pb2, runs_pb2
from shared.states import STOPPED
from shared.text import visible

ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # the coordinator's ids (and plain worker names)
JPEG = b"\xff\xd8\xff"
FIRST_FRAME_WAIT = 20.0  # the coordinator gives a worker 15 s for its first grab and encode
SILENCE = 20.0  # the coordinator sends a keepalive every 5 s; nothing for this long: gone
HANDOFF_TTL = 15.0  # seconds a page's first look waits for the page's stream to take it
TAKEOVERS_KEPT = 8  # takeovers remembered per session (their worker, run and display)
MAX_NOTE = 2000  # characters of a hand back's note, as the coordinator takes it
AUDIT_DAYS = 7  # how far back an admin's takeover begun elsewhere is looked up
HUMAN_ACTIVE = "human_active"

Target = tuple[str, str, int]  # (worker, run, display): one of worker and run


@dataclass(eq=False)
class _Handoff:
    """A page's first look, open, waiting for that page's stream."""

    session_id: str
    target: Target
    call: Any  # grpc.aio.UnaryStreamCall
    first: desktop_pb2.LiveFrame
    timer: asyncio.TimerHandle | None = None


class ScreenPages(Pages):
    """Live views of a desktop, and takeovers."""

    @functools.cached_property
    def _handoffs(self) -> dict[str, _Handoff]:
        return {}

    @functools.cached_property
    def _takeovers(self) -> dict[str, dict[str, desktop_pb2.Takeover]]:
        return {}  # by session id, then takeover id

    # --- view pages ----------------------------------------------------------------------

    async def worker_screen(self, request: Request, session: Session) -> Response:
        worker_id = checked_id(request.path_params["id"], "worker")
        nonce, first = await self._look(session, (worker_id, "", 0))
        return await self.page(
            request,
            session,
            "screen.html",
            title=f"Worker {worker_id}: live view",
            explain="View only: nothing on this page sends input to the desktop.",
            stream=_stream_url((worker_id, "", 0), nonce),
            first=first,
            back=f"/workers/{worker_id}",
            back_text=f"Back to worker {worker_id}",
        )

    async def run_screen(self, request: Request, session: Session) -> Response:
        run_id = checked_id(request.path_params["id"], "run")
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        if run.kind != "desktop":
            raise Refused(409, f"run {run_id} is not a desktop run: it has no screen")
        nonce, first = await self._look(session, ("", run_id, 0))
        return await self.page(
            request,
            session,
            "screen.html",
            title=f"Run {run.title or run.id}: live view",
            explain=(
                f"The screen of worker {first.worker_id}, view only: nothing on this page sends"
                " input to the desktop."
            ),
            stream=_stream_url(("", run_id, 0), nonce),
            first=first,
            back=f"/runs/{run_id}",
            back_text=f"Back to run {run_id}",
        )

    async def screen_stream(self, request: Request, session: Session) -> Response:
        """Server-sent events: `frame` for each new frame, keepalive comments between, `end`
        with the coordinator's reason (in the console's words) when the view ends."""
        target = stream_target(request.query_params)
        handoff = self._claim(request.query_params.get("t", ""), session, target)
        if handoff is not None:
            call, first = handoff.call, handoff.first
        else:
            call = self._watch(session, target)
            first = await self._first_frame(call)
        return StreamingResponse(
            self._relay(session, call, first),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
            # Also when the browser left before the first byte (the relay never started).
            background=BackgroundTask(call.cancel),
        )

    # --- takeovers ------------------------------------------------------------------------

    async def run_takeover_confirm(self, request: Request, session: Session) -> Response:
        run_id = checked_id(request.path_params["id"], "run")
        return await self._confirm(request, session, f"/runs/{run_id}", f"run {run_id}")

    async def worker_takeover_confirm(self, request: Request, session: Session) -> Response:
        worker_id = checked_id(request.path_params["id"], "worker")
        return await self._confirm(request, session, f"/workers/{worker_id}", f"worker {worker_id}")

    async def _confirm(self, request: Request, session: Session, back: str, what: str) -> Response:
        return await self.page(
            request,
            session,
            "takeover_confirm.html",
            what=what,
            action=f"{back}/takeover",
            back=back,
            csrf=session.csrf,
        )

    async def run_takeover(self, request: Request, session: Session) -> Response:
        run_id = checked_id(request.path_params["id"], "run")
        return await self._take(request, session, desktop_pb2.TakeOverRequest(run=run_id))

    async def worker_takeover(self, request: Request, session: Session) -> Response:
        worker_id = checked_id(request.path_params["id"], "worker")
        return await self._take(request, session, desktop_pb2.TakeOverRequest(worker=worker_id))

    async def _take(
        self, request: Request, session: Session, asked: desktop_pb2.TakeOverRequest
    ) -> Response:
        form = await request.form()
        asked.reason = form_reason(form)
        if len(asked.reason) > MAX_NOTE:
            raise Refused(400, f"reason: at most {MAX_NOTE} characters")
        took = await self.rpc.call(session.token, self.rpc.desktop.TakeOver, asked)
        self._remember(session, took)
        paused = f"run {took.run_id} waits as human_active" if took.run_id else "no run held it"
        session.flash(
            "ok",
            f"takeover {took.id}: you hold worker {took.worker_id}'s desktop ({paused});"
            " hand it back when you are done",
        )
        return self.redirect(f"/takeovers/{took.id}")

    async def takeover_page(self, request: Request, session: Session) -> Response:
        takeover_id = checked_id(request.path_params["id"], "takeover")
        took = await self._find_takeover(session, takeover_id)
        target: Target = (
            (took.worker_id, "", took.display) if not took.run_id else ("", took.run_id, 0)
        )
        problem, nonce, first = "", "", None
        try:
            # No events: the coordinator only checks that this person holds it, that it is
            # active and that no kill switch applies (nothing reaches the worker).
            await self.rpc.call(
                session.token,
                self.rpc.desktop.SendInput,
                desktop_pb2.SendInputRequest(takeover=takeover_id),
            )
            nonce, first = await self._look(session, target)
        except (AuthenticationError, TooManyFailuresError):
            raise
        except DeskfleetError as exc:
            # The hand back form is shown whatever happened to the view: a person holding a
            # desktop can always give it back.
            problem = for_people(exc, session.name, session.role)
        held = f"run {took.run_id}" if took.run_id else f"worker {took.worker_id}"
        return await self.page(
            request,
            session,
            "screen.html",
            title=f"Takeover {took.id}: worker {took.worker_id}",
            explain=(
                f"You hold the desktop's controls ({held} waits while you do). Click the screen"
                " to give it the keyboard; your mouse and keys go to the desktop until you hand"
                " it back."
            ),
            takeover=took,
            problem=problem,
            stream=_stream_url(target, nonce) if nonce else "",
            first=first,
            back=f"/runs/{took.run_id}" if took.run_id else f"/workers/{took.worker_id}",
            back_text=f"Back to {held}",
            csrf=session.csrf,
        )

    async def takeover_input(self, request: Request, session: Session) -> Response:
        """The takeover page's events, checked and sent with `SendInput`: {applied} or
        {error} with the status of the refusal."""
        try:
            _same_origin(request)
            if not tokens_equal(request.headers.get("x-csrf-token", ""), session.csrf):
                raise Refused(403, "refused: the CSRF token is missing or wrong (reload the page)")
            takeover_id = checked_id(request.path_params["id"], "takeover")
            length = request.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                raise InputRefused(413, f"input: a body is at most {MAX_BODY} bytes")
            events = parse_body(await request.body(), request.headers.get("content-type", ""))
            done = await self.rpc.call(
                session.token,
                self.rpc.desktop.SendInput,
                desktop_pb2.SendInputRequest(takeover=takeover_id, events=events),
            )
        except (Refused, InputRefused) as exc:
            return _json_error(exc.status, str(exc))
        except (AuthenticationError, TooManyFailuresError):
            raise
        except DeskfleetError as exc:
            return _json_error(status_of(exc), for_people(exc, session.name, session.role))
        return JSONResponse({"applied": done.applied}, headers={"cache-control": "no-store"})

    async def takeover_handback(self, request: Request, session: Session) -> Response:
        takeover_id = checked_id(request.path_params["id"], "takeover")
        form = await request.form()
        note = str(form.get("note") or "").strip()
        if len(note) > MAX_NOTE:
            raise Refused(400, f"note: at most {MAX_NOTE} characters")
        back = await self.rpc.call(
            session.token,
            self.rpc.desktop.HandBack,
            desktop_pb2.HandBackRequest(takeover=takeover_id, note=note),
        )
        self._takeovers.get(session.id, {}).pop(takeover_id, None)
        goes_on = f"; run {back.run_id} goes on" if back.run_id else ""
        session.flash(
            "ok", f"takeover {back.id} handed back after {back.events} input event(s){goes_on}"
        )
        return self.redirect(
            f"/runs/{back.run_id}" if back.run_id else f"/workers/{back.worker_id}"
        )

    # --- the watch and its hand-off to the page's stream -------------------------------------

    def _watch(self, session: Session, target: Target) -> Any:
        worker, run, display = target
        return self.rpc.desktop.WatchScreen(
            desktop_pb2.WatchScreenRequest(
                worker=worker, run=run, display=display, client=session.id
            ),
            metadata=self.rpc.metadata(session.token),
        )

    async def _first_frame(self, call: Any) -> desktop_pb2.LiveFrame:
        """The watch's first frame, or the coordinator's refusal (the call is then ended)."""
        try:
            async with asyncio.timeout(FIRST_FRAME_WAIT):
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        raise UnavailableError("the live view ended before its first frame")
                    if message.seq:
                        frame: desktop_pb2.LiveFrame = message
                        return frame
        except TimeoutError:
            call.cancel()
            raise UnavailableError(
                f"no frame from the coordinator within {FIRST_FRAME_WAIT:.0f} s"
            ) from None
        except grpc.RpcError as exc:
            call.cancel()
            raise from_rpc_error(exc, self.rpc.config.coordinator) from exc
        except BaseException:
            call.cancel()
            raise

    async def _look(self, session: Session, target: Target) -> tuple[str, desktop_pb2.LiveFrame]:
        """Open the watch a page will show, for the page's stream to take (by the nonce)."""
        call = self._watch(session, target)
        first = await self._first_frame(call)
        nonce = secrets.token_urlsafe(18)
        handoff = _Handoff(session.id, target, call, first)
        handoff.timer = asyncio.get_running_loop().call_later(
            HANDOFF_TTL, self._expire, nonce, handoff
        )
        self._handoffs[nonce] = handoff
        return nonce, first

    def _expire(self, nonce: str, handoff: _Handoff) -> None:
        if self._handoffs.get(nonce) is handoff:
            del self._handoffs[nonce]
            handoff.call.cancel()  # the page's stream never came

    def _claim(self, nonce: str, session: Session, target: Target) -> _Handoff | None:
        """The look a page opened, for that page's stream only: the same session and screen."""
        handoff = self._handoffs.get(nonce) if nonce else None
        if handoff is None or handoff.session_id != session.id or handoff.target != target:
            return None
        del self._handoffs[nonce]
        if handoff.timer is not None:
            handoff.timer.cancel()
        return handoff

    async def _relay(
        self, session: Session, call: Any, first: desktop_pb2.LiveFrame
    ) -> AsyncIterator[bytes]:
        try:
            yield b"retry: 5000\n\n"
            message: Any = first
            while True:
                if self.sessions.get(session.id) is None:
                    yield _sse("end", {"error": "you are signed out: the live view ended"})
                    return
                if message is grpc.aio.EOF:
                    yield _sse("end", {"error": "the coordinator ended the live view"})
                    return
                if not message.seq:
                    yield b": keep-alive\n\n"
                elif message.media_type != "image/jpeg" or not message.data.startswith(JPEG):
                    yield _sse("end", {"error": "the coordinator sent a frame that is not a JPEG"})
                    return
                else:
                    yield _sse("frame", frame_doc(message))
                try:
                    message = await asyncio.wait_for(call.read(), SILENCE)
                except TimeoutError:
                    yield _sse(
                        "end", {"error": f"the coordinator sent nothing for {SILENCE:.0f} s"}
                    )
                    return
        except grpc.RpcError as exc:
            error = from_rpc_error(exc, self.rpc.config.coordinator)
            if isinstance(error, (AuthenticationError, TooManyFailuresError)):
                self.sessions.end_for_token(session.token)
            yield _sse("end", {"error": visible(for_people(error, session.name, session.role))})
        finally:
            call.cancel()

    # --- which takeover ----------------------------------------------------------------------

    def _remember(self, session: Session, took: desktop_pb2.Takeover) -> None:
        for sid in [sid for sid in self._takeovers if self.sessions.get(sid) is None]:
            del self._takeovers[sid]  # sessions that ended or expired
        mine = self._takeovers.setdefault(session.id, {})
        mine.pop(took.id, None)
        mine[took.id] = took
        while len(mine) > TAKEOVERS_KEPT:
            del mine[next(iter(mine))]

    async def _find_takeover(self, session: Session, takeover_id: str) -> desktop_pb2.Takeover:
        """The worker, run and display of a takeover: as this session began it, or one begun
        elsewhere (`deskfleet desktop takeover` prints this page's address) found where the
        user may read it: the journal of their own desktop run that a person holds, or, for
        an admin, the audit log. Whether they hold it is the coordinator's answer later."""
        known = self._takeovers.get(session.id, {}).get(takeover_id)
        if known is not None:
            return known
        found = await self._takeover_in_runs(session, takeover_id)
        if found is None and session.is_admin:
            found = await self._takeover_in_audit(session, takeover_id)
        if found is None:
            raise NotFoundError(f"no takeover {takeover_id!r} of yours is active")
        self._remember(session, found)
        return found

    async def _takeover_in_runs(
        self, session: Session, takeover_id: str
    ) -> desktop_pb2.Takeover | None:
        listed = await self.rpc.call(
            session.token,
            self.rpc.runs.ListRuns,
            runs_pb2.ListRunsRequest(kind="desktop", limit=200),
        )
        held = [r for r in listed.runs if r.status not in STOPPED]
        for run in held:
            if run.waiting.code != HUMAN_ACTIVE:
                continue
            for event in await self.rpc.events_of(session.token, run.id, ("desktop.takeover",)):
                with contextlib.suppress(ValueError):
                    if json.loads(event.data_json).get("takeover") == takeover_id:
                        return desktop_pb2.Takeover(
                            id=takeover_id, worker_id=run.worker_id, run_id=run.id
                        )
        return None

    async def _takeover_in_audit(
        self, session: Session, takeover_id: str
    ) -> desktop_pb2.Takeover | None:
        since = time.time() - AUDIT_DAYS * 86400
        for _ in range(5):  # pages of 10,000 entries
            page = await self.rpc.call(
                session.token,
                self.rpc.admin.ListAudit,
                admin_pb2.ListAuditRequest(since=since, limit=10000),
            )
            for entry in page.entries:
                if entry.action != "desktop.takeover":
                    continue
                with contextlib.suppress(ValueError, AttributeError):
                    detail = json.loads(entry.detail_json)
                    if detail.get("takeover") == takeover_id:
                        return desktop_pb2.Takeover(
                            id=takeover_id,
                            worker_id=entry.target,
                            run_id=str(detail.get("run") or ""),
                        )
            if not page.more or not page.entries:
                return None
            since = page.entries[-1].at
        return None


def checked_id(value: str, what: str) -> str:
    if not ID.fullmatch(value):
        raise Refused(400, f"{what}: an id is letters, digits and _.:- (at most 64), not that")
    return value


def stream_target(query: Any) -> Target:
    """`?worker=ID` or `?run=ID`, and `display` (0..15) with a worker."""
    worker, run = query.get("worker", ""), query.get("run", "")
    if bool(worker) == bool(run):
        raise Refused(400, "name a worker or a run to watch (one of them)")
    display_text = query.get("display", "0")
    if not display_text.isdigit() or not 0 <= int(display_text) <= 15:
        raise Refused(400, "display: a display index in 0..15")
    if worker:
        return (checked_id(worker, "worker"), "", int(display_text))
    return ("", checked_id(run, "run"), 0)


def _stream_url(target: Target, nonce: str) -> str:
    worker, run, display = target
    query: dict[str, str] = {"worker": worker} if worker else {"run": run}
    if worker and display:
        query["display"] = str(display)
    query["t"] = nonce
    return f"/screen/stream?{urlencode(query)}"


def frame_doc(frame: desktop_pb2.LiveFrame) -> dict[str, Any]:
    """A frame as the page takes it: the JPEG's bytes in base64, the display's real pixels
    (what the takeover page translates a pointer to), and when the worker captured it."""
    captured = frame.captured_at.seconds + frame.captured_at.nanos / 1e9
    return {
        "seq": frame.seq,
        "media_type": "image/jpeg",
        "data": base64.b64encode(frame.data).decode("ascii"),
        "width": frame.width,
        "height": frame.height,
        "captured_at": round(captured, 6),
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": visible(message)}, status_code=status, headers={"cache-control": "no-store"}
    )
