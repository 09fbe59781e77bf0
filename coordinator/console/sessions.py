"""Console sign-in sessions: a user token held server-side behind a random cookie.

The browser holds only the session id (an HttpOnly, SameSite=Strict cookie); the token it was
exchanged for stays in this process's memory and is sent with every gRPC call made for the
session, so the coordinator decides every authorization exactly as for the CLI. Each session
has its own CSRF token, which every form that changes something carries back.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.console.limits import DEFAULT_SESSIONS_PER_USER
from shared.gen.deskfleet.v1.desktop_pb2 import ScreenPeek

COOKIE = "df_session"
PRE_COOKIE = "df_signin"  # the sign-in form's double-submit token (no session exists yet)
# Over HTTPS the cookies carry the `__Host-` prefix: the browser then keeps them only when set
# Secure, for this host alone (no Domain) and the whole path, so no sibling subdomain can plant
# or overwrite one.
HOST_PREFIX = "__Host-"
DEFAULT_TTL = 8 * 3600.0
PEEKS_KEPT = 4


def cookie_names(secure: bool) -> tuple[str, str]:
    """The session cookie's and the sign-in form's cookie's names."""
    prefix = HOST_PREFIX if secure else ""
    return prefix + COOKIE, prefix + PRE_COOKIE


@dataclass
class Session:
    id: str
    token: str
    user_id: str
    name: str
    role: str
    csrf: str
    expires_at: float
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind, text), shown once
    # The last screen peeked per approval, shown only to this session (the peek is audited as
    # this user's): at most PEEKS_KEPT, the oldest dropped first.
    peeks: dict[str, ScreenPeek] = field(default_factory=dict)
    live: int = 0  # live streams (`/events`) open now

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def flash(self, kind: str, text: str) -> None:
        self.flashes.append((kind, text))

    def keep_peek(self, peek: ScreenPeek) -> None:
        self.peeks.pop(peek.approval_id, None)
        self.peeks[peek.approval_id] = peek
        while len(self.peeks) > PEEKS_KEPT:
            del self.peeks[next(iter(self.peeks))]

    def take_flashes(self) -> list[tuple[str, str]]:
        taken, self.flashes = self.flashes, []
        return taken


def tokens_equal(a: str, b: str) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


class Sessions:
    """Sessions by id, each valid for `ttl` seconds from sign-in (not extended by use); at
    most `per_user` of one user at a time, the oldest ended first when a new one begins (a
    stolen token cannot pile up sessions in this process's memory)."""

    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
        per_user: int = DEFAULT_SESSIONS_PER_USER,
    ) -> None:
        self.ttl = ttl
        self.per_user = per_user
        self._clock = clock
        self._by_id: dict[str, Session] = {}

    def create(self, *, token: str, user_id: str, name: str, role: str) -> Session:
        self._sweep()
        mine = [s.id for s in self._by_id.values() if s.user_id == user_id]  # oldest first
        for sid in mine[: max(len(mine) - self.per_user + 1, 0)]:
            del self._by_id[sid]
        session = Session(
            id=secrets.token_urlsafe(32),
            token=token,
            user_id=user_id,
            name=name,
            role=role,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl,
        )
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._by_id[session_id]
            return None
        return session

    def end(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)

    def end_for_token(self, token: str) -> None:
        """Forget every session of a token the coordinator no longer accepts."""
        for sid in [s.id for s in self._by_id.values() if s.token == token]:
            del self._by_id[sid]

    def __len__(self) -> int:
        return len(self._by_id)

    def _sweep(self) -> None:
        now = self._clock()
        for sid in [s.id for s in self._by_id.values() if s.expires_at <= now]:
            del self._by_id[sid]
