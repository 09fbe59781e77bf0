"""The live view and takeover pages in this process: the input POST's checks, the routes, what
the pages render and what the stream relays, through the console's whole ASGI stack (the Host
and body checks, the security headers) in front of a stand-in for the coordinator's channel
that records each call and answers what the test says. The same pages with a real coordinator,
desktop worker, xterm and Chromium are tests/e2e/console/test_console_screens.py."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from coordinator.console.human_input import MAX_BODY, MAX_EVENTS, InputRefused, parse_body
from shared.config import ClientConfig
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2

JPEG = b"\xff\xd8\xff\xe0" + b"frame"


def frame(seq: int, data: bytes = JPEG, width: int = 1280, height: int = 800) -> Any:
    f = desktop_pb2.LiveFrame(
        seq=seq, media_type="image/jpeg" if seq else "", data=data if seq else b""
    )
    if seq:
        f.width, f.height, f.worker_id = width, height, "wrk_1"
        f.captured_at.FromSeconds(1_700_000_000)
    return f


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A refusal as the coordinator sends it (its error mark in the trailers: not a channel
    that could not reach it)."""
    from shared.errors import ERROR_METADATA_KEY

    trailers = grpc.aio.Metadata((ERROR_METADATA_KEY, "coordinator"))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details)


class WatchCall:
    """A WatchScreen call: its messages in order, then it stays open (or ends: `hold=False`)."""

    def __init__(self, *messages: Any, hold: bool = True) -> None:
        self.messages = list(messages)
        self.hold = hold
        self.cancelled = False

    async def read(self) -> Any:
        if self.messages:
            item = self.messages.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item
        if self.hold:
            await asyncio.Event().wait()
        return grpc.aio.EOF

    def cancel(self) -> bool:
        self.cancelled = True
        return True


@dataclass
class Method:
    rpc: FakeRpc
    name: str

    def __call__(self, request: Any, *, metadata: Any = None, **kw: Any) -> Any:
        self.rpc.calls.append((self.name, request))  # a streaming call (WatchScreen)
        return self.rpc.watches.pop(0)


class Stub:
    def __init__(self, rpc: FakeRpc) -> None:
        self._rpc = rpc

    def __getattr__(self, name: str) -> Method:
        return Method(self._rpc, name)


@dataclass
class FakeRpc:
    """The console's channel to the coordinator, answering from `answers` by RPC name."""

    answers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    watches: list[WatchCall] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    config: ClientConfig = field(default_factory=lambda: ClientConfig("127.0.0.1:1", None, None))

    def __post_init__(self) -> None:
        self.desktop = self.runs = self.admin = self.approvals = self.kills = Stub(self)
        self.answers.setdefault("ListApprovals", lambda r: desktop_pb2.ListApprovalsResponse())
        self.answers.setdefault("Status", lambda r: desktop_pb2.KillStatusResponse())

    @staticmethod
    def metadata(token: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"),)

    async def call(self, token: str, method: Method, request: Any, **kw: Any) -> Any:
        from shared.errors import from_rpc_error

        self.calls.append((method.name, request))
        answer = self.answers[method.name](request)
        if isinstance(answer, grpc.RpcError):
            raise from_rpc_error(answer, self.config.coordinator)
        return answer

    async def events_of(self, token: str, run_id: str, kinds: tuple[str, ...]) -> list[Any]:
        self.calls.append(("events_of", run_id))
        return []

    def named(self, name: str) -> list[Any]:
        return [r for n, r in self.calls if n == name]

    async def close(self) -> None:
        pass


@dataclass
class Console:
    app: Any
    rpc: FakeRpc
    cookie: str
    csrf: str
    session_id: str


def _console(role: str = "admin") -> Console:
    from coordinator.console.app import create_app
    from coordinator.console.pages import ConsoleSettings
    from coordinator.console.security import RequestChecks, SecurityHeaders

    settings = ConsoleSettings(ClientConfig("127.0.0.1:1", None, None))
    starlette = create_app(settings)
    console = starlette.state.console
    app = RequestChecks(SecurityHeaders(starlette), settings.host_names)  # as asgi() wraps it
    rpc = FakeRpc()
    console.client = rpc
    session = console.sessions.create(token="dfu_x.y", user_id="usr_1", name="ann", role=role)
    return Console(app, rpc, f"df_session={session.id}", session.csrf, session.id)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)


