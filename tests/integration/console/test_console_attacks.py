"""The web console attacked over plain HTTP: an anonymous browser, a signed-in owner, a page on
another name (DNS rebinding), slow and many connections. A real console process in front of a
real coordinator; requests are made with `http.client` from chosen loopback addresses
(127.0.0.2, 127.0.0.3, ... are other hosts here), so that the console's view of "which
browser" is the one a test means.

The console's pure parts (the Host check, the grid, sessions per user, the shared live looks)
are tests/unit/console/test_console_attacks.py.
"""

from __future__ import annotations

import http.client
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import grpc
import pytest

from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc
from tests.harness import (
    ConsoleProcess,
    CoordinatorProcess,
    submit,
    wait_run,
    wait_until,
    write_plan,
)

# slow: timing attacks on the console (trickling requests, throttles) wait by design; CI runs it
pytestmark = pytest.mark.slow


@dataclass
class Reply:
    status: int
    headers: Message
    body: str

    @property
    def location(self) -> str:
        return self.headers.get("location", "")


@dataclass
class Browser:
    """One browser: its cookies, and the loopback address it connects from."""

    url: str
    source: str = "127.0.0.1"
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def hostport(self) -> str:
        return urlsplit(self.url).netloc

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        *,
        host: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(
            parts.hostname or "", parts.port, timeout=20, source_address=(self.source, 0)
        )
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", self.hostport if host is None else host)
            if self.cookies:
                conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
            body = urlencode(form).encode() if form is not None else None
            if body is not None:
                conn.putheader("Content-Type", "application/x-www-form-urlencoded")
                conn.putheader("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            for line in response.headers.get_all("set-cookie") or []:
                name, _, rest = line.partition("=")
                value = rest.split(";", 1)[0]
                if "max-age=0" in line.lower() or "expires=thu, 01 jan 1970" in line.lower():
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = value
            return Reply(response.status, response.headers, text)
        finally:
            conn.close()

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, form: dict[str, str], **kwargs: Any) -> Reply:
        return self.request("POST", path, form, **kwargs)

    def signin(self, token: str, nxt: str = "/fleet") -> Reply:
        form = self.get("/signin")
        pre = re.search(r'name="pre" value="([^"]+)"', form.body)
        assert pre is not None, form.body[:500]
        return self.post("/signin", {"pre": pre.group(1), "token": token, "next": nxt})

    def csrf(self, path: str = "/kill") -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.get(path).body)
        assert found is not None
        return found.group(1)


