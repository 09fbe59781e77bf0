"""The console's web app: server-rendered pages over the coordinator's gRPC API.

Every page and every change is one or a few gRPC calls made with the signed-in user's token:
the coordinator's guard decides what the user may see and do, exactly as for the CLI. The
console adds what a browser needs on top: the session cookie, a CSRF token on every form that
changes something, a Content-Security-Policy without inline script, and escaping of every
value (Jinja2 autoescape, with control characters spelled out by `shared.text.visible`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from coordinator.console import model
from coordinator.console.limits import (
    DEFAULT_LIVE_PER_SESSION,
    DEFAULT_SESSIONS_PER_USER,
    DEFAULT_SIGNIN_FAILURES,
    DEFAULT_SIGNIN_FAILURES_PER_ADDRESS,
)
from coordinator.console.rpc import ConsoleClient, browser_address
from coordinator.console.security import RequestChecks, SecurityHeaders, default_host_names
from coordinator.console.sessions import (
    DEFAULT_TTL,
    Session,
    Sessions,
    cookie_names,
    tokens_equal,
)
from coordinator.security.ratelimit import FailureLimiter
from shared.config import ClientConfig
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    TooManyFailuresError,
    UnavailableError,
)
from shared.gen.deskfleet.v1 import admin_pb2, desktop_pb2, fleet_pb2, runs_pb2
from shared.states import APPROVAL_STATES, RUN_STATES, STOPPED
from shared.text import visible

HERE = Path(__file__).parent
JOURNAL_PAGE = 50
RECENT_ACTIONS = 20  # a worker page's finished attempts
LIVE_INTERVAL = 2.0  # seconds between the live stream's looks at the coordinator


@dataclass(frozen=True)
class ConsoleSettings:
    coordinator: ClientConfig
    session_ttl: float = DEFAULT_TTL
    secure_cookies: bool = False  # set when the console itself is served over TLS
    live_interval: float = LIVE_INTERVAL
    # The name the coordinator's TLS certificate is checked against when the address is not
    # it (the console inside the coordinator dials its own loopback address).
    tls_name: str = ""
    # The names a request's Host may carry (IP addresses are always accepted).
    host_names: frozenset[str] = field(default_factory=default_host_names)
    live_per_session: int = DEFAULT_LIVE_PER_SESSION
    sessions_per_user: int = DEFAULT_SESSIONS_PER_USER
    signin_failures: int = DEFAULT_SIGNIN_FAILURES
    signin_failures_per_address: int = DEFAULT_SIGNIN_FAILURES_PER_ADDRESS


def _finalize(value: Any) -> Any:
    """Every value a template prints: control characters spelled out, then autoescaped."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return "" if value is None else value
    return visible(value)


def _multiline(text: Any) -> Markup:
    """A block of text (shown in <pre>): line breaks kept, every other control spelled out."""
    return Markup(escape(visible(str(text), multiline=True)))  # escaped here, not by finalize


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = model.when
    env.filters["duration"] = model.duration
    env.filters["scope_text"] = model.scope_text
    env.filters["pretty_json"] = model.pretty_json
    env.filters["multiline"] = _multiline
    env.filters["href"] = model.href
    env.globals["DESKTOP_ACTIONS"] = model.DESKTOP_ACTIONS
    env.globals["grid_step"] = model.grid_step
    return env


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