async def _request(
    c: Console,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    headers: dict[str, str] | None = None,
    signed_in: bool = True,
) -> Reply:
    """One request through the ASGI stack, in this process; the browser stays connected
    until the response ends."""
    target, _, query = path.partition("?")
    sent_headers = {"host": "127.0.0.1:8080", **(headers or {})}
    if signed_in:
        sent_headers["cookie"] = c.cookie
    if method == "POST":
        sent_headers.setdefault("content-length", str(len(body)))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in sent_headers.items()],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict[str, Any]] = []
    asked: list[bool] = []

    async def receive() -> dict[str, Any]:
        if asked:
            await asyncio.Event().wait()
        asked.append(True)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(c.app(scope, receive, send), 10)
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Reply(start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, out)


def _input(c: Console, events: Any, **headers: str) -> Any:
    body = json.dumps({"events": events}).encode()
    sent = {"content-type": "application/json", "x-csrf-token": c.csrf, **headers}
    return _request(c, "POST", "/takeovers/tk_1/input", body, headers=sent)


# --- the input body ------------------------------------------------------------------------


def test_the_input_body_becomes_human_events_in_the_display_pixels() -> None:
    body = json.dumps(
        {
            "events": [
                {"kind": "move", "x": 10, "y": 20},
                {"kind": "down", "x": 10, "y": 20, "button": "right"},
                {"kind": "up", "x": 10, "y": 20},
                {"kind": "scroll", "x": 1, "y": 2, "dy": -3},
                {"kind": "key", "key": "ctrl+c"},
                {"kind": "type", "text": "héllo <b>"},
            ]
        }
    ).encode()
    events = parse_body(body, "application/json; charset=utf-8")
    assert [e.kind for e in events] == ["move", "down", "up", "scroll", "key", "type"]
    assert (events[1].x, events[1].y, events[1].button) == (10, 20, "right")
    assert events[2].button == "left"  # a button left out is the left one
    assert (events[3].dx, events[3].dy) == (0, -3)
    assert events[4].key == "ctrl+c" and events[5].text == "héllo <b>"
    most = json.dumps({"events": [{"kind": "move", "x": 1, "y": 1}] * MAX_EVENTS}).encode()
    assert len(parse_body(most, "application/json")) == MAX_EVENTS


@pytest.mark.parametrize(
    ("body", "content_type", "status", "says"),
    [
        (b'{"events": []}', "text/plain", 400, "application/json"),
        (b"not json", "application/json", 400, "not JSON"),
        (b"\xff\xfe", "application/json", 400, "not JSON"),
        (b"[" * 50_000 + b"]" * 50_000, "application/json", 413, "at most"),
        (b"[" * 20_000 + b"]" * 20_000, "application/json", 400, "not JSON"),
        (b'{"events": [], "csrf": "x"}', "application/json", 400, "nothing else"),
        (b'{"events": {}}', "application/json", 400, "a list"),
        (json.dumps({"events": [{"kind": "move", "x": 1, "y": 1}] * 65}).encode(), None, 400, "64"),
        (b'{"events": ["move"]}', None, 400, "an object"),
        (b'{"events": [{"kind": "drag"}]}', None, 400, "kind"),
        (b'{"events": [{"kind": "move", "x": true, "y": 1}]}', None, 400, "whole number"),
        (b'{"events": [{"kind": "move", "x": 1.5, "y": 1}]}', None, 400, "whole number"),
        (b'{"events": [{"kind": "move", "x": -1, "y": 1}]}', None, 400, "0..32767"),
        (b'{"events": [{"kind": "move", "x": 1}]}', None, 400, "events[0].y"),
        (b'{"events": [{"kind": "move", "x": 1, "y": 1, "text": "a"}]}', None, 400, "no field"),
        (b'{"events": [{"kind": "click", "x": 1, "y": 1, "button": "x"}]}', None, 400, "button"),
        (b'{"events": [{"kind": "scroll", "x": 1, "y": 1}]}', None, 400, "not none"),
        (b'{"events": [{"kind": "scroll", "x": 1, "y": 1, "dy": 101}]}', None, 400, "-100..100"),
        (b'{"events": [{"kind": "key", "key": ""}]}', None, 400, "non-empty"),
        (b'{"events": [{"kind": "key", "key": "' + b"a" * 101 + b'"}]}', None, 400, "100"),
        (b'{"events": [{"kind": "type", "text": "a\\u0000b"}]}', None, 400, "NUL"),
        (b'{"events": [{"kind": "type", "text": 5}]}', None, 400, "string"),
    ],
)
def test_an_input_body_of_any_other_shape_is_refused_in_one_line(
    body: bytes, content_type: str | None, status: int, says: str
) -> None:
    with pytest.raises(InputRefused) as refused:
        parse_body(body, content_type or "application/json")
    assert refused.value.status == status and says in str(refused.value)
    assert "\n" not in str(refused.value)


