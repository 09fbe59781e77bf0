"""The console's defences as pure rules: the Host names it answers to, a bounded grid, the
sessions a user keeps, the looks its live streams share, the reported browser address in
the audit. Attacked over HTTP: tests/integration/console/test_console_attacks.py."""

from __future__ import annotations

import asyncio
import socket
from typing import Any


def test_host_names_a_console_answers_to() -> None:
    from coordinator.console.security import default_host_names, host_allowed

    names = default_host_names(["console.example.org"])
    assert "localhost" in names and socket.gethostname().lower() in names
    for host in (
        "127.0.0.1:8080",
        "[::1]:8080",
        "10.1.2.3",
        "localhost",
        "Console.Example.ORG:443",
        "console.example.org.",
    ):
        assert host_allowed(host, names), host
    for host in ("", ":80", "evil.example", "console.example.org.evil.example", "[::1"):
        assert not host_allowed(host, names), host


def test_a_displays_grid_has_a_bounded_number_of_lines_whatever_its_size() -> None:
    from coordinator.console.model import grid_step
    from coordinator.console.pages import ConsoleSettings, _templates
    from coordinator.console.sessions import Sessions
    from shared.config import ClientConfig
    from shared.gen.deskfleet.v1 import desktop_pb2, fleet_pb2

    assert grid_step(1280, 800) == 160
    assert grid_step(16_000_000, 16_000_000) >= 16_000_000 // 32
    env = _templates()
    approval = desktop_pb2.Approval(id="apr_1", run_id="run_1", kind="desktop", status="pending")
    text = env.get_template("approval.html").render(
        approval=approval,
        discussion=desktop_pb2.ApprovalDiscussion(),
        worker=None,
        display=fleet_pb2.Display(index=0, width=16_000_000, height=16_000_000),
        peek=None,
        region=None,
        actions=["left_click"],
        csrf="x",
        session=Sessions().create(token="t", user_id="usr_1", name="a", role="admin"),
        flashes=[],
        pending=0,
        fleet_stopped=False,
        request=None,
        path="/approvals/apr_1",
    )
    assert 0 < text.count("<line ") <= 2 * 33 and len(text) < 100_000
    assert ConsoleSettings(ClientConfig("127.0.0.1:1", None, None)).live_per_session == 4


def test_a_user_keeps_at_most_the_newest_sessions() -> None:
    from coordinator.console.sessions import Sessions, cookie_names

    sessions = Sessions(per_user=2)
    made = [sessions.create(token="t", user_id="usr_1", name="a", role="owner") for _ in range(3)]
    other = sessions.create(token="u", user_id="usr_2", name="b", role="owner")
    assert sessions.get(made[0].id) is None  # the oldest ended when the third began
    assert sessions.get(made[1].id) is not None and sessions.get(made[2].id) is not None
    assert sessions.get(other.id) is not None
    assert cookie_names(True) == ("__Host-df_session", "__Host-df_signin")
    assert cookie_names(False) == ("df_session", "df_signin")


