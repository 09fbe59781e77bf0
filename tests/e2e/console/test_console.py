"""The web console in a real Chromium: a real console process in front of a real coordinator
and a real worker on Xvfb, one of each for the whole module.

The pure parts (sessions, redirects, the approve form, the timeline's geometry, how text is
printed) are tests/unit/console/test_console.py.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.harness import (
    ConsoleProcess,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    submit,
    wait_run,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MARKUP_TITLE = '<img src=x onerror="window.pwned=1"><b>bold</b> & "quoted"'


@dataclass
class Stack:
    coordinator: CoordinatorProcess
    worker: WorkerProcess
    console: ConsoleProcess
    browser: Any
    admin_token: str
    tokens: dict[str, str]  # owner name -> token
    token_files: dict[str, Path]
    xvfb_size: tuple[int, int]

    def context(self) -> Any:
        return self.browser.new_context(base_url=self.console.url, service_workers="block")

    def signed_in(self, token: str) -> tuple[Any, Any]:
        context = self.context()
        page = context.new_page()
        page.goto("/signin")
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_url("**/fleet")
        return context, page


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, xvfb: Xvfb) -> Iterator[Stack]:
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    require(shutil.which("xdotool") is not None, "xdotool is not installed")
    from playwright.sync_api import sync_playwright

    workdir = tmp_path_factory.mktemp("console")
    coordinator = CoordinatorProcess(workdir / "coord").start()
    worker = console = None
    playwright = sync_playwright().start()
    try:
        worker = WorkerProcess(coordinator, "desk", display_env=xvfb.env).start()
        worker.wait_online()
        tokens, files = {}, {}
        for name in ("alice", "bob"):
            tokens[name] = coordinator.cli_json("users", "create", name)["token"]
            files[name] = workdir / f"{name}.token"
            files[name].write_text(tokens[name])
        console = ConsoleProcess(coordinator).start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield Stack(
            coordinator,
            worker,
            console,
            browser,
            coordinator.admin_token_file.read_text().strip(),
            tokens,
            files,
            xvfb.size,
        )
        browser.close()
    finally:
        playwright.stop()
        if console is not None:
            console.stop()
        if worker is not None:
            worker.stop()
        coordinator.stop()


def run_as(stack: Stack, owner: str, title: str, value: Any = "hello") -> dict[str, Any]:
    plan = write_plan(
        stack.coordinator.workdir / f"plan-{owner}.json",
        [{"kind": "diag.echo", "args": {"value": value}, "idempotent": True}],
        title=title,
    )
    run = submit(stack.coordinator, plan, token_file=stack.token_files[owner])
    done: dict[str, Any] = wait_run(
        stack.coordinator,
        run["id"],
        lambda r: r["status"] == "SUCCEEDED",
        token_file=stack.token_files[owner],
    )
    return done


def text_of(page: Any) -> str:
    text: str = page.evaluate("document.body.innerText")
    return text


def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_the_session(
    stack: Stack,
) -> None:
    context = stack.context()
    page = context.new_page()
    page.goto("/runs")
    assert page.url.endswith("/signin?next=%2Fruns")  # no session: to the sign-in form
    page.fill("#token", "dfu_nobody.not-a-token")
    page.click("button[type=submit]")
    assert "sign-in refused" in text_of(page)
    assert not [c for c in context.cookies() if c["name"] == "df_session"]

    page.fill("#token", stack.tokens["alice"])
    page.click("button[type=submit]")
    page.wait_for_url("**/runs")  # back where the person was going
    [cookie] = [c for c in context.cookies() if c["name"] == "df_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert stack.tokens["alice"] not in json.dumps(context.cookies())  # the token stays server-side
    assert "alice (owner)" in text_of(page)
    csp = page.request.get("/fleet").headers["content-security-policy"]
    assert "default-src 'self'" in csp and "unsafe-inline" not in csp

    page.click("text=Sign out")
    page.wait_for_url("**/signin")
    page.goto("/fleet")
    assert "/signin" in page.url
    # The old cookie no longer opens anything, even replayed by hand.
    replay = stack.context()
    replay.add_cookies([{**cookie, "expires": -1}])
    replay_page = replay.new_page()
    replay_page.goto("/fleet")
    assert "/signin" in replay_page.url
    replay.close()
    context.close()


def test_an_owner_sees_only_their_own_runs(stack: Stack) -> None:
    mine = run_as(stack, "alice", "alice's weekly check")
    theirs = run_as(stack, "bob", "bob's private errand")
    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto("/runs")
    shown = text_of(page)
    assert "alice's weekly check" in shown and "bob's private errand" not in shown
    response = page.goto(f"/runs/{theirs['id']}")
    assert response.status == 404 and f"no run '{theirs['id']}'" in text_of(page)
    assert "bob's private errand" not in text_of(page)
    page.goto(f"/runs/{mine['id']}")
    assert "SUCCEEDED" in text_of(page)
    assert page.locator("svg.timeline rect.bar").count() >= 2  # a state and an attempt drawn
    context.close()

    # Runs belong to their owner for every role: bob does not see alice's either.
    context, page = stack.signed_in(stack.tokens["bob"])
    page.goto("/runs")
    shown = text_of(page)
    assert "bob's private errand" in shown and "alice's weekly check" not in shown
    context.close()


def test_markup_and_control_characters_are_shown_as_text(stack: Stack) -> None:
    run = run_as(stack, "alice", MARKUP_TITLE, value="\x1b[31mred\u202eevil")
    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto("/runs")
    assert MARKUP_TITLE in text_of(page)
    page.goto(f"/runs/{run['id']}")
    heading = page.locator("h1.run-title")
    assert heading.inner_text() == MARKUP_TITLE
    assert heading.locator("b, img").count() == 0  # not parsed as elements
    assert page.evaluate("window.pwned") is None
    page.click("details.journal > summary")  # collapsed until asked for
    journal = page.locator("ol.journal").inner_text()
    assert "31mred" in journal and "evil" in journal
    # Whatever the receipt holds, no raw escape or bidi override reaches the page (the
    # templates spell them out: test_templates_spell_out_control_characters).
    assert "\x1b" not in text_of(page) and "\u202e" not in text_of(page)
    context.close()


def test_a_change_without_the_csrf_token_is_refused(stack: Stack) -> None:
    context, page = stack.signed_in(stack.admin_token)
    form = {"target": "fleet", "reason": "forged"}
    missing = page.request.post("/kill/engage", form=form)
    wrong = page.request.post("/kill/engage", form={**form, "csrf": "guessed"})
    for response in (missing, wrong):
        assert response.status == 403 and "CSRF token" in response.text()
    # The right token from another site is refused too.
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    foreign = page.request.post(
        "/kill/engage", form={**form, "csrf": token}, headers={"Origin": "http://evil.test"}
    )
    assert foreign.status == 403 and "another site" in foreign.text()
    assert stack.coordinator.cli_json("kill", "status")["switches"] == []
    context.close()


def test_engaging_the_fleet_kill_switch_shows_it_engaged_and_acknowledged(stack: Stack) -> None:
    context, page = stack.signed_in(stack.admin_token)
    page.fill("#stop-reason", "maintenance <b>now</b>")
    page.click("text=Stop the fleet")
    page.wait_for_url("**/kill")
    assert page.locator(".stopbar.engaged").count() == 1
    assert "ENGAGED" in page.locator(".stopbar").inner_text()
    row = page.locator("tr[data-switch]")
    assert "maintenance <b>now</b>" in row.inner_text()

    def acknowledged() -> bool:
        page.reload()
        return stack.worker.worker_id in page.locator("tr[data-switch] .acked").inner_text()

    wait_until(acknowledged, 20, 0.5, "the worker's acknowledgement on the page")
    assert "none" in page.locator("tr[data-switch] .unacked").inner_text()
    # Every page says so, and the live stream says so to a page opened before.
    page.goto("/runs")
    assert page.locator(".stopbar.engaged").count() == 1

    page.goto("/kill")
    page.click("text=Release…")
    assert "Release kill switch" in text_of(page)
    page.fill("#reason", "done")
    page.click("button.danger")
    page.wait_for_url("**/kill")
    assert "No kill switch is engaged" in text_of(page)
    assert page.locator(".stopbar.engaged").count() == 0
    context.close()


def test_approving_by_drawing_a_region_grants_that_region_only(stack: Stack) -> None:
    coordinator = stack.coordinator
    run = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        stack.worker.worker_id,
        "--reason",
        "fill <i>the</i> form",
        "--action=screenshot",
        "--action=left_click",
        token_file=stack.token_files["alice"],
    )
    context, page = stack.signed_in(stack.admin_token)
    wait_until(
        lambda: page.reload() or page.locator("[data-live=pending]").inner_text() == "1",
        10,
        0.3,
        "the pending count",
    )
    page.goto("/approvals")
    assert "fill <i>the</i> form" in text_of(page)
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [approval] = [a for a in pending if a["runId"] == run["id"]]
    page.click(f"a[href='/approvals/{approval['id']}']")
    svg = page.locator("#screen")
    box = svg.bounding_box()
    scale = box["width"] / 1280
    page.mouse.move(box["x"] + 100 * scale, box["y"] + 100 * scale)
    page.mouse.down()
    page.mouse.move(box["x"] + 400 * scale, box["y"] + 300 * scale, steps=5)
    page.mouse.move(box["x"] + 600 * scale, box["y"] + 400 * scale, steps=5)
    page.mouse.up()
    drawn = [int(page.input_value(f"#{k}")) for k in ("rx", "ry", "rw", "rh")]
    for got, want in zip(drawn, (100, 100, 500, 300), strict=True):
        assert abs(got - want) <= 3, drawn
    page.uncheck("input[name=actions][value=screenshot]")
    page.fill("#maxa", "5")
    page.fill("#a-reason", "only the form")
    with page.expect_navigation():  # the same URL again: wait for the new page, not the old
        page.click("form[action$='/approve'] button[type=submit]")
    assert "approved" in text_of(page)
    granted = page.locator("[data-granted]").inner_text()
    assert f"region {drawn[2]}x{drawn[3]}+{drawn[0]}+{drawn[1]}" in granted
    assert "left_click" in granted and "screenshot" not in granted
    assert "at most 5 actions" in granted

    done = coordinator.cli(
        "desktop",
        "act",
        run["id"],
        "left_click",
        "--x",
        "1000",
        "--y",
        "700",
        token_file=stack.token_files["alice"],
        json_out=True,
        check=False,
        timeout=60,
    )
    refused = json.loads(done.stdout)
    assert refused["status"] == "refused" and refused["code"] == "outside_region", refused
    context.close()


def test_the_fleet_page_filters_and_pages_in_the_coordinator(stack: Stack) -> None:
    worker_id = stack.worker.worker_id
    context, page = stack.signed_in(stack.admin_token)
    page.goto("/fleet?q=DESK&online=yes")
    assert page.locator(f"a[href='/workers/{worker_id}']").count() == 1
    assert page.locator("[data-count=online] .n").inner_text() == "1"
    page.goto("/fleet?q=no-such-worker")
    assert "No worker matches." in text_of(page)
    assert page.locator("[data-count=online] .n").inner_text() == "1"  # counts: the whole fleet
    response = page.goto("/fleet?after=forged")
    assert response.status == 400 and "page_token: not a token" in text_of(page)
    context.close()
    # An owner sees the workers, without the admin's filters.
    context, page = stack.signed_in(stack.tokens["alice"])
    assert page.locator(f"a[href='/workers/{worker_id}']").count() == 1
    assert page.locator("form.filters").count() == 0
    context.close()


def test_an_admin_peeks_at_the_requested_screen_and_the_look_is_audited(
    stack: Stack, window: Callable[[], None]
) -> None:
    from io import BytesIO

    from PIL import Image

    coordinator = stack.coordinator
    run = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        stack.worker.worker_id,
        "--reason",
        "look first",
        "--action=left_click",
        token_file=stack.token_files["alice"],
    )
    [approval] = [
        a for a in coordinator.cli_json("approvals", "list")["approvals"] if a["runId"] == run["id"]
    ]
    out = coordinator.workdir / "peek.png"
    # The owner who asked may not look: the screen is not theirs until an admin says so.
    refused = coordinator.cli(
        "approvals",
        "peek",
        approval["id"],
        "--out",
        str(out),
        token_file=stack.token_files["alice"],
        check=False,
    )
    assert (
        refused.returncode != 0 and "admin" in refused.stderr and "Traceback" not in refused.stderr
    )
    assert not out.exists()

    context, page = stack.signed_in(stack.admin_token)
    page.goto(f"/approvals/{approval['id']}")
    assert page.locator("svg#screen image.peek").count() == 0
    page.click("form[data-peek] button[type=submit]")
    page.wait_for_selector("svg#screen image.peek")
    width, height = stack.xvfb_size
    image = page.locator("svg#screen image.peek")
    assert (image.get_attribute("width"), image.get_attribute("height")) == (
        str(width),
        str(height),
    )
    assert page.locator("#screen").get_attribute("viewBox") == f"0 0 {width} {height}"
    # The browser loaded the captured image itself, at the display's real size.
    shot = page.request.get(f"/approvals/{approval['id']}/screen")
    assert shot.status == 200 and shot.headers["content-type"] in ("image/png", "image/jpeg")
    with Image.open(BytesIO(shot.body())) as img:
        assert img.size == (width, height)
        # The display as it is: the form page's window (white, with its red target), not the
        # bare black screen.
        colors = {c: n for n, c in img.convert("RGB").getcolors(maxcolors=width * height) or []}
        assert colors.get((255, 255, 255), 0) > width * height // 2 and (255, 0, 0) in colors
    # Another session (even an admin's) does not see this session's peek.
    other, other_page = stack.signed_in(stack.admin_token)
    assert other_page.request.get(f"/approvals/{approval['id']}/screen").status == 404
    other.close()

    [entry] = [
        e
        for e in coordinator.cli_json("audit")["entries"]
        if e["action"] == "approval.peek" and e["target"] == approval["id"]
    ]
    assert entry["actorRole"] == "admin" and entry["detail"]["run"] == run["id"]
    assert entry["detail"]["worker"] == stack.worker.worker_id and entry["at"]

    # The CLI writes the same screen to a file.
    coordinator.cli("approvals", "peek", approval["id"], "--out", str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # the screen is the admin's alone (30.16)
    with Image.open(out) as img:
        assert img.size == (width, height)

    # Under a kill switch the screen stays unseen; the refusal says why, in one line.
    switch = coordinator.cli_json(
        "kill", "engage", "--worker", stack.worker.worker_id, "--reason", "x"
    )
    response = page.request.post(f"/approvals/{approval['id']}/peek", form={"csrf": _csrf(page)})
    assert response.status == 409 and "kill switch" in response.text()
    assert f"kill switch {switch['id']} (worker) is engaged" in response.text()
    # The screen already peeked is no longer served either, nor drawn on the approval's page.
    gone = page.request.get(f"/approvals/{approval['id']}/screen")
    assert gone.status == 410 and "no longer shown" in gone.text()
    assert gone.headers["cache-control"] == "no-store"
    page.goto(f"/approvals/{approval['id']}")
    assert page.locator("svg#screen image.peek").count() == 0
    coordinator.cli("kill", "release", "--worker", stack.worker.worker_id, "--reason", "done")

    # The switch ended the request (it must be asked again): no longer one to peek for.
    response = page.request.post(f"/approvals/{approval['id']}/peek", form={"csrf": _csrf(page)})
    assert response.status == 409 and "ended, not pending" in response.text()
    done = coordinator.cli("approvals", "peek", approval["id"], "--out", str(out), check=False)
    assert done.returncode != 0 and "not pending" in done.stderr
    context.close()


def test_a_peek_at_a_display_that_is_gone_or_a_worker_offline_says_so(stack: Stack) -> None:
    coordinator = stack.coordinator
    away = WorkerProcess(coordinator, "away")
    assert away.enroll().returncode == 0  # enrolled, never connected
    out = coordinator.workdir / "nothing.png"
    # A display the connected worker does not have is refused at the request itself now; a
    # peek finds a display gone only when the worker came back without it after the request.
    refused = coordinator.cli(
        "desktop",
        "request",
        "--worker",
        stack.worker.worker_id,
        "--display",
        "3",
        "--action=left_click",
        token_file=stack.token_files["alice"],
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stderr.endswith("has no display 3 (it has 1: display 0)\n"), refused.stderr
    cases = (
        (away.worker_id, "0", f"worker {away.worker_id} is offline: there is no screen to show"),
    )
    for worker_id, display, said in cases:
        run = coordinator.cli_json(
            "desktop",
            "request",
            "--worker",
            worker_id,
            "--display",
            display,
            "--action=left_click",
            token_file=stack.token_files["alice"],
        )
        [approval] = [
            a
            for a in coordinator.cli_json("approvals", "list")["approvals"]
            if a["runId"] == run["id"]
        ]
        done = coordinator.cli("approvals", "peek", approval["id"], "--out", str(out), check=False)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()
        coordinator.cli("approvals", "deny", approval["id"], "--reason", "tested")


def _csrf(page: Any) -> str:
    token: str = page.locator("input[name=csrf]").first.get_attribute("value")
    return token


# --- in-process: the pure parts ------------------------------------------------------------