# --- the input route -----------------------------------------------------------------------


async def test_input_goes_to_send_input_with_the_takeover_id_and_says_how_many_ran() -> None:
    c = _console()
    c.rpc.answers["SendInput"] = lambda r: desktop_pb2.SendInputResponse(applied=len(r.events))
    reply = await _input(c, [{"kind": "type", "text": "hi"}, {"kind": "key", "key": "Return"}])
    assert reply.status == 200 and reply.json() == {"applied": 2}
    [sent] = c.rpc.named("SendInput")
    assert sent.takeover == "tk_1" and [e.kind for e in sent.events] == ["type", "key"]
    assert reply.headers["cache-control"] == "no-store"


async def test_input_is_refused_without_a_session_a_csrf_token_or_from_another_site() -> None:
    c = _console()
    c.rpc.answers["SendInput"] = lambda r: desktop_pb2.SendInputResponse(applied=1)
    events = [{"kind": "type", "text": "x"}]
    body = json.dumps({"events": events}).encode()
    anonymous = await _request(
        c,
        "POST",
        "/takeovers/tk_1/input",
        body,
        headers={"content-type": "application/json", "x-csrf-token": c.csrf},
        signed_in=False,
    )
    assert anonymous.status == 303 and anonymous.headers["location"].startswith("/signin")
    missing = await _request(
        c, "POST", "/takeovers/tk_1/input", body, headers={"content-type": "application/json"}
    )
    assert missing.status == 403 and "CSRF" in missing.json()["error"]
    wrong = await _input(c, events, **{"x-csrf-token": "forged"})
    assert wrong.status == 403
    elsewhere = await _input(c, events, origin="http://evil.test")
    assert elsewhere.status == 403 and "another site" in elsewhere.json()["error"]
    bad_id = await _request(
        c,
        "POST",
        "/takeovers/tk_1%3Cb%3E/input",
        body,
        headers={"content-type": "application/json", "x-csrf-token": c.csrf},
    )
    assert bad_id.status == 400 and "<b>" not in bad_id.text
    shape = await _input(c, [{"kind": "type", "text": "x", "extra": 1}])
    assert shape.status == 400 and "no field" in shape.json()["error"]
    huge = await _request(
        c,
        "POST",
        "/takeovers/tk_1/input",
        b"{" + b" " * MAX_BODY + b"}",
        headers={"content-type": "application/json", "x-csrf-token": c.csrf},
    )
    assert huge.status == 413
    assert c.rpc.named("SendInput") == []  # none of them reached the coordinator


async def test_a_coordinator_refusal_of_input_is_one_line_of_json_with_its_status() -> None:
    c = _console()
    c.rpc.answers["SendInput"] = lambda r: rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "refused: kill switch ks_1 (fleet) is engaged: no input reaches worker wrk_1",
    )
    reply = await _input(c, [{"kind": "type", "text": "x"}])
    assert reply.status == 409
    assert reply.json() == {
        "error": "refused: kill switch ks_1 (fleet) is engaged: no input reaches worker wrk_1"
    }
    c.rpc.answers["SendInput"] = lambda r: rpc_error(
        grpc.StatusCode.PERMISSION_DENIED, "takeover tk_1 is bob's: only they send input"
    )
    other = await _input(c, [{"kind": "type", "text": "x"}])
    assert other.status == 403 and "bob's" in other.json()["error"]


