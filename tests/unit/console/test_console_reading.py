"""What a person reads in the console: the approval answer's reason is optional and labelled so,
refusals are sentences without RPC names, what a role cannot use is not offered, run ids are
links, a favicon is served. The layout in a real Chromium at 1280 px:
tests/e2e/console/test_console_runs.py."""

from __future__ import annotations

import asyncio
import re
from typing import Any


def _render(name: str, role: str, path: str, **context: Any) -> str:
    from coordinator.console.pages import _templates
    from coordinator.console.sessions import Sessions

    session = Sessions().create(token="t", user_id="usr_1", name="ann", role=role)
    text: str = (
        _templates()
        .get_template(name)
        .render(
            session=session,
            flashes=[],
            pending=0,
            fleet_stopped=False,
            request=None,
            path=path,
            csrf="x",
            **context,
        )
    )
    return text


def _input(html: str, element_id: str) -> str:
    found = re.search(rf"<input id=\"{element_id}\"[^>]*>", html)
    assert found, element_id
    return found.group(0)


def _label(html: str, element_id: str) -> str:
    found = re.search(rf"<label for=\"{element_id}\">([^<]*)</label>", html)
    assert found, element_id
    return found.group(1)


def test_approving_or_denying_takes_an_optional_reason_labelled_so() -> None:
    from shared.gen.deskfleet.v1 import desktop_pb2

    approval = desktop_pb2.Approval(id="apr_1", run_id="run_1", kind="plan", status="pending")
    html = _render(
        "approval.html",
        "admin",
        "/approvals/apr_1",
        approval=approval,
        discussion=desktop_pb2.ApprovalDiscussion(),
        worker=None,
        display=None,
        peek=None,
        region=None,
        actions=[],
    )
    for field in ("a-reason", "d-reason"):  # approve, deny
        assert "required" not in _input(html, field), field
        assert "optional" in _label(html, field), field


async def _get(app: Any, path: str, cookie: str = "") -> tuple[int, dict[str, str], bytes]:
    """One GET through the ASGI app, in this process."""
    headers = [(b"host", b"127.0.0.1")] + ([(b"cookie", cookie.encode())] if cookie else [])
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    asked: list[bool] = []

    async def receive() -> dict[str, Any]:
        if asked:  # the browser stays: a streamed response stops waiting once it is sent
            await asyncio.Event().wait()
        asked.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def _console() -> Any:
    from coordinator.console.app import create_app
    from coordinator.console.pages import ConsoleSettings
    from shared.config import ClientConfig

    # Nothing listens at port 1: a page that asked the coordinator would fail, not pass.
    return create_app(ConsoleSettings(ClientConfig("127.0.0.1:1", None, None)))


def test_a_refusal_says_what_was_refused_and_who_may_without_an_rpc_name() -> None:
    from coordinator.console.wording import for_people
    from shared.errors import NotFoundError, PermissionDeniedError, UnavailableError

    guard = PermissionDeniedError(
        "ListAudit needs an admin credential; this one is an owner credential (usr_01abc)"
    )
    assert for_people(guard, "ann", "owner") == (
        "Only an admin can read the audit log: you are signed in as ann, an owner."
    )
    both = PermissionDeniedError(
        "GetRun needs an admin or owner credential; this one is a worker credential (wrk_1)"
    )
    assert (
        for_people(both) == "Only an admin or owner can open a run: you are signed in as a worker."
    )
    named = PermissionDeniedError("PeekScreen is refused while the fleet is stopped")
    assert for_people(named) == "“look at a requested screen” is refused while the fleet is stopped"
    assert for_people(NotFoundError("no run 'run_x'")) == "no run 'run_x'"  # already a sentence
    gone = UnavailableError("cannot reach the coordinator at 127.0.0.1:1: connection refused")
    assert for_people(gone).startswith("The console cannot reach the coordinator at 127.0.0.1:1")


def test_every_guarded_rpc_has_words_for_people() -> None:
    from coordinator.console.wording import DOING
    from coordinator.security.authz import RULES

    missing = [m.rsplit("/", 1)[-1] for m in RULES if m.rsplit("/", 1)[-1] not in DOING]
    assert not missing, f"add to coordinator/console/wording.py DOING: {missing}"


async def test_an_owner_is_not_offered_the_audit_log_and_told_why_at_its_address() -> None:
    app = _console()
    console = app.state.console
    owner = console.sessions.create(token="t", user_id="usr_1", name="ann", role="owner")
    status, _, body = await _get(app, "/audit", f"{console.session_cookie}={owner.id}")
    text = body.decode()
    assert status == 403, text
    assert "Only an admin can read the audit log: you are signed in as ann, an owner." in text
    assert "ListAudit" not in text and 'href="/audit"' not in text  # nor in the nav
    admin_nav = _render("error.html", "admin", "/fleet", message="")
    owner_nav = _render("error.html", "owner", "/fleet", message="")
    assert 'href="/audit"' in admin_nav and 'href="/audit"' not in owner_nav


async def test_the_console_serves_its_own_favicon_signed_in_or_not() -> None:
    status, headers, body = await _get(_console(), "/favicon.ico")
    assert status == 200 and headers["content-type"].startswith("image/svg+xml")
    assert body.startswith(b"<svg") and b"http" not in body.replace(b"http://www.w3.org", b"")
    assert '<link rel="icon" href="/favicon.ico"' in _render("signin.html", "owner", "/signin")


def test_run_ids_under_a_workers_actions_are_links() -> None:
    from shared.gen.deskfleet.v1 import admin_pb2, fleet_pb2

    act = admin_pb2.WorkerActivity(worker_id="wrk_1", run_id="run_7", index=1, kind="diag.echo")
    for role, href in (
        ("owner", "/runs/run_7"),
        ("admin", "/runs?owner=%2A&amp;limit=1000&amp;q=run_7"),
    ):
        html = _render(
            "worker.html",
            role,
            "/workers/wrk_1",
            worker=fleet_pb2.WorkerInfo(id="wrk_1", name="desk"),
            actions=[act],
            recent=[act],
            fleet_wide=role == "admin",
            switches=[],
        )
        assert html.count(f'href="{href}"') == 2, (role, html)


def test_a_cell_shortens_only_words_longer_than_it_holds() -> None:
    from coordinator.console.model import short_words

    assert short_words("budget_exhausted: max_actions") == "budget_exhausted: max_actions"
    cut = short_words("see /var/lib/deskfleet/spool/incoming/batch-0000000000017/x.json now")
    assert cut == "see /var/lib/deskfleet/spool/incoming/batch… now"


def test_the_journal_is_paged_by_its_sequence_numbers() -> None:
    from coordinator.console.model import JournalPages

    first = JournalPages(after=0, last_seq=120, size=50)
    assert (first.number, first.count, first.earlier, first.later, first.last) == (
        1,
        3,
        None,
        50,
        100,
    )
    third = JournalPages(after=100, last_seq=120, size=50)
    assert (third.number, third.earlier, third.later) == (3, 50, None)
    assert JournalPages(after=0, last_seq=0, size=50).count == 1