@dataclass
class Stack:
    coordinator: CoordinatorProcess
    console: ConsoleProcess
    admin_token: str
    tokens: dict[str, str]
    token_files: dict[str, Path]

    def browser(self, source: str = "127.0.0.1") -> Browser:
        return Browser(self.console.url, source)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A coordinator of the module's own (the sign-in test makes its failure limiter count
    against this host) and a console in front of it."""
    workdir = tmp_path_factory.mktemp("console-attacks")
    coordinator = CoordinatorProcess(workdir / "coord").start()
    console = None
    try:
        tokens, files = {}, {}
        for name in ("alice", "bob"):
            tokens[name] = coordinator.cli_json("users", "create", name)["token"]
            files[name] = workdir / f"{name}.token"
            files[name].write_text(tokens[name])
        console = ConsoleProcess(coordinator).start()
        yield Stack(
            coordinator,
            console,
            coordinator.admin_token_file.read_text().strip(),
            tokens,
            files,
        )
    finally:
        if console is not None:
            console.stop()
        coordinator.stop()


def run_of(stack: Stack, owner: str, title: str) -> str:
    plan = write_plan(
        stack.coordinator.workdir / f"plan-{owner}.json",
        [{"kind": "diag.echo", "args": {"value": "v"}, "idempotent": True}],
        title=title,
    )
    run = submit(stack.coordinator, plan, token_file=stack.token_files[owner])
    return str(run["id"])


# --- 30.1: sign-in failures never lock the host out ------------------------------------------


def test_bad_sign_ins_are_throttled_per_browser_and_never_lock_out_the_consoles_host(
    stack: Stack,
) -> None:
    coordinator = stack.coordinator
    guesser = stack.browser("127.0.0.3")
    started = time.monotonic()
    answers = [guesser.signin(f"dfu_x.guess{i}") for i in range(12)]
    assert [a.status for a in answers] == [401] * 10 + [429] * 2
    assert "sign-in refused: unknown credential" in answers[0].body
    assert "too many failed sign-ins from this browser or its address" in answers[-1].body
    assert time.monotonic() - started >= 2.0  # each try past the allowance waited 1 s
    # A guesser that throws its form away each time is still one address. One that makes up
    # its own form token (cookie and field alike) is refused before its token is tried.
    forged = stack.browser("127.0.0.3")
    forged.cookies["df_signin"] = "made-up"
    refused = forged.post("/signin", {"pre": "made-up", "token": stack.admin_token})
    assert refused.status == 403 and "the sign-in form expired" in refused.body
    assert "df_session" not in forged.cookies
    fresh = [stack.browser("127.0.0.3").signin(f"dfu_x.fresh{i}").status for i in range(50)]
    assert fresh[:48] == [401] * 48 and fresh[-1] == 429  # 60 for the address, then slowed
    # A valid token from that very address still signs in (slowed, never refused unheard).
    same_host = stack.browser("127.0.0.3")
    signed = same_host.signin(stack.admin_token)
    assert signed.status == 303 and signed.location == "/fleet"
    # The coordinator saw 60 failures from the console's own address: over its limit, which
    # only ever answers failures. Every valid credential from that host still works:
    admin = stack.browser("127.0.0.4")
    signed = admin.signin(stack.admin_token)
    assert signed.status == 303 and signed.location == "/fleet"
    assert admin.get("/fleet").status == 200
    assert "headlessOnline" in coordinator.status()  # the CLI from this host
    switch = coordinator.cli_json("kill", "engage", "--reason", "drill while guessed at")
    coordinator.cli("kill", "release", "--id", switch["id"], "--reason", "drill over")
    # ... another browser's mistakes are its own, and the coordinator's guesses count on.
    other = stack.browser("127.0.0.5")
    assert other.signin("dfu_x.typo").status == 401
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused_rpc:
            stub.WhoAmI(
                admin_pb2.WhoAmIRequest(), metadata=auth_metadata("dfu_x.direct"), timeout=10
            )
    assert refused_rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# --- 30.2 and 30.7: live streams -------------------------------------------------------------


class Stream:
    """A raw `/events` request whose response is read as it comes."""

    def __init__(self, browser: Browser, path: str = "/events") -> None:
        parts = urlsplit(browser.url)
        self.sock = socket.create_connection(
            (parts.hostname or "", parts.port or 80), timeout=15, source_address=(browser.source, 0)
        )
        cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {browser.hostport}\r\nCookie: {cookie}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        self.seen = b""

    def read_until(self, marker: bytes, timeout: float = 15.0) -> bytes:
        end = time.monotonic() + timeout
        while marker not in self.seen:
            self.sock.settimeout(max(end - time.monotonic(), 0.01))
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.seen += chunk
        return self.seen

    def closed(self, timeout: float = 10.0) -> bool:
        """Whether the response ended (its last chunk, or the connection closed) in time."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.seen.endswith(b"\r\n0\r\n\r\n"):
                return True
            self.sock.settimeout(max(end - time.monotonic(), 0.01))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            if not chunk:
                return True
            self.seen += chunk
        return False

    def close(self) -> None:
        self.sock.close()


def test_a_live_stream_whose_token_was_rotated_signs_out_and_closes(stack: Stack) -> None:
    coordinator = stack.coordinator
    user = coordinator.cli_json("users", "create", "rotated-olga")
    browser = stack.browser()
    assert browser.signin(user["token"]).status == 303
    stream = Stream(browser)
    try:
        assert b"event: state" in stream.read_until(b"event: state")
        coordinator.cli("users", "rotate", "rotated-olga")
        seen = stream.read_until(b"event: signed-out", timeout=20)
        assert b"event: signed-out" in seen
        assert stream.closed(), "the stream stays open after signing out"
    finally:
        stream.close()
    # The session is over: the next page asks for a sign-in again.
    assert browser.get("/fleet").location.startswith("/signin")