class Refused(Exception):
    """A request the console itself refuses (no coordinator call): status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


STATUS_OF: list[tuple[type[DeskfleetError], int]] = [
    (AuthenticationError, 401),
    (PermissionDeniedError, 403),
    (NotFoundError, 404),
    (InvalidArgumentError, 400),
    (FailedPreconditionError, 409),
    (UnavailableError, 502),
]


def _status_of(exc: DeskfleetError) -> int:
    return next((code for cls, code in STATUS_OF if isinstance(exc, cls)), 500)


Handler = Callable[[Request, Session], Awaitable[Response]]


class Console:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings.session_ttl, per_user=settings.sessions_per_user)
        self.session_cookie, self.pre_cookie = cookie_names(settings.secure_cookies)
        self._failed_by_browser = FailureLimiter(settings.signin_failures)
        self._failed_by_address = FailureLimiter(settings.signin_failures_per_address)
        self.looks = LiveLooks(self.live_state, settings.live_interval)
        self.client: ConsoleClient | None = None
        self.env = _templates()

    @property
    def rpc(self) -> ConsoleClient:
        if self.client is None:  # made on the server's event loop (grpc.aio binds to it)
            self.client = ConsoleClient(self.settings.coordinator, tls_name=self.settings.tls_name)
        return self.client

    async def shutdown(self) -> None:
        if self.client is not None:
            await self.client.close()

    # --- rendering ---------------------------------------------------------------------------

    def render(
        self, request: Request, name: str, http_status: int = 200, **context: Any
    ) -> HTMLResponse:
        session: Session | None = context.get("session")
        context.setdefault("flashes", session.take_flashes() if session else [])
        context.setdefault("pending", None)
        context.setdefault("fleet_stopped", False)
        context["request"] = request
        context["path"] = request.url.path
        html = self.env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=http_status)

    async def chrome(self, session: Session) -> dict[str, Any]:
        """What every page shows: the pending approvals count and whether the fleet is stopped."""
        token = session.token
        approvals, kills = await asyncio.gather(
            self.rpc.call(
                token,
                self.rpc.approvals.ListApprovals,
                desktop_pb2.ListApprovalsRequest(status="pending", limit=1000),
            ),
            self.rpc.call(token, self.rpc.kills.Status, desktop_pb2.KillStatusRequest()),
        )
        return {
            "pending": len(approvals.approvals),
            "fleet_stopped": any(k.scope == "fleet" and k.engaged for k in kills.switches),
        }

    async def page(self, request: Request, session: Session, name: str, **context: Any) -> Response:
        context.update(await self.chrome(session))
        return self.render(request, name, session=session, **context)

    def redirect(self, url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=303)

    # --- the session wrapper -----------------------------------------------------------------

    def session_of(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(self.session_cookie))

    def signed_in(self, handler: Handler, *, change: bool = False) -> Callable[..., Any]:
        """A handler that needs a session; `change=True`: a POST that must carry its CSRF token."""

        async def endpoint(request: Request) -> Response:
            browser_address.set(_client_of(request))
            session = self.session_of(request)
            if session is None:
                if change:
                    return self.render(
                        request, "error.html", 401, message="sign in first: no session"
                    )
                return self.redirect("/signin?" + urlencode({"next": request.url.path}))
            try:
                if change:
                    await self.check_change(request, session)
                return await handler(request, session)
            except Refused as exc:
                return self.render(
                    request, "error.html", exc.status, session=session, message=str(exc)
                )
            except (AuthenticationError, TooManyFailuresError) as exc:
                # The token was rotated or the user removed: the session is over.
                self.sessions.end_for_token(session.token)
                response = self.render(request, "error.html", 401, message=str(exc))
                self._forget(response, self.session_cookie)
                return response
            except DeskfleetError as exc:
                return self.render(
                    request, "error.html", _status_of(exc), session=session, message=str(exc)
                )

        return endpoint

    async def check_change(self, request: Request, session: Session) -> None:
        _same_origin(request)
        form = await request.form()
        if not tokens_equal(str(form.get("csrf") or ""), session.csrf):
            raise Refused(
                403, "refused: the form's CSRF token is missing or wrong (reload the page)"
            )

    # --- sign-in -----------------------------------------------------------------------------

    async def signin_form(self, request: Request) -> Response:
        if self.session_of(request) is not None:
            return self.redirect("/fleet")
        pre = request.cookies.get(self.pre_cookie) or _random()
        response = self.render(
            request, "signin.html", pre=pre, next=_local(request.query_params.get("next"))
        )
        self._cookie(response, self.pre_cookie, pre, max_age=3600)
        return response

    def _signin_wait(self, browser: str, address: str) -> float | None:
        """Seconds this browser (or its address) must wait before its next sign-in, once it
        has failed too often: such a sign-in is refused here, never sent to the coordinator,
        which then never counts it against the console's own address."""
        waits = [
            w
            for w in (
                self._failed_by_browser.spent(browser),
                self._failed_by_address.spent(address),
            )
            if w
        ]
        return max(waits) if waits else None

    async def signin(self, request: Request) -> Response:
        address = _client_of(request)
        browser_address.set(address)
        form = await request.form()
        try:
            _same_origin(request)
        except Refused as exc:
            return self.render(request, "error.html", exc.status, message=str(exc))
        pre = request.cookies.get(self.pre_cookie, "")
        if not tokens_equal(str(form.get("pre") or ""), pre):
            return self.render(
                request,
                "signin.html",
                403,
                pre=pre,
                error="the sign-in form expired: try again",
                next="/fleet",
            )
        token = str(form.get("token") or "").strip()
        nxt = _local(str(form.get("next") or ""))
        browser = f"{address} {pre}"
        error, status = "", 401
        wait = self._signin_wait(browser, address)
        if wait is not None:
            error, status = (
                f"too many failed sign-ins from this browser: try again in {wait:.0f} s",
                429,
            )
        elif not token:
            error = "paste a user token (dfu_...)"
        else:
            try:
                who = await self.rpc.call(token, self.rpc.admin.WhoAmI, admin_pb2.WhoAmIRequest())
            except DeskfleetError as exc:
                error = f"sign-in refused: {exc}"
            else:
                if who.role not in ("admin", "owner"):
                    error = (
                        f"sign-in refused: a {who.role} credential cannot sign in; use a user token"
                    )
            if error:
                self._failed_by_browser.failed(browser)
                self._failed_by_address.failed(address)
        if error:
            # The same form token again: the browser's failures keep counting as one browser's.
            return self.render(request, "signin.html", status, pre=pre, error=error, next=nxt)
        session = self.sessions.create(token=token, user_id=who.id, name=who.name, role=who.role)
        signed = self.redirect(nxt)
        self._cookie(
            signed, self.session_cookie, session.id, max_age=int(self.settings.session_ttl)
        )
        self._forget(signed, self.pre_cookie)
        return signed

    async def signout(self, request: Request, session: Session) -> Response:
        self.sessions.end(session.id)
        response = self.redirect("/signin")
        self._forget(response, self.session_cookie)
        return response

    def _forget(self, response: Response, name: str) -> None:
        response.delete_cookie(
            name, path="/", secure=self.settings.secure_cookies, httponly=True, samesite="strict"
        )

    def _cookie(self, response: Response, name: str, value: str, *, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.settings.secure_cookies,
        )

    # --- fleet -------------------------------------------------------------------------------

    async def fleet(self, request: Request, session: Session) -> Response:
        """Counts of the whole fleet and one page of its workers, both read by the coordinator
        (keyset pages and filters in the store): the cost does not grow with the fleet."""
        q = request.query_params
        rpc, token = self.rpc, session.token
        filters = {k: q.get(k, "") for k in ("q", "state", "capability", "online")}
        after = q.get("after", "")
        rows: Awaitable[fleet_pb2.ListWorkersResponse | fleet_pb2.WorkerStatus]
        if session.is_admin:  # listing with filters (and revoked workers) is an admin's
            listing = fleet_pb2.ListWorkersRequest(
                limit=model.PAGE_SIZE,
                page_token=after,
                state=filters["state"],
                capability=filters["capability"],
                text=filters["q"].strip(),
                include_revoked=filters["state"] == "revoked",
            )
            if filters["online"] in ("yes", "no"):
                listing.online = filters["online"] == "yes"
            rows = rpc.call(token, rpc.fleet.ListWorkers, listing)
        else:
            rows = rpc.call(
                token,
                rpc.fleet.GetWorkerStatus,
                fleet_pb2.GetWorkerStatusRequest(limit=model.PAGE_SIZE, page_token=after),
            )
        status, listed, activity = await asyncio.gather(
            rpc.call(token, rpc.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest(limit=1)),
            rows,
            rpc.call(token, rpc.admin.GetFleetActivity, admin_pb2.FleetActivityRequest()),
        )
        current = {a.worker_id: a for a in activity.actions}
        return await self.page(
            request,
            session,
            "fleet.html",
            status=status,
            workers=list(listed.workers),
            next_after=listed.next_page_token,
            first=not after,
            filters=filters,
            current=current,
            activity=activity,
            query=urlencode([(k, v) for k, v in filters.items() if v]),
        )

    async def worker(self, request: Request, session: Session) -> Response:
        worker_id = request.path_params["id"]
        status = await self.rpc.call(
            session.token, self.rpc.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest()
        )
        worker = next((w for w in status.workers if w.id == worker_id), None)
        if worker is None and session.is_admin:  # revoked workers are not in the status rows
            worker = await self.rpc.call(
                session.token, self.rpc.fleet.GetWorker, fleet_pb2.WorkerRef(id=worker_id)
            )
        if worker is None:
            raise NotFoundError(f"worker {worker_id} not found")
        activity = await self.rpc.call(
            session.token,
            self.rpc.admin.GetFleetActivity,
            admin_pb2.FleetActivityRequest(worker=worker_id, recent=RECENT_ACTIONS),
        )
        kills = await self.rpc.call(
            session.token, self.rpc.kills.Status, desktop_pb2.KillStatusRequest()
        )
        return await self.page(
            request,
            session,
            "worker.html",
            worker=worker,
            actions=[a for a in activity.actions if a.worker_id == worker_id],
            recent=activity.recent,
            fleet_wide=activity.fleet_wide,
            switches=[k for k in kills.switches if k.target == worker_id or k.scope == "fleet"],
            csrf=session.csrf,
        )

    async def worker_confirm(self, request: Request, session: Session) -> Response:
        worker_id, op = request.path_params["id"], request.path_params["op"]
        if op not in WORKER_OPS:
            raise Refused(404, f"no such worker operation: {op}")
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"{WORKER_OPS[op][0]} worker {worker_id}?",
            explain=WORKER_OPS[op][1],
            action=f"/workers/{worker_id}/{op}",
            button=WORKER_OPS[op][0],
            back=f"/workers/{worker_id}",
            csrf=session.csrf,
            reason=False,
        )

    async def worker_change(self, request: Request, session: Session) -> Response:
        worker_id, op = request.path_params["id"], request.path_params["op"]
        method = {
            "drain": self.rpc.fleet.DrainWorker,
            "undrain": self.rpc.fleet.UndrainWorker,
            "revoke": self.rpc.fleet.RevokeWorker,
        }.get(op)
        if method is None:
            raise Refused(404, f"no such worker operation: {op}")
        info = await self.rpc.call(session.token, method, fleet_pb2.WorkerRef(id=worker_id))
        session.flash("ok", f"worker {info.name or info.id}: {info.state}")
        return self.redirect(f"/workers/{worker_id}")

    # --- runs --------------------------------------------------------------------------------

    async def runs(self, request: Request, session: Session) -> Response:
        q = request.query_params
        filters = {k: q.get(k, "") for k in ("status", "kind", "owner", "q")}
        limit = min(max(model.parse_int(q.get("limit"), 200), 1), 1000)
        # Whose runs is the coordinator's decision: an owner naming anyone else is refused
        # there, not filtered here.
        listed = await self.rpc.call(
            session.token,
            self.rpc.runs.ListRuns,
            runs_pb2.ListRunsRequest(
                limit=limit,
                status=filters["status"],
                kind=filters["kind"],
                owner=filters["owner"].strip(),
            ),
        )
        shown = model.filter_runs(listed.runs, text=filters["q"])
        page = model.page_of(shown, model.parse_int(q.get("page"), 1))
        return await self.page(
            request,
            session,
            "runs.html",
            page=page,
            filters=filters,
            kinds=RUN_KINDS,
            run_states=[str(s) for s in RUN_STATES],
            query=_query_without_page(request),
        )

    async def run(self, request: Request, session: Session) -> Response:
        run_id = request.path_params["id"]
        q = request.query_params
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        after = max(model.parse_int(q.get("after"), 0), 0)
        events = await self.rpc.journal_page(session.token, run_id, after, JOURNAL_PAGE)
        search = q.get("search", "").strip()
        matches: runs_pb2.SearchJournalResponse | None = None
        if search:
            matches = await self.rpc.call(
                session.token,
                self.rpc.journal.SearchJournal,
                runs_pb2.SearchJournalRequest(
                    run_id=run_id, text=search, cursor=q.get("cursor", ""), limit=20
                ),
            )
        report = None
        desktop_runs: list[str] = []
        if run.kind == "research":
            found = await self.rpc.events_of(session.token, run_id, ("research.report",))
            report = model.research_report(found[-1].data_json) if found else None
        elif run.kind == "goal":
            found = await self.rpc.events_of(session.token, run_id, ("goal.tool_result",))
            desktop_runs = model.desktop_runs_of(found)
        return await self.page(
            request,
            session,
            "run.html",
            run=run,
            report=report,
            desktop_runs=desktop_runs,
            replayable=any(a.kind.startswith("desktop.") for a in run.actions),
            timeline=model.timeline(run.timeline),
            events=events,
            after=after,
            next_after=events[-1].seq if len(events) >= JOURNAL_PAGE else None,
            search=search,
            matches=matches,
            stopped=run.status in STOPPED,
            csrf=session.csrf,
        )

    async def replay(self, request: Request, session: Session) -> Response:
        run_id = request.path_params["id"]
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        results: dict[str, dict[str, Any]] = {}
        for event in await self.rpc.events_of(session.token, run_id, ("receipt",)):
            data = json.loads(event.data_json)
            action_id = str(data.get("action", ""))
            if "archive" in data:  # a bulky result: the journal holds a preview only
                data = json.loads(await self.rpc.entry_text(session.token, run_id, event.seq))
            result = data.get("result")
            if isinstance(result, dict):
                results[action_id] = result  # the newest attempt's
        return await self.page(
            request, session, "replay.html", run=run, frames=model.replay(run.actions, results)
        )

    async def run_confirm(self, request: Request, session: Session) -> Response:
        run_id, op = request.path_params["id"], request.path_params["op"]
        if op not in RUN_OPS:
            raise Refused(404, f"no such run operation: {op}")
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"{RUN_OPS[op][0]} run {run_id}?",
            explain=RUN_OPS[op][1],
            action=f"/runs/{run_id}/{op}",
            button=RUN_OPS[op][0],
            back=f"/runs/{run_id}",
            csrf=session.csrf,
            reason=False,
        )

    async def run_change(self, request: Request, session: Session) -> Response:
        run_id, op = request.path_params["id"], request.path_params["op"]
        rpc = self.rpc
        if op == "guide":
            form = await request.form()
            text = str(form.get("text") or "")
            if not text.strip():
                raise Refused(400, "guidance: write what the run should know")
            done = await rpc.call(
                session.token, rpc.runs.GuideRun, runs_pb2.GuideRunRequest(id=run_id, text=text)
            )
            session.flash("ok", f"guidance queued ({done.queued} waiting)")
            return self.redirect(f"/runs/{run_id}")
        if op == "kill":
            form = await request.form()
            switch = await rpc.call(
                session.token,
                rpc.kills.Engage,
                desktop_pb2.EngageKillRequest(run=run_id, reason=_reason(form)),
            )
            session.flash("ok", f"kill switch {switch.id} engaged for run {run_id}")
            return self.redirect("/kill")
        method = {
            "cancel": rpc.runs.CancelRun,
            "retry": rpc.runs.RetryRun,
            "abandon": rpc.runs.AbandonRun,
        }.get(op)
        if method is None:
            raise Refused(404, f"no such run operation: {op}")
        run = await rpc.call(session.token, method, runs_pb2.RunRef(id=run_id))
        session.flash("ok", f"run {run.id}: {run.status}")
        return self.redirect(f"/runs/{run_id}")

    async def artifact(self, request: Request, session: Session) -> Response:
        run_id, sha = request.path_params["id"], request.path_params["sha"]
        art = await self.rpc.call(
            session.token,
            self.rpc.desktop.GetArtifact,
            desktop_pb2.GetArtifactRequest(run_id=run_id, sha256=sha),
        )
        media = (
            art.info.media_type
            if art.info.media_type in IMAGE_TYPES
            else "application/octet-stream"
        )
        return Response(
            art.data,
            media_type=media,
            # Not kept by the browser: a screen must not outlive the session that saw it.
            headers={"cache-control": "no-store", "content-disposition": "inline"},
        )

    # --- approvals ---------------------------------------------------------------------------

    async def approvals(self, request: Request, session: Session) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in APPROVAL_STATUSES:
            raise Refused(400, f"status: one of {', '.join(APPROVAL_STATUSES)}")
        listed = await self.rpc.call(
            session.token,
            self.rpc.approvals.ListApprovals,
            desktop_pb2.ListApprovalsRequest(status=status, limit=200),
        )
        return await self.page(
            request,
            session,
            "approvals.html",
            approvals=listed.approvals,
            status=status,
            statuses=APPROVAL_STATUSES,
        )

    async def approval(self, request: Request, session: Session) -> Response:
        approval_id = request.path_params["id"]
        approval = await self._approval(session, approval_id)
        worker: fleet_pb2.WorkerInfo | None = None
        if session.is_admin:  # the worker's displays size the drawing (admins answer)
            with contextlib.suppress(NotFoundError):
                worker = await self.rpc.call(
                    session.token,
                    self.rpc.fleet.GetWorker,
                    fleet_pb2.WorkerRef(id=approval.worker_id),
                )
        shown = list(approval.requested.displays) or [0]
        display = None
        if worker is not None:
            display = next((d for d in worker.displays if d.index == shown[0]), None)
        requested = approval.requested
        peek = await self._shown_peek(session, approval)
        if peek is not None:  # the screen as it was captured: its real size is the surface's
            display = fleet_pb2.Display(index=peek.display, width=peek.width, height=peek.height)
        return await self.page(
            request,
            session,
            "approval.html",
            approval=approval,
            worker=worker,
            display=display,
            peek=peek,
            region=requested.region if requested.HasField("region") else None,
            actions=list(requested.actions) or list(model.DESKTOP_ACTIONS),
            csrf=session.csrf,
        )

    async def _approval(self, session: Session, approval_id: str) -> desktop_pb2.Approval:
        for status in APPROVAL_STATUSES:
            listed = await self.rpc.call(
                session.token,
                self.rpc.approvals.ListApprovals,
                desktop_pb2.ListApprovalsRequest(status=status, limit=1000),
            )
            found: desktop_pb2.Approval | None = next(
                (a for a in listed.approvals if a.id == approval_id), None
            )
            if found is not None:
                return found
        raise NotFoundError(f"approval {approval_id} not found")

    async def approval_change(self, request: Request, session: Session) -> Response:
        approval_id, op = request.path_params["id"], request.path_params["op"]
        form = await request.form()
        if op == "deny":
            answer = await self.rpc.call(
                session.token,
                self.rpc.approvals.Deny,
                desktop_pb2.DenyRequest(id=approval_id, reason=_reason(form)),
            )
            session.flash("ok", f"approval {answer.id} denied")
            return self.redirect("/approvals")
        if op == "peek":
            peek = await self.rpc.call(
                session.token,
                self.rpc.approvals.PeekScreen,
                desktop_pb2.PeekScreenRequest(id=approval_id),
            )
            session.keep_peek(peek)
            session.flash(
                "ok",
                f"screen of display {peek.display} captured at {model.when(peek.taken_at)}"
                f" ({peek.width}x{peek.height}); the look is in the audit log",
            )
            return self.redirect(f"/approvals/{approval_id}#screen")
        if op != "approve":
            raise Refused(404, f"no such approval operation: {op}")
        scope = approve_scope(form)
        answer = await self.rpc.call(
            session.token,
            self.rpc.approvals.Approve,
            desktop_pb2.ApproveRequest(id=approval_id, scope=scope, reason=_reason(form)),
        )
        session.flash("ok", f"approval {answer.id} approved: {model.scope_text(answer.granted)}")
        return self.redirect(f"/approvals/{approval_id}")

    async def _shown_peek(
        self, session: Session, approval: desktop_pb2.Approval
    ) -> desktop_pb2.ScreenPeek | None:
        """The screen this session peeked for the approval, while it may still be shown: the
        approval is pending and no kill switch applies to it. Otherwise it is dropped."""
        peek = session.peeks.get(approval.id)
        if peek is None:
            return None
        if approval.status == "pending":
            kills = await self.rpc.call(
                session.token, self.rpc.kills.Status, desktop_pb2.KillStatusRequest()
            )
            if not any(_stops(k, approval) for k in kills.switches):
                return peek
        session.peeks.pop(approval.id, None)
        return None

    async def approval_screen(self, request: Request, session: Session) -> Response:
        """The image this session peeked for the approval (never another session's), only
        while the approval is pending and no kill switch applies to it."""
        approval_id = request.path_params["id"]
        if approval_id not in session.peeks:
            raise Refused(404, "no screen captured for this approval: use “Show the screen”")
        peek = await self._shown_peek(session, await self._approval(session, approval_id))
        if peek is None:
            raise Refused(
                410,
                "the screen is no longer shown: the approval is answered or ended, or a kill"
                " switch stops its desktop",
            )
        return Response(
            peek.data,
            media_type=peek.media_type,
            headers={"cache-control": "no-store", "content-disposition": "inline"},
        )

    # --- kill switch -------------------------------------------------------------------------

    async def kill(self, request: Request, session: Session) -> Response:
        show_all = request.query_params.get("all") == "1"
        status = await self.rpc.call(
            session.token,
            self.rpc.kills.Status,
            desktop_pb2.KillStatusRequest(include_released=show_all),
        )
        return await self.page(
            request,
            session,
            "kill.html",
            switches=status.switches,
            local=status.local,
            local_count=status.local_count,
            show_all=show_all,
            csrf=session.csrf,
        )

    async def kill_engage(self, request: Request, session: Session) -> Response:
        form = await request.form()
        target = str(form.get("target") or "fleet")
        worker = str(form.get("worker") or "").strip() if target == "worker" else ""
        run = str(form.get("run") or "").strip() if target == "run" else ""
        if (target == "worker" and not worker) or (target == "run" and not run):
            raise Refused(400, f"name the {target} to stop")
        switch = await self.rpc.call(
            session.token,
            self.rpc.kills.Engage,
            desktop_pb2.EngageKillRequest(worker=worker, run=run, reason=_reason(form)),
        )
        where = switch.scope + (f" {switch.target}" if switch.target else "")
        session.flash("ok", f"kill switch {switch.id} engaged for the {where}")
        return self.redirect("/kill")

    async def kill_confirm(self, request: Request, session: Session) -> Response:
        switch_id = request.path_params["id"]
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"Release kill switch {switch_id}?",
            explain="Desktop input may resume; desktop runs it stopped must be approved again.",
            action=f"/kill/{switch_id}/release",
            button="Release",
            back="/kill",
            csrf=session.csrf,
            reason=True,
        )

    async def kill_release(self, request: Request, session: Session) -> Response:
        switch_id = request.path_params["id"]
        form = await request.form()
        await self.rpc.call(
            session.token,
            self.rpc.kills.Release,
            desktop_pb2.ReleaseKillRequest(id=switch_id, reason=_reason(form)),
        )
        session.flash("ok", f"kill switch {switch_id} released")
        return self.redirect("/kill")

    # --- audit -------------------------------------------------------------------------------

    async def audit(self, request: Request, session: Session) -> Response:
        q = request.query_params
        filters = {k: q.get(k, "") for k in ("action", "actor", "target", "hours")}
        hours = model.parse_float(filters["hours"], 0.0)
        since = time.time() - hours * 3600 if hours > 0 else 0.0
        entries = await self.rpc.call(
            session.token,
            self.rpc.admin.ListAudit,
            admin_pb2.ListAuditRequest(since=since, limit=10000),
        )
        rows = [
            e
            for e in entries.entries
            if (not filters["action"] or filters["action"] in e.action)
            and (not filters["actor"] or filters["actor"] in (e.actor_name, e.actor_id))
            and (not filters["target"] or filters["target"] in e.target)
        ]
        rows.reverse()  # newest first
        page = model.page_of(rows, model.parse_int(q.get("page"), 1))
        return await self.page(
            request,
            session,
            "audit.html",
            page=page,
            filters=filters,
            more=entries.more,
            query=_query_without_page(request),
        )

    # --- live --------------------------------------------------------------------------------

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

    async def home(self, request: Request) -> Response:
        return self.redirect("/fleet" if self.session_of(request) else "/signin")