# --- the view pages and their stream --------------------------------------------------------


async def test_a_view_page_opens_the_watch_for_its_session_and_has_no_input() -> None:
    c = _console()
    c.rpc.watches.append(WatchCall(frame(1)))
    page = await _request(c, "GET", "/workers/wrk_1/screen")
    assert page.status == 200, page.text
    [watch] = c.rpc.named("WatchScreen")
    assert watch.worker == "wrk_1" and not watch.run and watch.client == c.session_id
    assert "data-screen-stream" in page.text and "/static/screen.js" in page.text
    # Nothing on a view page can send input: no input address, token or code.
    for absent in ("data-input", "takeover.js", "/input", "data-csrf"):
        assert absent not in page.text, absent
    assert "1280\u00d7800" in page.text  # the display's real size
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "img-src 'self' data:" in csp


async def test_the_pages_stream_relays_the_watch_it_opened_and_ends_with_the_reason() -> None:
    c = _console()
    ended = rpc_error(grpc.StatusCode.UNAVAILABLE, "worker wrk_1 went offline")
    call = WatchCall(frame(1), frame(0), frame(2, JPEG + b"2"), ended)
    c.rpc.watches.append(call)
    page = await _request(c, "GET", "/workers/wrk_1/screen")
    url = re.search(r'data-screen-stream="([^"]+)"', page.text)
    assert url is not None
    stream = await _request(c, "GET", url.group(1).replace("&amp;", "&"))
    assert stream.status == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert len(c.rpc.named("WatchScreen")) == 1  # the page's own watch, not a second viewing
    events = [e for e in stream.text.split("\n\n") if e]
    assert events[0] == "retry: 5000"
    first = json.loads(events[1].removeprefix("event: frame\ndata: "))
    assert first == {
        "seq": 1,
        "media_type": "image/jpeg",
        "data": base64.b64encode(JPEG).decode(),
        "width": 1280,
        "height": 800,
        "captured_at": 1_700_000_000,
    }
    assert events[2] == ": keep-alive"
    assert json.loads(events[3].split("data: ", 1)[1])["seq"] == 2
    assert events[4].startswith("event: end\n")
    assert json.loads(events[4].split("data: ", 1)[1]) == {"error": "worker wrk_1 went offline"}
    assert call.cancelled


async def test_a_stream_without_its_pages_look_opens_its_own_and_a_refusal_is_a_status() -> None:
    c = _console("owner")
    c.rpc.watches.append(WatchCall(frame(1), hold=False))
    stream = await _request(c, "GET", "/screen/stream?run=run_1&t=not-a-look")
    assert stream.status == 200 and "event: frame" in stream.text
    assert "the coordinator ended the live view" in stream.text
    [watch] = c.rpc.named("WatchScreen")
    assert watch.run == "run_1" and watch.client == c.session_id
    c.rpc.watches.append(WatchCall(rpc_error(grpc.StatusCode.NOT_FOUND, "no run 'run_2'")))
    refused = await _request(c, "GET", "/screen/stream?run=run_2")
    assert refused.status == 404 and "no run" in refused.text
    for query in ("", "?worker=w&run=r", "?worker=%3Cscript%3E", "?worker=w&display=16"):
        bad = await _request(c, "GET", f"/screen/stream{query}")
        assert bad.status == 400 and "<script>" not in bad.text, query
    anonymous = await _request(c, "GET", "/screen/stream?worker=w", signed_in=False)
    assert anonymous.status == 303
    assert len(c.rpc.named("WatchScreen")) == 2


async def test_another_owners_run_is_refused_before_any_watch() -> None:
    c = _console("owner")
    c.rpc.answers["GetRun"] = lambda r: rpc_error(grpc.StatusCode.NOT_FOUND, "no run 'run_9'")
    page = await _request(c, "GET", "/runs/run_9/screen")
    assert page.status == 404 and c.rpc.named("WatchScreen") == []
    c.rpc.answers["GetRun"] = lambda r: runs_pb2.Run(id=r.id, kind="plan")
    plan = await _request(c, "GET", "/runs/run_8/screen")
    assert plan.status == 409 and "not a desktop run" in plan.text
    c.rpc.watches.append(
        WatchCall(
            rpc_error(
                grpc.StatusCode.PERMISSION_DENIED,
                "only an admin watches worker wrk_1; a run's owner watches while a desktop"
                " run of theirs holds it",
            )
        )
    )
    worker = await _request(c, "GET", "/workers/wrk_1/screen")
    assert worker.status == 403 and "only an admin watches worker wrk_1" in worker.text


