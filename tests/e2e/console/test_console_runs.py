"""The console's runs in a real Chromium: the runs list and its filters (whose runs is the
coordinator's decision), a research run's report, a desktop run's replay, the worker page, and
an accessibility check of the main pages. One coordinator, console and worker (on Xvfb, so it
offers both the headless browser and the desktop) for the whole module.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.e2e.agent.test_goal import STOPPED, _computer
from tests.e2e.console.test_console import CHROMIUM, FLAGS, Stack, run_as, text_of
from tests.harness import (
    BIN,
    ConsoleProcess,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    base_env,
    submit,
    wait_run,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow

# A page whose title and text are markup and control characters: shown as text, never parsed.
HOSTILE_TITLE = '<img src=x onerror="window.pwned=1"><b>Keeper</b> log'
HOSTILE_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'>"
    "<title>&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;&lt;b&gt;Keeper&lt;/b&gt; log"
    "&#x202e;</title></head><body><article>"
    "<h2 id='keepers'>Keepers of the lamp</h2>"
    "<p>The keeper lit the lamp every night until 1962 &lt;script&gt;window.pwned=2"
    "&lt;/script&gt; and wrote it in the log.</p>"
    "<h2 id='other'>Visitors</h2><p>Visitors came by boat in summer to see the gardens.</p>"
    "</article></body></html>"
)
PLAIN_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>Lamp notes</title></head><body>"
    "<article><h2 id='lamp'>The lamp</h2><p>The lamp of the keeper burned oil until 1962,"
    " when the keeper left.</p></article></body></html>"
)


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        pages = {"/hostile.html": HOSTILE_PAGE, "/notes.html": PLAIN_PAGE}
        if self.path == "/report.pdf":
            body, media = b"%PDF-1.4\n%\xe2\xe3\n", "application/pdf"
        elif self.path in pages:
            body, media = pages[self.path].encode(), "text/html; charset=utf-8"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", media)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, xvfb: Xvfb) -> Iterator[Stack]:
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    require(shutil.which("xdotool") is not None, "xdotool is not installed")
    from playwright.sync_api import sync_playwright

    workdir = tmp_path_factory.mktemp("console-runs")
    coordinator = CoordinatorProcess(workdir / "coord", heartbeat=0.5, lease=8.0).start()
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


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def titles(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("table .run-title").all_inner_texts()]


def test_the_runs_list_filters_by_state_kind_and_for_admins_owner(stack: Stack) -> None:
    mine = run_as(stack, "alice", "alice counts lamps")
    theirs = run_as(stack, "bob", "bob's private errand")
    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto("/runs")
    assert "alice counts lamps" in titles(page) and "bob's private errand" not in text_of(page)
    assert page.locator("#r-owner").count() == 0  # no owner filter for an owner
    page.select_option("#r-kind", "plan")
    page.select_option("#r-status", "SUCCEEDED")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/runs?*kind=plan*")
    assert titles(page) == ["alice counts lamps"]
    assert page.locator("table tbody tr td:nth-child(2)").first.inner_text() == "plan"
    page.goto("/runs?kind=research")
    assert titles(page) == [] and "No run matches." in text_of(page)
    page.goto("/runs?status=FAILED")
    assert titles(page) == []

    # Naming another owner in the URL is refused by the coordinator, not filtered here.
    for owner, status, said in (
        ("bob", 404, "no user 'bob'"),
        (theirs["owner"], 404, "no user"),
        ("*", 403, "only admins list every owner's runs"),
    ):
        response = page.goto(f"/runs?owner={owner}")
        assert response.status == status and said in text_of(page), owner
        assert "bob's private errand" not in text_of(page)
    response = page.goto(f"/runs/{theirs['id']}")
    assert response.status == 404 and "bob's private errand" not in text_of(page)
    page.goto("/runs?owner=alice")  # naming oneself is one's own list
    assert titles(page) == ["alice counts lamps"]
    context.close()

    context, page = stack.signed_in(stack.admin_token)
    page.goto("/runs")
    assert titles(page) == []  # an admin's own list: the admin has no runs
    page.fill("#r-owner", "*")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/runs?*owner=*")
    assert {"alice counts lamps", "bob's private errand"} <= set(titles(page))
    assert "Every owner's runs" in page.locator("table caption").inner_text()
    # Another owner's run is listed, not opened: its journal stays its owner's.
    assert page.locator(f"a[href='/runs/{theirs['id']}']").count() == 0
    page.fill("#r-owner", "bob")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/runs?*owner=bob*")
    assert titles(page) == ["bob's private errand"]
    page.goto(f"/runs?owner={mine['owner']}&kind=desktop")
    assert titles(page) == []
    response = page.goto("/runs?owner=nobody-here")
    assert response.status == 404 and "no user 'nobody-here'" in text_of(page)
    response = page.goto("/runs?kind=%3Cscript%3E")
    assert response.status == 400 and "kind: one of plan, research, desktop, goal" in text_of(page)
    context.close()


@pytest.fixture(scope="module")
def research_run(stack: Stack, pages: str) -> dict[str, Any]:
    """alice's research over a hostile page, a plain one, a PDF and one past the page limit."""
    urls = [f"{pages}/hostile.html", f"{pages}/notes.html", f"{pages}/report.pdf"]
    done = stack.coordinator.cli(
        "research",
        "keeper lamp 1962",
        *[a for u in [*urls, f"{pages}/late.html"] for a in ("--url", u)],
        "--max-pages",
        "3",
        "--wait",
        token_file=stack.token_files["alice"],
        json_out=True,
        check=False,
        timeout=180,
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    assert doc["status"] == "SUCCEEDED", (doc.get("stopReason"), done.stderr)
    return doc


def test_a_research_run_shows_its_report_with_passages_links_and_reasons(
    stack: Stack, pages: str, research_run: dict[str, Any]
) -> None:
    doc = research_run
    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto(f"/runs/{doc['id']}")
    report = page.locator("section.report")
    assert report.locator("q.report-query").inner_text() == "keeper lamp 1962"
    summary = report.locator("p").first.inner_text()
    assert "2 of 2 source(s) read hold matching text, 1 not evidence, 1 skipped" in summary

    hostile = report.locator("li.source", has_text="Keepers of the lamp")
    title = hostile.locator("h4.source-title")
    assert title.inner_text().startswith(HOSTILE_TITLE)
    assert "\\u202e" in title.inner_text()  # the bidi override spelled out, not applied
    assert report.locator("img, b, script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert title.locator("a").get_attribute("href") == f"{pages}/hostile.html"
    passage = hostile.locator("ul.passages li").first
    assert passage.locator("strong.heading").inner_text() == "Keepers of the lamp"
    assert "until 1962 <script>window.pwned=2</script>" in passage.inner_text()
    link = passage.locator("a.passage-link").get_attribute("href")
    assert link is not None and link.startswith(f"{pages}/hostile.html#") and ":~:text=" in link
    best = report.locator("ol.best li")
    assert best.count() >= 2 and ":~:text=" in (best.first.locator("a").get_attribute("href") or "")

    failures = report.locator("ul.failures").inner_text()
    assert f"{pages}/report.pdf: unsupported_content" in failures
    skipped = report.locator("ul.skipped").inner_text()
    assert f"{pages}/late.html: max_pages" in skipped
    assert "\x1b" not in text_of(page) and "\u202e" not in text_of(page)
    context.close()


def desktop_act(stack: Stack, run_id: str, action: str, *args: str) -> dict[str, Any]:
    done = stack.coordinator.cli(
        "desktop", "act", run_id, action, *args, json_out=True, check=False, timeout=90
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == 0, (action, doc, done.stderr)
    return doc


@dataclass(frozen=True)
class Replayed:
    run_id: str
    first: str  # the screenshot step's frame
    after_fourth: str  # the fourth step's screenshot_after
    secret: str


@pytest.fixture(scope="module")
def replayed(stack: Stack) -> Replayed:
    """An admin's desktop run of five steps (then cancelled): a screenshot, a click, typing
    a secret, a click with a screenshot after, a key."""
    coordinator = stack.coordinator
    secret = "hunter2-<b>Ü</b>"
    coordinator.cli("secrets", "set", "PW", input_text=secret + "\n")
    run = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        stack.worker.worker_id,
        "--reason",
        "replay me",
        *[f"--action={a}" for a in ("screenshot", "left_click", "type", "key")],
    )
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [approval] = [a for a in pending if a["runId"] == run["id"]]
    coordinator.cli("approvals", "approve", approval["id"])
    space = ("--space", "640x400")
    first = desktop_act(stack, run["id"], "screenshot", *space)
    desktop_act(stack, run["id"], "left_click", "--x", "100", "--y", "50", *space)
    desktop_act(stack, run["id"], "type", "--text", "pw {{secret:PW}}")
    fourth = desktop_act(
        stack, run["id"], "left_click", "--x", "300", "--y", "200", "--screenshot-after", *space
    )
    desktop_act(stack, run["id"], "key", "--key", "Escape")
    coordinator.cli("runs", "cancel", run["id"])
    return Replayed(
        run["id"],
        first["result"]["screenshot"]["sha256"],
        fourth["result"]["screenshot_after"]["sha256"],
        secret,
    )


def test_a_desktop_runs_replay_shows_its_frames_in_order_with_each_action_drawn(
    stack: Stack, replayed: Replayed
) -> None:
    run = {"id": replayed.run_id}
    one, after_four, secret = replayed.first, replayed.after_fourth, replayed.secret
    context, page = stack.signed_in(stack.admin_token)
    page.goto(f"/runs/{run['id']}")
    page.click("text=Replay the desktop steps")
    page.wait_for_url(f"**/runs/{run['id']}/replay")
    frames = page.locator("li.frame")
    assert [frames.nth(i).get_attribute("data-action") for i in range(frames.count())] == [
        "screenshot",
        "left_click",
        "type",
        "left_click",
        "key",
    ]
    assert [frames.nth(i).get_attribute("data-shot") for i in range(5)] == [one] * 4 + [after_four]
    click = frames.nth(1).locator("circle.click")
    assert click.get_attribute("data-point") == "100.0,50.0"  # in the 640x400 frame's pixels
    assert frames.nth(3).locator("circle.click").get_attribute("data-point") == "300.0,200.0"
    assert frames.nth(2).locator("q.typed-text").inner_text() == "pw {{secret:PW}}"
    assert secret not in page.content() and "hunter2" not in text_of(page)
    image = page.request.get(f"/runs/{run['id']}/artifacts/{one}")
    assert image.status == 200 and image.headers["content-type"] == "image/png"
    # A screen is not kept in the browser's cache, where it would outlive the sign-out.
    assert image.headers["cache-control"] == "no-store"

    # One step at a time, in order: the buttons and the arrow keys move through them.
    def visible_step() -> list[str]:
        return [
            frames.nth(i).get_attribute("data-step") or ""
            for i in range(5)
            if frames.nth(i).is_visible()
        ]

    assert visible_step() == ["1"]
    page.click("button[data-replay=next]")
    assert visible_step() == ["2"]
    page.keyboard.press("ArrowRight")
    assert visible_step() == ["3"]
    assert "Step 3 of 5" in page.locator(".replay-controls").inner_text()
    page.click("button[data-replay=last]")
    assert visible_step() == ["5"]
    page.click("button[data-replay=prev]")
    assert visible_step() == ["4"]
    page.click("button[data-replay=all]")
    assert visible_step() == ["1", "2", "3", "4", "5"]
    svg = frames.nth(0).locator("svg.frame-screen image")
    wait = "el => el.getBBox().width > 0"
    assert page.evaluate(f"() => ({wait})(document.querySelector('svg.frame-screen image'))")
    assert svg.get_attribute("href") == f"/runs/{run['id']}/artifacts/{one}"
    context.close()

    # Another owner cannot open it, nor its frames.
    context, page = stack.signed_in(stack.tokens["bob"])
    assert page.goto(f"/runs/{run['id']}/replay").status == 404
    assert page.request.get(f"/runs/{run['id']}/artifacts/{one}").status == 404
    context.close()


def test_the_worker_page_shows_its_current_and_recent_actions_of_runs_one_may_see(
    stack: Stack,
) -> None:
    alice = run_as(stack, "alice", "alice before the sleep")
    bob = run_as(stack, "bob", "bob before the sleep")
    plan = write_plan(
        stack.coordinator.workdir / "sleep.json",
        [{"kind": "diag.sleep", "args": {"seconds": 30}, "idempotent": True}],
        title="alice sleeps",
    )
    sleeping = submit(stack.coordinator, plan, token_file=stack.token_files["alice"])
    worker = stack.worker.worker_id
    context, page = stack.signed_in(stack.tokens["alice"])

    def current() -> str:
        page.goto(f"/workers/{worker}")
        text: str = page.locator("ul.current-actions").inner_text()
        return text if "diag.sleep" in text else ""

    shown = wait_until(current, 20, 0.3, "the sleep on the worker page")
    assert sleeping["id"] in shown and ("STARTED" in shown or "DISPATCHED" in shown)
    recent = page.locator("table.recent-actions").inner_text()
    assert alice["id"] in recent and "diag.echo" in recent and "SUCCEEDED" in recent
    assert bob["id"] not in recent  # another owner's work on the same worker is not shown
    assert "Only your own runs' actions are shown." in text_of(page)
    rows = page.locator("table.recent-actions tbody tr td:first-child").all_inner_texts()
    assert rows == sorted(rows, reverse=True)  # newest first
    context.close()

    context, page = stack.signed_in(stack.admin_token)
    page.goto(f"/workers/{worker}")
    assert sleeping["id"] in page.locator("ul.current-actions").inner_text()
    recent = page.locator("table.recent-actions").inner_text()
    assert alice["id"] in recent and bob["id"] in recent
    assert page.locator("table.recent-actions tbody tr").count() <= 20
    context.close()
    stack.coordinator.cli("runs", "cancel", sleeping["id"], token_file=stack.token_files["alice"])


# --- accessibility -------------------------------------------------------------------------
# Checked against Chromium's own accessibility tree (CDP `Accessibility.getFullAXTree`): the
# names it computes are what a screen reader announces. No checker library is vendored.

NAMED_ROLES = {
    "button",
    "link",
    "textbox",
    "searchbox",
    "combobox",
    "listbox",
    "checkbox",
    "radio",
    "spinbutton",
    "slider",
    "switch",
    "image",
    "img",
}


def accessibility_problems(page: Any) -> list[str]:
    """Controls, links and images without a name, headings out of order, no main landmark,
    no language or title, duplicate ids: each as one line naming the element."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]

        def describe(node: dict[str, Any]) -> str:
            backend = node.get("backendDOMNodeId")
            if backend is None:
                return f"node {node['nodeId']}"
            dom = cdp.send("DOM.describeNode", {"backendNodeId": backend})["node"]
            attrs = dom.get("attributes", [])
            shown = " ".join(f'{k}="{v}"' for k, v in zip(attrs[::2], attrs[1::2], strict=True))
            return f"<{dom['nodeName'].lower()} {shown}>"

        # The AX tree's nodes come breadth-first, not in reading order: headings are ordered
        # by their place in the document.
        order: dict[int, int] = {}

        def walk(dom: dict[str, Any]) -> None:
            order[dom["backendNodeId"]] = len(order)
            for child in dom.get("children", []):
                walk(child)

        walk(cdp.send("DOM.getDocument", {"depth": -1})["root"])
        problems: list[str] = []
        headings: list[tuple[int, int]] = []  # (place in the document, level)
        roles: set[str] = set()
        for node in nodes:
            if node.get("ignored"):
                continue
            role = str(node.get("role", {}).get("value", ""))
            name = str((node.get("name") or {}).get("value", "")).strip()
            roles.add(role)
            if role in NAMED_ROLES and not name:
                problems.append(f"{role} without an accessible name: {describe(node)}")
            if role == "heading":
                props = {p["name"]: p["value"].get("value") for p in node.get("properties", [])}
                place = order.get(node.get("backendDOMNodeId", -1), len(order))
                headings.append((place, int(props.get("level") or 0)))
        levels = [level for _, level in sorted(headings)]
        if levels.count(1) != 1:
            problems.append(f"{levels.count(1)} level-1 headings (want one): {levels}")
        for before, after in itertools.pairwise(levels):
            if after > before + 1:
                problems.append(f"heading levels skip from {before} to {after}: {levels}")
        if "main" not in roles:
            problems.append("no main landmark")
    finally:
        cdp.detach()
    doc = page.evaluate(
        """() => {
          const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
          return {lang: document.documentElement.lang, title: document.title,
                  dupes: ids.filter((id, i) => ids.indexOf(id) !== i)};
        }"""
    )
    if not doc["lang"]:
        problems.append("no lang on <html>")
    if not doc["title"].strip():
        problems.append("no <title>")
    if doc["dupes"]:
        problems.append(f"duplicate ids: {doc['dupes']}")
    return problems


FOCUSABLE = """() => [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]')]
  .filter(e => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length > 0
               && getComputedStyle(e).visibility !== 'hidden')
  .map(e => e.outerHTML.slice(0, 120))"""
FOCUSED = """() => {
  const e = document.activeElement;
  const style = getComputedStyle(e);
  return {html: e.outerHTML.slice(0, 120), outline: style.outlineStyle !== 'none'
          && parseFloat(style.outlineWidth) > 0, inMain: !!e.closest('main')};
}"""


def keyboard_problems(page: Any) -> list[str]:
    """Tab from the top: the skip link first, then every visible control once, each with a
    visible focus ring; the skip link takes the next Tab into the page's content."""
    focusable = page.evaluate(FOCUSABLE)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    problems: list[str] = []
    reached: list[str] = []
    # Chromium also stops on scrollable boxes (a wide table, a long journal entry): Tab on
    # until the focus leaves the page or comes back to the first element.
    for _ in range(2 * len(focusable) + 20):
        page.keyboard.press("Tab")
        now = page.evaluate(FOCUSED)
        if now["html"].startswith("<body") or (reached and now["html"] == reached[0]):
            break
        reached.append(now["html"])
        if not now["outline"]:
            problems.append(f"no visible focus on {now['html']}")
    if not reached or "Skip to content" not in reached[0]:
        problems.append(f"the first Tab does not reach the skip link: {reached[:1]}")
    missing = [f for f in focusable if f not in reached]
    if missing:
        problems.append(f"not reached by Tab: {missing[:5]}")
    page.focus("a.skip")
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    landed = page.evaluate(FOCUSED)
    if not landed["inMain"]:
        problems.append(f"after the skip link, Tab lands outside the content: {landed['html']}")
    return problems


def test_the_main_pages_pass_an_accessibility_check_and_work_from_the_keyboard(
    stack: Stack, research_run: dict[str, Any], replayed: Replayed
) -> None:
    signin = stack.context().new_page()
    signin.goto("/signin")
    assert accessibility_problems(signin) == []
    signin.context.close()

    worker = stack.worker.worker_id
    context, page = stack.signed_in(stack.admin_token)
    for path, keyboard in (
        ("/fleet", True),
        ("/runs?owner=*", True),
        (f"/runs/{replayed.run_id}/replay", True),
        (f"/workers/{worker}", True),
        ("/approvals", False),
        ("/kill", False),
        ("/audit", False),
    ):
        page.goto(path)
        assert accessibility_problems(page) == [], path
        if keyboard:
            assert keyboard_problems(page) == [], path
    context.close()

    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto(f"/runs/{research_run['id']}")
    assert accessibility_problems(page) == []
    assert keyboard_problems(page) == []
    context.close()


# --- the console inside the coordinator ----------------------------------------------------


def test_serve_console_listen_serves_the_console_over_https_through_the_api(
    tmp_path: Path, stack: Stack
) -> None:
    ca_dir = tmp_path / "ca"
    ca = [BIN / "deskfleet-coordinator", "ca", "init", "--dir", ca_dir]
    done = subprocess.run(
        [*ca, "--host", "coordinator.test", "--host", "127.0.0.1"],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    coordinator = CoordinatorProcess(
        tmp_path / "coord",
        serve_args=("--ca-dir", str(ca_dir), "--console-listen", "127.0.0.1:0"),
        ca_file=ca_dir / "ca.pem",
    ).start()
    try:
        assert coordinator.proc is not None and coordinator.proc.stdout is not None
        line = coordinator.proc.stdout.readline().strip()
        assert " console on https://127.0.0.1:" in line, line
        url = line.rsplit(" ", 1)[1]
        alice = coordinator.cli_json("users", "create", "alice")["token"]
        context = stack.browser.new_context(base_url=url, ignore_https_errors=True)
        page = context.new_page()
        page.goto("/signin")
        page.fill("#token", coordinator.admin_token_file.read_text().strip())
        page.click("button[type=submit]")
        page.wait_for_url("**/fleet")
        # Over HTTPS the session cookie carries the __Host- prefix: Secure, this host only,
        # the whole path (no sibling name can plant or overwrite it).
        [cookie] = [c for c in context.cookies() if c["name"] == "__Host-df_session"]
        assert cookie["secure"] and cookie["httpOnly"] and cookie["path"] == "/"
        assert "domain" not in cookie or cookie["domain"] in ("127.0.0.1", "")
        assert not [c for c in context.cookies() if c["name"] == "df_session"]
        assert page.goto("/runs?owner=*").status == 200
        page.click("text=Sign out")
        page.wait_for_url("**/signin")
        assert not [c for c in context.cookies() if "df_session" in c["name"]]
        page.fill("#token", coordinator.admin_token_file.read_text().strip())
        page.click("button[type=submit]")
        page.wait_for_url("**/fleet")
        context.close()

        context = stack.browser.new_context(base_url=url, ignore_https_errors=True)
        page = context.new_page()
        page.goto("/signin")
        page.fill("#token", alice)
        page.click("button[type=submit]")
        page.wait_for_url("**/fleet")
        # The coordinator's guard decides, as for any client.
        response = page.goto("/runs?owner=*")
        assert response.status == 403 and "only admins list every owner's runs" in text_of(page)
        context.close()
    finally:
        coordinator.stop()
    assert "Traceback" not in coordinator.log.read_text()


def test_a_goal_run_links_to_the_replay_of_the_desktop_run_its_computer_used(
    stack: Stack,
) -> None:
    coordinator = stack.coordinator
    model = coordinator.script(
        "console-goal.json",
        [
            {"tool_calls": [_computer("screenshot")]},
            {"tool_calls": [_computer("left_click", x=200, y=120)]},
            {"text": "Done.", "tool_calls": []},
        ],
    )
    goal = coordinator.cli_json(
        "goal",
        "look at the screen and click once",
        "--desktop",
        stack.worker.worker_id,
        "--model",
        model,
        token_file=stack.token_files["alice"],
    )

    def pending() -> dict[str, Any] | None:
        approvals = coordinator.cli_json("approvals", "list")["approvals"]
        return next((a for a in approvals if goal["id"] in a["reason"]), None)

    approval = wait_until(pending, 60, 0.3, "the goal's desktop approval")
    coordinator.cli("approvals", "approve", approval["id"])
    done = wait_run(
        coordinator,
        goal["id"],
        lambda r: r["status"] in STOPPED,
        120,
        token_file=stack.token_files["alice"],
    )
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    context, page = stack.signed_in(stack.tokens["alice"])
    page.goto(f"/runs/{goal['id']}")
    # The goal's tree: the desktop run it started, which names the goal as its parent.
    listed = coordinator.cli_json(
        "runs", "list", "--parent", goal["id"], token_file=stack.token_files["alice"]
    )
    [child] = listed["runs"]
    row = page.locator("#children + table tbody tr")
    assert row.count() == 1 and child["id"] in row.inner_text() and "desktop" in row.inner_text()
    page.goto(f"/runs/{child['id']}")
    assert goal["id"] in page.locator("dl.facts").inner_text()
    page.goto(f"/runs/{goal['id']}")
    page.click("text=Replay the computer's steps")
    page.wait_for_url("**/replay")
    frames = page.locator("li.frame")
    assert [frames.nth(i).get_attribute("data-action") for i in range(frames.count())] == [
        "screenshot",
        "left_click",
    ]
    shot = frames.nth(0).get_attribute("data-shot")
    assert shot and frames.nth(1).get_attribute("data-shot") == shot
    assert frames.nth(1).locator("circle.click").count() == 1
    context.close()


# --- layout at 1280 px ---------------------------------------------------------------------
# Measured in the browser: a word of a table cell set on two lines (a line break between two
# letters or digits: "researc h", "SUCCEEDE D") and where each part of a run's page begins.

SPLIT_WORDS = """() => {
  const split = [];
  const alnum = /[\\p{L}\\p{N}]/u;
  for (const cell of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.data;
      let top = null;
      for (let i = 0; i < text.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = [...range.getClientRects()].find(r => r.width > 0);
        if (!rect) { top = null; continue; }  // a space at a line's end, or not shown
        const y = Math.round(rect.top);
        if (top !== null && y > top && alnum.test(text[i - 1]) && alnum.test(text[i])) {
          split.push(text.slice(Math.max(0, i - 12), i) + '|' + text.slice(i, i + 12));
        }
        top = y;
      }
    }
  }
  return split;
}"""
TOP_OF = "sel => document.querySelector(sel).getBoundingClientRect().top + window.scrollY"
HEIGHT = "() => document.documentElement.scrollHeight"


def at_1280(stack: Stack, token: str) -> tuple[Any, Any]:
    context, page = stack.signed_in(token)
    page.set_viewport_size({"width": 1280, "height": 800})
    return context, page


def first_screen_problems(page: Any) -> list[str]:
    """The summary, the timeline and the actions begin above 800 px; no cell splits a word."""
    late = [
        f"{sel} begins at {top:.0f} px"
        for sel in ("#summary", "#timeline", "#actions", "p.actions")
        if (top := page.evaluate(TOP_OF, sel)) >= 800
    ]
    return late + [f"split word {w!r}" for w in page.evaluate(SPLIT_WORDS)]


def test_the_runs_list_at_1280_px_splits_no_word(
    stack: Stack, research_run: dict[str, Any], replayed: Replayed
) -> None:
    long_reason = (
        "the checker refused the whole batch because /var/lib/deskfleet/spool/incoming/"
        "batch-000000000000000000000000000017/manifest.json names a file twice; fix it"
    )
    plan = write_plan(
        stack.coordinator.workdir / "long-why.json",
        [{"kind": "diag.fail", "args": {"message": long_reason}, "idempotent": True}],
        title="a run with a long reason to explain why it stopped, as failures often have",
    )
    failed = submit(stack.coordinator, plan, token_file=stack.token_files["alice"])
    wait_run(
        stack.coordinator,
        failed["id"],
        lambda r: r["status"] in STOPPED,
        token_file=stack.token_files["alice"],
    )
    for token in (stack.tokens["alice"], stack.admin_token):
        context, page = at_1280(stack, token)
        page.goto("/runs?owner=%2A" if token == stack.admin_token else "/runs")
        kinds = page.locator("table.runs-list tbody td:nth-child(2)").all_inner_texts()
        assert {"research", "plan"} <= set(kinds), kinds
        assert page.evaluate(SPLIT_WORDS) == []
        heads = page.locator("table.runs-list thead th").all_inner_texts()
        assert heads == ["Title", "Kind", "Status", "Why", "Owner", "Actions", "Created"]
        context.close()
    # The whole reason stays on hover; the cell shows its first 160 characters.
    context, page = at_1280(stack, stack.tokens["alice"])
    page.goto("/runs")
    why = page.locator("table.runs-list tr", has_text=failed["id"]).locator("td.why")
    assert long_reason in (why.get_attribute("title") or "")
    shown = why.inner_text()
    assert shown.endswith("…") and shown[:-1] in (why.get_attribute("title") or "")
    context.close()


def test_a_research_runs_page_shows_its_summary_timeline_and_actions_first(
    stack: Stack, research_run: dict[str, Any]
) -> None:
    context, page = at_1280(stack, stack.tokens["alice"])
    page.goto(f"/runs/{research_run['id']}")
    assert first_screen_problems(page) == []
    journal = page.locator("details.journal")
    assert journal.get_attribute("open") is None and not page.locator("ol.journal").is_visible()
    collapsed = page.evaluate(HEIGHT)
    page.click("details.journal > summary")
    assert page.locator("ol.journal").is_visible()
    assert page.evaluate(HEIGHT) > collapsed + 800  # what the page was with it expanded
    context.close()


def test_a_desktop_runs_page_shows_its_summary_first_and_pages_its_journal(
    stack: Stack, replayed: Replayed
) -> None:
    context, page = at_1280(stack, stack.admin_token)
    page.goto(f"/runs/{replayed.run_id}")
    assert first_screen_problems(page) == []
    collapsed = page.evaluate(HEIGHT)
    assert collapsed < 3000, collapsed
    page.click("details.journal > summary")
    expanded = page.evaluate(HEIGHT)
    assert expanded > collapsed + 1500, (collapsed, expanded)  # it had been that tall
    assert 0 < page.locator("ol.journal > li").count() <= 50
    context.close()


def test_the_journal_is_paged_50_events_a_page_by_the_server(stack: Stack) -> None:
    plan = write_plan(
        stack.coordinator.workdir / "many-events.json",
        [{"kind": "diag.echo", "args": {"value": i}, "idempotent": True} for i in range(20)],
        title="twenty echoes",
    )
    run = submit(stack.coordinator, plan, token_file=stack.token_files["alice"])
    wait_run(
        stack.coordinator,
        run["id"],
        lambda r: r["status"] == "SUCCEEDED",
        token_file=stack.token_files["alice"],
    )
    context, page = at_1280(stack, stack.tokens["alice"])
    page.goto(f"/runs/{run['id']}")
    last_seq = int(page.get_attribute("[data-live-run]", "data-last-seq") or 0)
    assert last_seq > 50, last_seq
    assert first_screen_problems(page) == []
    page.click("details.journal > summary")
    entries = page.locator("ol.journal > li")
    assert entries.count() == 50 and entries.first.locator("span.mono").inner_text() == "1"
    page.click("nav.pager a[rel=next]")
    page.wait_for_url("**after=50*")
    assert page.locator("details.journal").get_attribute("open") is not None  # opened there
    assert entries.first.locator("span.mono").inner_text() == "51"
    pages = -(-last_seq // 50)
    assert f"page 2 of {pages}" in page.locator("nav.pager").inner_text()
    page.click("nav.pager a[rel=prev]")
    page.wait_for_url("**after=0*")
    assert entries.first.locator("span.mono").inner_text() == "1"
    context.close()
