"""Signing in and out, and the session every other page needs: the token stays server-side
behind a cookie, every change carries the session's CSRF token and comes from the console's
own origin, and failed sign-ins are throttled here, per browser, before the coordinator is
asked (docs/SECURITY.md, "The web console")."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from coordinator.console.pages import Handler, Pages, Refused, status_of
from coordinator.console.rpc import browser_address
from coordinator.console.sessions import (
    Session,
    cookie_names,
    tokens_equal,
)
from coordinator.console.wording import for_people
from coordinator.security.ratelimit import FailureLimiter
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    TooManyFailuresError,
)
from shared.gen.deskfleet.v1 import admin_pb2

# Browsers and addresses the sign-in limiters remember at most: what one costs is bounded
# (a short key and a few timestamps), and so is their sum, whatever a flood of sign-ins sends.
SIGNIN_KEYS = 10_000
PRE_CHARS = 64  # a sign-in form token as issued: 24 random characters, a dot, its HMAC


class Auth(Pages):
    """Sign-in, sign-out, and the wrapper every signed-in page and change goes through."""

    @functools.cached_property
    def session_cookie(self) -> str:
        return cookie_names(self.settings.secure_cookies)[0]

    @functools.cached_property
    def pre_cookie(self) -> str:
        return cookie_names(self.settings.secure_cookies)[1]

    @functools.cached_property
    def _failed_by_browser(self) -> FailureLimiter:
        return FailureLimiter(self.settings.signin_failures, max_keys=SIGNIN_KEYS)

    @functools.cached_property
    def _failed_by_address(self) -> FailureLimiter:
        return FailureLimiter(self.settings.signin_failures_per_address, max_keys=SIGNIN_KEYS)

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
                response = self.render(request, "error.html", 401, message=for_people(exc))
                self._forget(response, self.session_cookie)
                return response
            except DeskfleetError as exc:
                return self.render(
                    request,
                    "error.html",
                    status_of(exc),
                    session=session,
                    message=for_people(exc, session.name, session.role),
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
        pre = request.cookies.get(self.pre_cookie, "")
        if not self._genuine(pre):
            pre = self._issue_pre()
        response = self.render(
            request, "signin.html", pre=pre, next=_local(request.query_params.get("next"))
        )
        self._cookie(response, self.pre_cookie, pre, max_age=3600)
        return response

    @functools.cached_property
    def _pre_key(self) -> bytes:
        return secrets.token_bytes(32)  # this process's: a restart issues new forms

    def _issue_pre(self) -> str:
        """A sign-in form's token, issued here: a random part and its HMAC, so that a browser
        cannot make up a new one for each attempt (each would count as a new browser)."""
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._pre_mac(nonce)}"

    def _pre_mac(self, nonce: str) -> str:
        mac = hmac.new(self._pre_key, nonce.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:16]).decode().rstrip("=")

    def _genuine(self, pre: str) -> bool:
        nonce, _, mac = pre.partition(".")
        return 0 < len(pre) <= PRE_CHARS and tokens_equal(mac, self._pre_mac(nonce))

    def _over_the_limit(self, browser: str, address: str) -> bool:
        """Whether this browser (its form token) or its address has failed too often lately."""
        return (
            self._failed_by_browser.spent(browser) is not None
            or self._failed_by_address.spent(address) is not None
        )

    async def signin(self, request: Request) -> Response:
        address = _client_of(request)
        browser_address.set(address)
        form = await request.form()
        try:
            _same_origin(request)
        except Refused as exc:
            return self.render(request, "error.html", exc.status, message=str(exc))
        pre = request.cookies.get(self.pre_cookie, "")
        if not self._genuine(pre) or not tokens_equal(str(form.get("pre") or ""), pre):
            fresh = self._issue_pre()
            response = self.render(
                request,
                "signin.html",
                403,
                pre=fresh,
                error="the sign-in form expired: try again",
                next="/fleet",
            )
            self._cookie(response, self.pre_cookie, fresh, max_age=3600)
            return response
        token = str(form.get("token") or "").strip()
        nxt = _local(str(form.get("next") or ""))
        # A form token is a browser; its digest keeps the limiter's keys short.
        browser = f"{address} {hashlib.sha256(pre.encode()).hexdigest()[:24]}"
        error, status = "", 401
        if not token:
            error = "paste a user token (dfu_...)"
        else:
            over = self._over_the_limit(browser, address)
            if over:
                # Slowed, never refused unheard: a valid token signs in whatever others on
                # this address have tried (the coordinator only ever refuses failures too).
                await asyncio.sleep(self.settings.signin_delay)
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
            if error and over:
                status = 429
                error = (
                    "too many failed sign-ins from this browser or its address: each try now"
                    f" waits {self.settings.signin_delay:g} s ({error})"
                )
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