def test_a_session_holds_at_most_four_live_streams(stack: Stack) -> None:
    browser = stack.browser()
    assert browser.signin(stack.tokens["bob"]).status == 303
    streams = [Stream(browser) for _ in range(4)]
    try:
        for stream in streams:
            assert b"event: state" in stream.read_until(b"event: state")
        fifth = browser.get("/events")
        assert fifth.status == 429
        assert "too many live connections for this session (the limit is 4)" in fifth.body
        streams.pop().close()
        # The closed stream's place is given back as soon as the console sees it gone.
        deadline = time.monotonic() + 15
        while (again := Stream(browser)).read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 429"):
            again.close()
            assert time.monotonic() < deadline, "the closed stream's place was not given back"
            time.sleep(0.3)
        streams.append(again)
        assert b"event: state" in again.read_until(b"event: state")
    finally:
        for stream in streams:
            stream.close()


# --- 30.6: slow and many connections ---------------------------------------------------------


@pytest.fixture(scope="module")
def tight(stack: Stack) -> Iterator[ConsoleProcess]:
    """A console with small connection limits and a one-second request timeout."""
    console = ConsoleProcess(
        stack.coordinator,
        "--request-timeout",
        "1",
        "--max-connections",
        "30",
        "--max-connections-per-client",
        "20",
        "--host-name",
        "console.test",
    ).start()
    yield console
    console.stop()