WORKER_OPS = {
    "drain": ("Drain", "No new work reaches the worker; it stays connected."),
    "undrain": ("Undrain", "The worker takes new work again."),
    "revoke": (
        "Revoke",
        "The worker is cut off at once and its credential is refused from then on."
        " This cannot be undone: the machine must enroll again.",
    ),
}
RUN_OPS = {
    "cancel": ("Cancel", "The run stops; actions in flight are cancelled."),
    "retry": (
        "Retry",
        "The run continues from its checkpoint: no completed effect is replayed, no permission"
        " granted, no budget replenished.",
    ),
    "abandon": ("Abandon", "The run is given up for good; it cannot be retried."),
}
RUN_KINDS = ("plan", "research", "desktop", "goal")
APPROVAL_STATUSES = tuple(str(s) for s in APPROVAL_STATES)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")


def approve_scope(form: FormData) -> desktop_pb2.DesktopScope:
    """The narrowing an approver chose: actions ticked, ttl, count, and the drawn region."""
    scope = desktop_pb2.DesktopScope(
        actions=[str(a) for a in form.getlist("actions") if str(a) in model.DESKTOP_ACTIONS],
        ttl_seconds=max(model.parse_float(form.get("ttl_minutes"), 0.0), 0.0) * 60,
        max_actions=max(model.parse_int(form.get("max_actions"), 0), 0),
    )
    w = model.parse_int(form.get("region_width"), 0)
    h = model.parse_int(form.get("region_height"), 0)
    if w > 0 and h > 0:
        scope.region.CopyFrom(
            desktop_pb2.Region(
                x=model.parse_int(form.get("region_x"), 0),
                y=model.parse_int(form.get("region_y"), 0),
                width=w,
                height=h,
            )
        )
    return scope