# --- takeovers -----------------------------------------------------------------------------


def _took(**fields: Any) -> Any:
    return desktop_pb2.Takeover(
        **{"id": "tk_1", "worker_id": "wrk_1", "status": "active", **fields}
    )


async def test_take_over_then_the_takeover_page_has_input_and_hand_back_returns_to_the_run() -> (
    None
):
    c = _console("owner")
    c.rpc.answers["TakeOver"] = lambda r: _took(run_id=r.run)
    c.rpc.answers["SendInput"] = lambda r: desktop_pb2.SendInputResponse(applied=0)
    c.rpc.answers["HandBack"] = lambda r: _took(run_id="run_1", status="handed_back", events=3)
    confirm = await _request(c, "GET", "/runs/run_1/takeover")
    assert confirm.status == 200 and 'action="/runs/run_1/takeover"' in confirm.text
    form = {"content-type": "application/x-www-form-urlencoded"}
    no_csrf = await _request(c, "POST", "/runs/run_1/takeover", b"reason=x", headers=form)
    assert no_csrf.status == 403 and c.rpc.named("TakeOver") == []
    took = await _request(
        c, "POST", "/runs/run_1/takeover", f"csrf={c.csrf}&reason=fix".encode(), headers=form
    )
    assert took.status == 303 and took.headers["location"] == "/takeovers/tk_1"
    [asked] = c.rpc.named("TakeOver")
    assert (asked.run, asked.worker, asked.reason) == ("run_1", "", "fix")

    c.rpc.watches.append(WatchCall(frame(1)))
    page = await _request(c, "GET", "/takeovers/tk_1")
    assert page.status == 200, page.text
    [check] = c.rpc.named("SendInput")
    assert check.takeover == "tk_1" and not check.events  # held and active: nothing sent
    [watch] = c.rpc.named("WatchScreen")
    assert watch.run == "run_1" and watch.client == c.session_id
    for present in ('data-input="/takeovers/tk_1/input"', "takeover.js", "/handback"):
        assert present in page.text, present

    back = await _request(
        c, "POST", "/takeovers/tk_1/handback", f"csrf={c.csrf}&note=typed".encode(), headers=form
    )
    assert back.status == 303 and back.headers["location"] == "/runs/run_1"
    [handed] = c.rpc.named("HandBack")
    assert (handed.takeover, handed.note) == ("tk_1", "typed")


async def test_a_takeover_page_shows_why_input_cannot_go_and_still_offers_hand_back() -> None:
    c = _console("admin")
    c.rpc.answers["TakeOver"] = lambda r: _took()
    c.rpc.answers["SendInput"] = lambda r: rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "refused: kill switch ks_1 (worker) is engaged: no input reaches worker wrk_1",
    )
    form = {"content-type": "application/x-www-form-urlencoded"}
    await _request(c, "POST", "/workers/wrk_1/takeover", f"csrf={c.csrf}".encode(), headers=form)
    page = await _request(c, "GET", "/takeovers/tk_1")
    assert page.status == 200 and "kill switch ks_1" in page.text
    assert "/handback" in page.text and "takeover.js" not in page.text
    assert c.rpc.named("WatchScreen") == []


async def test_a_takeover_begun_elsewhere_is_found_in_the_users_runs_or_not_at_all() -> None:
    c = _console("owner")
    c.rpc.answers["ListRuns"] = lambda r: runs_pb2.ListRunsResponse()
    page = await _request(c, "GET", "/takeovers/tk_7")
    assert page.status == 404 and "no takeover" in page.text
    [listed] = c.rpc.named("ListRuns")
    assert listed.kind == "desktop" and not listed.owner  # the user's own runs only
    assert c.rpc.named("ListAudit") == []  # an owner's console reads no audit log
