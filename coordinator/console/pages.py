"""What every console page is made of: the console's settings, its templates, the base class
of the page handlers (`Pages`: the sessions, the coordinator's channel, rendering and the
chrome), and how a refusal becomes a status."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from coordinator.console import model
from coordinator.console.limits import (
    DEFAULT_LIVE_PER_SESSION,
    DEFAULT_SESSIONS_PER_USER,
    DEFAULT_SIGNIN_DELAY,
    DEFAULT_SIGNIN_FAILURES,
    DEFAULT_SIGNIN_FAILURES_PER_ADDRESS,
)
from coordinator.console.rpc import ConsoleClient
from coordinator.console.security import default_host_names
from coordinator.console.sessions import (
    DEFAULT_TTL,
    Session,
    Sessions,
)
from shared.config import ClientConfig
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from shared.gen.deskfleet.v1 import desktop_pb2
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
    signin_delay: float = DEFAULT_SIGNIN_DELAY


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
    env.filters["short_words"] = model.short_words
    env.globals["DESKTOP_ACTIONS"] = model.DESKTOP_ACTIONS
    env.globals["grid_step"] = model.grid_step
    return env


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


def status_of(exc: DeskfleetError) -> int:
    return next((code for cls, code in STATUS_OF if isinstance(exc, cls)), 500)


Handler = Callable[[Request, Session], Awaitable[Response]]


class Pages:
    """What every page handler has: the settings, the sessions, the coordinator's channel and
    the templates; rendering, the chrome every page shows, and redirects."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings.session_ttl, per_user=settings.sessions_per_user)
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


def form_reason(form: FormData) -> str:
    return str(form.get("reason") or "").strip()


def query_without_page(request: Request) -> str:
    return urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "page"])