def _stops(kill: desktop_pb2.KillSwitch, approval: desktop_pb2.Approval) -> bool:
    """Whether an engaged kill switch applies to the approval's desktop."""
    return kill.engaged and (
        kill.scope == "fleet"
        or (kill.scope == "worker" and kill.target == approval.worker_id)
        or (kill.scope == "run" and kill.target == approval.run_id)
    )


def _reason(form: FormData) -> str:
    return str(form.get("reason") or "").strip()


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _random() -> str:
    import secrets

    return secrets.token_urlsafe(24)


def _client_of(request: Request) -> str:
    """The browser's address as this console's socket sees it (no proxy header is trusted)."""
    return request.client.host if request.client is not None else ""


def _local(target: str | None) -> str:
    """A redirect target on this console only (never another site, never `//host`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/fleet"
    return target


def _same_origin(request: Request) -> None:
    """A change must come from the console's own pages (the browser's Origin, when sent)."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's cross-site form; the CSRF token still decides
        return
    if origin == "null" or urlsplit(origin).netloc != request.headers.get("host", ""):
        raise Refused(403, "refused: the request came from another site")


def _query_without_page(request: Request) -> str:
    return urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "page"])


def create_app(settings: ConsoleSettings) -> Starlette:
    console = Console(settings)
    s = console.signed_in
    routes = [
        Route("/", console.home),
        Route("/signin", console.signin_form, methods=["GET"]),
        Route("/signin", console.signin, methods=["POST"]),
        Route("/signout", s(console.signout, change=True), methods=["POST"]),
        Route("/fleet", s(console.fleet)),
        Route("/workers/{id}", s(console.worker)),
        Route("/workers/{id}/{op}", s(console.worker_confirm), methods=["GET"]),
        Route("/workers/{id}/{op}", s(console.worker_change, change=True), methods=["POST"]),
        Route("/runs", s(console.runs)),
        Route("/runs/{id}", s(console.run)),
        Route("/runs/{id}/artifacts/{sha}", s(console.artifact)),
        Route("/runs/{id}/replay", s(console.replay), methods=["GET"]),
        Route("/runs/{id}/{op}", s(console.run_confirm), methods=["GET"]),
        Route("/runs/{id}/{op}", s(console.run_change, change=True), methods=["POST"]),
        Route("/approvals", s(console.approvals)),
        Route("/approvals/{id}", s(console.approval)),
        Route("/approvals/{id}/screen", s(console.approval_screen), methods=["GET"]),
        Route("/approvals/{id}/{op}", s(console.approval_change, change=True), methods=["POST"]),
        Route("/kill", s(console.kill)),
        Route("/kill/engage", s(console.kill_engage, change=True), methods=["POST"]),
        Route("/kill/{id}/release", s(console.kill_confirm), methods=["GET"]),
        Route("/kill/{id}/release", s(console.kill_release, change=True), methods=["POST"]),
        Route("/audit", s(console.audit)),
        Route("/events", s(console.events)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await console.shutdown()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return app  # wrapped by SecurityHeaders in serve(); tests use the same


def asgi(settings: ConsoleSettings) -> ASGIApp:
    return RequestChecks(SecurityHeaders(create_app(settings)), settings.host_names)
