"""The console's web app: server-rendered pages over the coordinator's gRPC API.

Every page and every change is one or a few gRPC calls made with the signed-in user's token:
the coordinator's guard decides what the user may see and do, exactly as for the CLI. The
console adds what a browser needs on top: the session cookie, a CSRF token on every form that
changes something, a Content-Security-Policy without inline script, and escaping of every
value (Jinja2 autoescape, with control characters spelled out by `shared.text.visible`).

This module is the route table; the handlers live one module per resource (`fleet`, `runs`,
`approvals`, `kill`, `audit`, the live stream in `events`, live views and takeovers of a
desktop in `screens`, sign-in in `auth`) over the
`Pages` base of `pages.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from coordinator.console.approvals import ApprovalPages
from coordinator.console.audit import AuditPages
from coordinator.console.auth import Auth
from coordinator.console.events import LivePages
from coordinator.console.fleet import FleetPages
from coordinator.console.kill import KillPages
from coordinator.console.pages import HERE, ConsoleSettings
from coordinator.console.runs import RunPages
from coordinator.console.screens import ScreenPages
from coordinator.console.security import RequestChecks, SecurityHeaders


class Console(
    Auth, FleetPages, RunPages, ApprovalPages, KillPages, AuditPages, LivePages, ScreenPages
):
    """Every page of the console, one mixin per resource over `Pages`."""

    async def home(self, request: Request) -> Response:
        return self.redirect("/fleet" if self.session_of(request) else "/signin")

    async def favicon(self, request: Request) -> Response:
        # Where every browser asks for it, signed in or not: an SVG, no external fetch.
        return FileResponse(
            HERE / "static" / "favicon.svg",
            media_type="image/svg+xml",
            headers={"cache-control": "max-age=86400"},
        )


def create_app(settings: ConsoleSettings) -> Starlette:
    console = Console(settings)
    s = console.signed_in
    routes = [
        Route("/", console.home),
        Route("/favicon.ico", console.favicon),
        Route("/signin", console.signin_form, methods=["GET"]),
        Route("/signin", console.signin, methods=["POST"]),
        Route("/signout", s(console.signout, change=True), methods=["POST"]),
        Route("/fleet", s(console.fleet)),
        Route("/workers/{id}", s(console.worker)),
        Route("/workers/{id}/screen", s(console.worker_screen), methods=["GET"]),
        Route("/workers/{id}/takeover", s(console.worker_takeover_confirm), methods=["GET"]),
        Route("/workers/{id}/takeover", s(console.worker_takeover, change=True), methods=["POST"]),
        Route("/workers/{id}/{op}", s(console.worker_confirm), methods=["GET"]),
        Route("/workers/{id}/{op}", s(console.worker_change, change=True), methods=["POST"]),
        Route("/runs", s(console.runs)),
        Route("/runs/{id}", s(console.run)),
        Route("/runs/{id}/artifacts/{sha}", s(console.artifact)),
        Route("/runs/{id}/replay", s(console.replay), methods=["GET"]),
        Route("/runs/{id}/recording/{seq}", s(console.recording_frame), methods=["GET"]),
        Route("/runs/{id}/screen", s(console.run_screen), methods=["GET"]),
        Route("/runs/{id}/takeover", s(console.run_takeover_confirm), methods=["GET"]),
        Route("/runs/{id}/takeover", s(console.run_takeover, change=True), methods=["POST"]),
        Route("/runs/{id}/{op}", s(console.run_confirm), methods=["GET"]),
        Route("/runs/{id}/{op}", s(console.run_change, change=True), methods=["POST"]),
        Route("/approvals", s(console.approvals)),
        Route("/approvals/{id}", s(console.approval)),
        Route("/approvals/{id}/screen", s(console.approval_screen), methods=["GET"]),
        Route("/approvals/{id}/{op}", s(console.approval_change, change=True), methods=["POST"]),
        Route("/questions/{id}/answer", s(console.question_answer, change=True), methods=["POST"]),
        Route("/kill", s(console.kill)),
        Route("/kill/engage", s(console.kill_engage, change=True), methods=["POST"]),
        Route("/kill/{id}/release", s(console.kill_confirm), methods=["GET"]),
        Route("/kill/{id}/release", s(console.kill_release, change=True), methods=["POST"]),
        Route("/audit", s(console.audit)),
        Route("/events", s(console.events)),
        # The live view's stream, and a takeover's page, input and hand back.
        Route("/screen/stream", s(console.screen_stream), methods=["GET"]),
        Route("/takeovers/{id}", s(console.takeover_page), methods=["GET"]),
        # JSON, its CSRF token in a header: checked by the handler (a form's is not there).
        Route("/takeovers/{id}/input", s(console.takeover_input), methods=["POST"]),
        Route(
            "/takeovers/{id}/handback",
            s(console.takeover_handback, change=True),
            methods=["POST"],
        ),
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