async def test_streams_of_one_session_share_their_looks_at_the_coordinator() -> None:
    from coordinator.console.events import LiveLooks
    from coordinator.console.sessions import Sessions

    calls: list[tuple[str, str]] = []

    async def chrome(session: Any) -> dict[str, Any]:
        calls.append((session.id, ""))
        n = len(calls)
        await asyncio.sleep(0.05)
        return {"n": n}

    async def run(session: Any, run_id: str) -> dict[str, Any]:
        calls.append((session.id, run_id))
        n = len(calls)
        await asyncio.sleep(0.05)
        return {"r": n}

    now = [0.0]
    looks = LiveLooks(chrome, run, interval=2.0, clock=lambda: now[0])
    sessions = Sessions()
    a = sessions.create(token="t", user_id="usr_1", name="a", role="owner")
    b = sessions.create(token="u", user_id="usr_2", name="b", role="owner")
    first = await asyncio.gather(*(looks.get(a, "run_1") for _ in range(5)))
    assert first == [{"n": 1, "run": {"r": 2}}] * 5 and len(calls) == 2  # five tabs, one look
    await looks.get(b, "run_1")  # another session looks for itself
    assert len(calls) == 4
    # Another run of the session: its status is a look of its own, the chrome is shared (B9).
    assert await looks.get(a, "run_2") == {"n": 1, "run": {"r": 5}}
    assert await looks.get(a, "") == {"n": 1} and len(calls) == 5
    now[0] = 1.0
    assert await looks.get(a, "run_1") == {"n": 1, "run": {"r": 2}}  # still fresh
    now[0] = 2.0
    assert await looks.get(a, "run_1") == {"n": 6, "run": {"r": 7}}  # one interval on: new
    assert await looks.get(a, "run_2") == {"n": 6, "run": {"r": 8}}
    # A stream's first look is always new: the page it serves was rendered just now.
    assert await looks.get(a, "run_1", fresh=True) == {"n": 9, "run": {"r": 10}}
    assert await looks.get(a, "run_1") == {"n": 9, "run": {"r": 10}}  # and the others share it
    assert await looks.get(a, "run_2") == {"n": 9, "run": {"r": 8}}
    assert len(calls) == 10


def test_the_audit_marks_a_reported_browser_address_and_drops_a_bad_one() -> None:
    import contextvars

    from coordinator.security import audit

    def peer_of(*args: str) -> str:
        def inside() -> str:
            audit.set_peer(*args)
            return audit.peer()

        return contextvars.copy_context().run(inside)

    assert peer_of("ipv4:127.0.0.1:5000") == "ipv4:127.0.0.1:5000"
    assert peer_of("ipv4:127.0.0.1:5000", "10.0.0.7") == (
        "ipv4:127.0.0.1:5000 via console, reported 10.0.0.7"
    )
    assert peer_of("ipv4:127.0.0.1:5000", "[::1]").endswith("reported ::1")
    assert peer_of("ipv4:127.0.0.1:5000", "x" * 5000).endswith("reported an invalid address")
    # An IPv6 zone is kept when it looks like an interface; any other text there is not.
    assert peer_of("p", "fe80::1%eth0").endswith("reported fe80::1%eth0")
    forged = "fe80::1%eth0; the act was done by alice from 10.20.30.40, not by this admin"
    assert peer_of("p", forged).endswith("reported an invalid address")
    assert peer_of("p", "fe80::1%" + "z" * 150).endswith("reported an invalid address")
    assert len(peer_of("p" * 500, "10.0.0.7")) == audit.PEER_CHARS


def test_the_sign_in_limiters_hold_a_bounded_number_of_keys() -> None:
    from coordinator.security.ratelimit import FailureLimiter

    now = [0.0]
    limiter = FailureLimiter(10, window=60.0, clock=lambda: now[0], max_keys=1000)
    for i in range(5000):
        limiter.failed(f"127.0.0.{i % 250} {i:024x}")
    assert len(limiter) <= 1000  # a flood of new keys makes the oldest room
    now[0] = 61.0
    limiter.failed("127.0.0.1 one")
    assert len(limiter) == 1  # a window later, the keys whose failures aged out are gone


def test_a_sign_in_form_token_is_issued_here_and_cannot_be_made_up() -> None:
    from coordinator.console.app import Console
    from coordinator.console.auth import PRE_CHARS
    from coordinator.console.pages import ConsoleSettings
    from shared.config import ClientConfig

    console = Console(ConsoleSettings(ClientConfig("127.0.0.1:1", None, None)))
    issued = console._issue_pre()
    assert console._genuine(issued) and len(issued) <= PRE_CHARS
    nonce, _, mac = issued.partition(".")
    for forged in ("made-up", f"{nonce}.{'A' * len(mac)}", f"other.{mac}", issued + "x" * 100, ""):
        assert not console._genuine(forged), forged
    other = Console(ConsoleSettings(ClientConfig("127.0.0.1:1", None, None)))
    assert not other._genuine(issued)  # another console process issued its own