def _connect(console: ConsoleProcess, source: str) -> socket.socket:
    parts = urlsplit(console.url)
    return socket.create_connection(
        (parts.hostname or "", parts.port or 80), timeout=10, source_address=(source, 0)
    )


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Send `trickle` a byte every 0.2 s until the server closes the socket; when it did."""
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            sent += 1
        sock.settimeout(0.2)
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def test_a_request_that_trickles_in_is_cut_after_the_request_timeout(
    tight: ConsoleProcess,
) -> None:
    head = b"GET /signin HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200
    sock = _connect(tight, "127.0.0.1")
    try:
        took = _closed_within(sock, 8, head)
        assert took is not None and took < 4, f"a trickled head kept the connection: {took}"
    finally:
        sock.close()
    # The same after a first request was answered (a keep-alive connection).
    sock = _connect(tight, "127.0.0.1")
    try:
        sock.sendall(b"GET /signin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        took = _closed_within(sock, 8, head)
        assert took is not None and took < 4
    finally:
        sock.close()
    # A body that trickles in is cut the same way.
    sock = _connect(tight, "127.0.0.1")
    try:
        sock.sendall(
            b"POST /signin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
        )
        took = _closed_within(sock, 8, b"x" * 500)
        assert took is not None and took < 4
    finally:
        sock.close()


def test_connections_are_capped_per_client_and_in_all(tight: ConsoleProcess) -> None:
    held: list[socket.socket] = []
    try:
        held += [_connect(tight, "127.0.0.1") for _ in range(20)]
        over = _connect(tight, "127.0.0.1")
        answer = over.recv(65536)
        over.close()
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"20 connections from 127.0.0.1 are open (the limit)" in answer
        # Another client still gets in, up to the console's own limit.
        assert Browser(tight.url, "127.0.0.2").get("/signin").status == 200
        held += [_connect(tight, "127.0.0.2") for _ in range(10)]
        over = _connect(tight, "127.0.0.3")
        answer = over.recv(65536)
        over.close()
        assert b"the console has 30 connections open (its limit)" in answer
    finally:
        for sock in held:
            sock.close()
    # The idle ones were closed by the request timeout anyway; the console serves again.
    assert Browser(tight.url, "127.0.0.3").get("/signin").status == 200


def test_a_live_stream_outlives_the_request_timeout(stack: Stack, tight: ConsoleProcess) -> None:
    browser = Browser(tight.url)
    assert browser.signin(stack.tokens["alice"]).status == 303
    stream = Stream(browser)
    try:
        assert b"event: state" in stream.read_until(b"event: state")
        time.sleep(2.5)  # longer than the request timeout (1 s)
        assert not stream.closed(timeout=3)
        assert b": keep-alive" in stream.seen or stream.seen.count(b"event: state") >= 1
    finally:
        stream.close()


# --- 30.15 and DNS rebinding: the Host header -----------------------------------------------


def test_a_request_for_another_name_is_refused_before_any_handler(
    stack: Stack, tight: ConsoleProcess
) -> None:
    browser = stack.browser()
    port = urlsplit(stack.console.url).port
    refused = browser.get("/signin", host=f"rebound.example:{port}")
    assert refused.status == 400
    assert f"does not answer to the name 'rebound.example:{port}'" in refused.body
    # A sign-in through a rebound name is refused too, the token never forwarded.
    assert (
        browser.post("/signin", {"token": stack.admin_token}, host="rebound.example").status == 400
    )
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}"):
        assert browser.get("/signin", host=host).status == 200, host
    assert Browser(tight.url).get("/signin", host="console.test").status == 200
    assert Browser(tight.url).get("/signin", host="other.test").status == 400


# --- 30.13: the audit names the browser ------------------------------------------------------


def test_an_act_done_in_the_console_is_audited_with_the_browsers_reported_address(
    stack: Stack,
) -> None:
    admin = stack.browser("127.0.0.7")
    assert admin.signin(stack.admin_token).status == 303
    run_id = run_of(stack, "alice", "audited from a browser")
    done = admin.post(
        "/kill/engage",
        {"csrf": admin.csrf(), "target": "run", "run": run_id, "reason": "from the console"},
    )
    assert done.status == 303, done.body[:300]
    [entry] = [
        e
        for e in stack.coordinator.cli_json("audit")["entries"]
        if e["action"] == "kill.engage" and e["detail"].get("target") == run_id
    ]
    assert entry["peer"].startswith("ipv4:127.0.0.1:")
    assert entry["peer"].endswith(" via console, reported 127.0.0.7")
    [switch] = [
        k for k in stack.coordinator.cli_json("kill", "status")["switches"] if k["target"] == run_id
    ]
    stack.coordinator.cli("kill", "release", "--id", switch["id"], "--reason", "done")


# --- held: each of these was tried and held; they stay held ----------------------------------


def test_another_owners_run_replay_artifact_search_journal_and_live_state_are_not_found(
    stack: Stack,
) -> None:
    run_id = run_of(stack, "alice", "alice only")
    wait_run(
        stack.coordinator,
        run_id,
        lambda r: r["status"] in ("SUCCEEDED", "WAITING_FOR_ENVIRONMENT"),
        token_file=stack.token_files["alice"],
    )
    bob = stack.browser()
    assert bob.signin(stack.tokens["bob"]).status == 303
    for path in (
        f"/runs/{run_id}",
        f"/runs/{run_id}/replay",
        f"/runs/{run_id}/artifacts/{'0' * 64}",
        f"/runs/{run_id}?search=alice",
        f"/runs/{run_id}?after=0",
    ):
        reply = bob.get(path)
        assert reply.status == 404, (path, reply.status)
        assert "alice only" not in reply.body
    stream = Stream(bob, f"/events?run={run_id}")
    try:
        seen = stream.read_until(b"event: state")
        assert b'"error": "no run' in seen and b"alice only" not in seen
    finally:
        stream.close()


def test_every_change_needs_the_sessions_csrf_token_and_the_consoles_origin(stack: Stack) -> None:
    run_id = run_of(stack, "alice", "csrf target")
    admin = stack.browser()
    assert admin.signin(stack.admin_token).status == 303
    token = admin.csrf()
    changes = [
        ("/kill/engage", {"target": "fleet", "reason": "csrf"}),
        (f"/runs/{run_id}/cancel", {}),
        (f"/runs/{run_id}/guide", {"text": "x"}),
        ("/questions/qst_x/answer", {"text": "x"}),
        (f"/runs/{run_id}/revise", {"plan": '{"actions": []}'}),
        ("/approvals/apr_x/discuss", {"text": "x"}),
        ("/approvals/apr_x/advise", {}),
        ("/workers/wrk_x/revoke", {}),
        ("/approvals/apr_x/approve", {}),
        ("/approvals/apr_x/guide", {"text": "x"}),
        ("/kill/kill_x/release", {"reason": "x"}),
        ("/signout", {}),
    ]
    for path, form in changes:
        assert admin.post(path, form).status == 403, path  # no token
        assert admin.post(path, {**form, "csrf": "wrong"}).status == 403, path
        cross = admin.post(path, {**form, "csrf": token}, headers={"Origin": "http://evil.example"})
        assert cross.status == 403 and "another site" in cross.body, path
    assert not [k for k in stack.coordinator.cli_json("kill", "status")["switches"] if k["engaged"]]
    assert admin.get("/fleet").status == 200  # still signed in: /signout was refused too


def test_sign_in_redirects_stay_on_the_console(stack: Stack) -> None:
    forms = [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "\\\\evil.example",
        "/\\/evil.example",
        "http:evil.example",
        "javascript:alert(1)",
        "evil.example",
        " //evil.example",
        "\t//evil.example",
        "/%2F/evil.example",
        "//evil.example@console",
        "data:text/html,x",
    ]
    for i, target in enumerate(forms):
        browser = stack.browser()
        signed = browser.signin(stack.tokens["alice"], nxt=target)
        assert signed.status == 303, target
        where = signed.location
        assert where.startswith("/") and not where.startswith("//") and "\\" not in where, (
            i,
            target,
            where,
        )
        assert "evil.example" not in urlsplit(where).netloc


def test_a_session_cookie_planted_before_sign_in_is_never_adopted(stack: Stack) -> None:
    victim = stack.browser()
    victim.cookies["df_session"] = "planted-by-an-attacker"
    assert victim.signin(stack.tokens["alice"]).status == 303
    assert victim.cookies["df_session"] != "planted-by-an-attacker"
    attacker = stack.browser()
    attacker.cookies["df_session"] = "planted-by-an-attacker"
    assert attacker.get("/fleet").location.startswith("/signin")


def test_a_worker_credential_cannot_sign_in(stack: Stack, tmp_path: Path) -> None:
    from tests.harness import WorkerProcess

    worker = WorkerProcess(stack.coordinator, "not-a-person", browser=False)
    assert worker.enroll().returncode == 0
    credential = (worker.state_dir / "credential").read_text().strip()
    refused = stack.browser("127.0.0.9").signin(credential)
    assert refused.status == 401
    assert "a worker credential cannot sign in; use a user token" in refused.body
    assert "df_session" not in stack.browser("127.0.0.9").cookies


def test_an_owner_may_neither_peek_nor_answer_an_approval(stack: Stack) -> None:
    owner = stack.browser()
    assert owner.signin(stack.tokens["alice"]).status == 303
    token = owner.csrf("/approvals")
    for op in ("peek", "approve", "deny"):
        reply = owner.post(f"/approvals/apr_missing/{op}", {"csrf": token})
        assert reply.status == 403, (op, reply.status)
        assert "Only an admin can" in reply.body and "Traceback" not in reply.body
        # Said for a person: what was refused, not the RPC behind it.
        assert not {"PeekScreen", "credential"} & set(reply.body.split()), reply.body


def test_security_headers_static_traversal_and_oversized_bodies(stack: Stack) -> None:
    browser = stack.browser()
    page = browser.get("/signin")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    for path in (
        "/static/../app.py",
        "/static/%2e%2e/app.py",
        "/static/..%2fapp.py",
        "/static/%2e%2e%2fsessions.py",
        "/static//etc/passwd",
    ):
        reply = browser.get(path)
        assert reply.status == 404 and "Console" not in reply.body, path
        assert "import" not in reply.body and "root:" not in reply.body, path
    big = browser.request(
        "POST",
        "/signin",
        headers={"Content-Length": str(60 * 1024 * 1024), "Content-Type": "text/plain"},
    )
    assert big.status == 413 and "at most 1048576 bytes" in big.body
    chunked = browser.request(
        "POST", "/signin", headers={"Transfer-Encoding": "chunked", "Content-Type": "text/plain"}
    )
    assert chunked.status == 411


# --- in-process: the pure parts ------------------------------------------------------------


# --- 33: questions and guidance from the console ---------------------------------------------


def test_a_question_is_answered_from_the_console_by_its_owner_only(stack: Stack) -> None:
    coordinator = stack.coordinator
    ask = {"name": "ask_human", "arguments": {"question": "<b>door</b>?", "required": True}}
    model = coordinator.script("console-ask.json", [{"tool_calls": [ask]}])
    goal = coordinator.cli_json(
        "goal", "ask", "--model", model, token_file=stack.token_files["alice"]
    )["id"]
    listed = wait_until(
        lambda: coordinator.cli_json(
            "questions", "list", token_file=stack.token_files["alice"]
        ).get("questions"),
        30,
        0.2,
        "alice's question",
    )
    question = listed[0]["id"]
    alice, bob = stack.browser(), stack.browser()
    assert alice.signin(stack.tokens["alice"]).status == 303
    assert bob.signin(stack.tokens["bob"]).status == 303
    page = alice.get("/approvals").body
    assert question in page and "&lt;b&gt;door&lt;/b&gt;?" in page and "<b>door" not in page
    assert question not in bob.get("/approvals").body
    theirs = bob.post(f"/questions/{question}/answer", {"text": "x", "csrf": bob.csrf()})
    assert theirs.status == 404
    answered = alice.post(
        f"/questions/{question}/answer",
        {"text": "the left one", "csrf": alice.csrf(), "back": "https://evil.example/"},
    )
    assert answered.status == 303 and answered.location.endswith("/approvals")
    done = wait_run(
        coordinator,
        goal,
        lambda r: r["status"] in ("SUCCEEDED", "FAILED", "HAND_BACK_TO_HUMAN", "CANCELLED"),
        30,
        token_file=stack.token_files["alice"],
    )
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    (q,) = (
        done.get("questions")
        or coordinator.cli_json("runs", "show", goal, token_file=stack.token_files["alice"])[
            "questions"
        ]
    )
    assert q["answer"] == "the left one"


def test_the_same_guidance_form_sent_twice_is_one_message(stack: Stack) -> None:
    coordinator = stack.coordinator
    route = {"capability": "computer_use"}
    plan = write_plan(
        coordinator.workdir / "guided.json",
        [{"kind": "diag.echo", "args": {}, "idempotent": True, "route": route}],
    )
    run_id = submit(coordinator, plan, token_file=stack.token_files["alice"])["id"]
    alice = stack.browser()
    assert alice.signin(stack.tokens["alice"]).status == 303
    page = alice.get(f"/runs/{run_id}").body
    message_id = re.search(r'name="message_id" value="([^"]+)"', page)
    assert message_id is not None
    form = {"text": "once", "csrf": alice.csrf(), "message_id": message_id.group(1)}
    assert alice.post(f"/runs/{run_id}/guide", form).status == 303
    assert alice.post(f"/runs/{run_id}/guide", form).status == 303
    assert "already sent: nothing sent twice" in alice.get(f"/runs/{run_id}").body
    shown = coordinator.cli_json("runs", "show", run_id, token_file=stack.token_files["alice"])
    assert [g["messageId"] for g in shown["guidance"]] == [message_id.group(1)]
    stale = {"text": "late", "csrf": alice.csrf(), "expected_execution": "2"}
    refused = alice.post(f"/runs/{run_id}/guide", stale)
    assert refused.status == 409 and "is at execution 1, not 2" in refused.body
    huge = {"text": "big number", "csrf": alice.csrf(), "expected_execution": "9" * 30}
    assert alice.post(f"/runs/{run_id}/guide", huge).status == 409  # a number, not a crash
    coordinator.cli("runs", "cancel", run_id, token_file=stack.token_files["alice"])


def test_a_stopped_plan_is_revised_from_its_page(stack: Stack) -> None:
    coordinator = stack.coordinator
    route = {"worker": "nobody-here"}
    plan = write_plan(
        coordinator.workdir / "to-revise.json",
        [{"kind": "diag.echo", "args": {}, "idempotent": True, "route": route}],
    )
    run_id = submit(coordinator, plan, token_file=stack.token_files["alice"])["id"]
    coordinator.cli("runs", "cancel", run_id, token_file=stack.token_files["alice"])
    alice = stack.browser()
    assert alice.signin(stack.tokens["alice"]).status == 303
    assert 'id="revise"' not in alice.get(f"/runs/{run_id}").body  # cancelled: nothing to revise
    refused = alice.post(
        f"/runs/{run_id}/revise",
        {"plan": '{"actions": [{"kind": "diag.echo"}]}', "csrf": alice.csrf()},
    )
    assert refused.status == 409 and "only a FAILED or HAND_BACK_TO_HUMAN run" in refused.body
    broken = alice.post(f"/runs/{run_id}/revise", {"plan": "{not json", "csrf": alice.csrf()})
    assert broken.status == 400 and broken.body.count("plan:") >= 1
    limited = '{"actions": [{"kind": "diag.echo"}], "limits": {"max_actions": 5}}'
    capped = alice.post(f"/runs/{run_id}/revise", {"plan": limited, "csrf": alice.csrf()})
    assert capped.status == 400 and "limits carry over" in capped.body
