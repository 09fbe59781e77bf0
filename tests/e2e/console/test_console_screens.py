"""The live view and takeover pages in a real Chromium: a real coordinator serving the console
itself (`serve --console-listen`), a real desktop worker on a real Xvfb, and a real xterm on
that display whose shell appends each line typed into it to a file.

What is checked is what the desktop did (the file the xterm's shell writes), what the page
showed (its frames, its status and refusal lines) and what the coordinator kept (the run's
state and journal, the audit log). The pages' rules in this process are
tests/unit/console/test_console_screens.py; the coordinator's side over gRPC is
tests/e2e/desktop/test_live_view.py.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.conftest import require
from tests.e2e.console.test_console import CHROMIUM, FLAGS, text_of
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, journal, wait_until

# slow: a coordinator, a desktop worker, an xterm and Chromium for the module, and pages that
# wait for frames and for the desktop
pytestmark = pytest.mark.slow

XTERM_AT = (120, 90)  # display pixels inside the xterm (placed at +0+0; no window manager)


@dataclass
class Stack:
    coordinator: CoordinatorProcess
    worker: WorkerProcess
    url: str
    browser: Any
    typed: Path  # what the xterm's shell wrote
    tokens: dict[str, Path]  # "admin", "ann", "bob" -> token file

    def signed_in(self, who: str) -> tuple[Any, Any]:
        context = self.browser.new_context(base_url=self.url, service_workers="block")
        page = context.new_page()
        page.goto("/signin")
        page.fill("#token", self.tokens[who].read_text().strip())
        page.click("button[type=submit]")
        page.wait_for_url("**/fleet")
        return context, page

    def run_of(self, who: str, run_id: str) -> runs_pb2.Run:
        channel = self.coordinator.channel()
        assert channel is not None
        run: runs_pb2.Run = runs_pb2_grpc.RunServiceStub(channel).GetRun(
            runs_pb2.RunRef(id=run_id),
            metadata=auth_metadata(self.tokens[who].read_text().strip()),
            timeout=30,
        )
        return run


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, xvfb: Xvfb) -> Iterator[Stack]:
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    require(shutil.which("xdotool") is not None, "xdotool is not installed")
    require(shutil.which("xterm") is not None, "xterm is not installed (scripts/setup.sh)")
    from playwright.sync_api import sync_playwright

    workdir = tmp_path_factory.mktemp("console-screens")
    typed = workdir / "typed.txt"
    typed.write_text("")
    xterm = subprocess.Popen(
        ["xterm", "-geometry", "60x12+0+0", "-e", "sh", "-c", f"stdbuf -oL cat >> {typed}"],
        env=xvfb.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    coordinator = CoordinatorProcess(
        workdir / "coord", serve_args=("--console-listen", "127.0.0.1:0")
    )
    worker: WorkerProcess | None = None
    playwright = sync_playwright().start()
    try:
        coordinator.start()
        assert coordinator.proc is not None and coordinator.proc.stdout is not None
        line = coordinator.proc.stdout.readline().strip()
        assert " console on http://127.0.0.1:" in line, line
        worker = WorkerProcess(
            coordinator,
            "screen-desk",
            display_env=xvfb.env,
            extra_args=("--allow-owner-takeover",),
            browser=False,
        ).start()
        worker.wait_online()
        assert xterm.poll() is None, "xterm did not start"
        tokens = {"admin": coordinator.admin_token_file}
        for name in ("ann", "bob"):
            tokens[name] = workdir / f"{name}.token"
            tokens[name].write_text(coordinator.cli_json("users", "create", name)["token"])
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield Stack(coordinator, worker, line.rsplit(" ", 1)[1], browser, typed, tokens)
        browser.close()
    finally:
        playwright.stop()
        if worker is not None:
            worker.stop()
        coordinator.stop()
        xterm.terminate()
        xterm.wait(10)
    assert "Traceback" not in coordinator.log.read_text()


@pytest.fixture
def held_run(stack: Stack) -> Iterator[str]:
    """A desktop run of ann's, approved, holding the worker's desktop; cancelled afterwards
    (with any kill switch of the test released first)."""
    c = stack.coordinator
    run = c.cli_json(
        "desktop",
        "request",
        "--worker",
        stack.worker.worker_id,
        "--reason",
        "type into the terminal",
        "--action=type",
        "--action=key",
        "--action=screenshot",
        token_file=stack.tokens["ann"],
    )
    [mine] = [a for a in c.cli_json("approvals", "list")["approvals"] if a["runId"] == run["id"]]
    c.cli_json("approvals", "approve", mine["id"])
    wait_until(
        lambda: stack.run_of("ann", run["id"]).status == "RUNNING", 15, 0.1, "the run to hold it"
    )
    yield run["id"]
    c.cli("kill", "release", "--worker", stack.worker.worker_id, check=False)
    c.cli("runs", "cancel", run["id"], token_file=stack.tokens["ann"])


def _on_the_image(page: Any, at: tuple[int, int]) -> tuple[float, float]:
    """Where a display pixel is shown on the page (the image is scaled to fit it)."""
    image = page.query_selector("[data-screen=image]")
    assert image is not None
    box = image.bounding_box()
    width = int(image.get_attribute("data-width"))
    height = int(image.get_attribute("data-height"))
    return box["x"] + at[0] * box["width"] / width, box["y"] + at[1] * box["height"] / height


def _frames(page: Any) -> int:
    return int(page.get_attribute("[data-screen-stream]", "data-frames") or 0)


def _wait_frame(page: Any, more_than: int = 0, timeout: float = 15) -> int:
    wait_until(lambda: _frames(page) > more_than, timeout, 0.02, "a frame shown in the page")
    return _frames(page)


def _xdotool_type(xvfb: Xvfb, text: str) -> None:
    subprocess.run(
        ["xdotool", "mousemove", *map(str, XTERM_AT), "type", "--delay", "5", text],
        env=xvfb.env,
        check=True,
    )


def _audit_since(stack: Stack, seq: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = stack.coordinator.cli_json("audit")["entries"]
    return [e for e in entries if int(e.get("seq", 0)) > seq]


def _last_audit_seq(stack: Stack) -> int:
    entries = stack.coordinator.cli_json("audit")["entries"]
    return max((int(e.get("seq", 0)) for e in entries), default=0)


def test_an_admin_watching_a_worker_sees_typing_in_the_xterm_within_a_second(
    stack: Stack, xvfb: Xvfb
) -> None:
    context, page = stack.signed_in("admin")
    page.goto(f"/workers/{stack.worker.worker_id}")
    page.click("text=Watch screen")
    page.wait_for_url(f"**/workers/{stack.worker.worker_id}/screen")
    _wait_frame(page)
    assert "connected" in page.inner_text("[data-screen=status]")
    time.sleep(0.3)  # the page's first frames (the look it opened, then its stream's)
    shown = _frames(page)
    time.sleep(1.0)
    assert _frames(page) == shown, "a still screen sent frames"
    typed_at = time.time() * 1000
    _xdotool_type(xvfb, "watched")
    wait_until(lambda: _frames(page) > shown, 5, 0.01, "the typing shown in the page")
    seen = int(page.get_attribute("[data-screen-stream]", "data-shown-at") or 0)
    assert seen - typed_at < 1000, f"the change was shown {seen - typed_at:.0f} ms after typing"
    status = page.inner_text("[data-screen=status]")
    assert "last change" in status and "captured → shown" in status, status
    context.close()
    wait_until(
        lambda: any(
            e["action"] == "desktop.watch.end"
            for e in stack.coordinator.cli_json("audit")["entries"]
        ),
        10,
        0.2,
        "the viewing's end in the audit log",
    )


def test_a_view_only_pages_mouse_and_keys_change_nothing_on_the_desktop(
    stack: Stack, held_run: str
) -> None:
    before_audit = _last_audit_seq(stack)
    for who, path in (
        ("admin", f"/workers/{stack.worker.worker_id}/screen"),
        ("ann", f"/runs/{held_run}/screen"),  # the owner, through her run that holds it
    ):
        context, page = stack.signed_in(who)
        changes: list[str] = []

        def sent(request: Any, changes: list[str] = changes) -> None:
            if request.method != "GET":
                changes.append(f"{request.method} {request.url}")

        page.on("request", sent)
        page.goto(path)
        _wait_frame(page)
        assert page.query_selector("[data-input]") is None
        before = stack.typed.read_text()
        x, y = _on_the_image(page, XTERM_AT)
        page.mouse.click(x, y)
        page.mouse.click(x, y, button="right")
        page.mouse.wheel(0, 300)
        page.keyboard.type("not from a view page")
        page.keyboard.press("Enter")
        page.keyboard.press("Control+c")
        page.focus("[data-screen-stream]")
        page.keyboard.type("nor this")
        page.keyboard.press("Enter")
        time.sleep(1.5)
        assert stack.typed.read_text() == before, who
        assert changes == [], changes  # the page sent nothing but GETs
        context.close()
    audit = _audit_since(stack, before_audit)
    assert {e["action"] for e in audit} <= {"desktop.watch", "desktop.watch.end"}, audit
    assert stack.run_of("ann", held_run).status == "RUNNING"  # no takeover came of it


def test_another_owner_cannot_open_the_view_of_someone_elses_run(
    stack: Stack, held_run: str
) -> None:
    # Ann's own page, whose stream address bob then tries with his session.
    context, page = stack.signed_in("ann")
    page.goto(f"/runs/{held_run}/screen")
    _wait_frame(page)
    stream = page.get_attribute("[data-screen-stream]", "data-screen-stream")
    assert stream is not None and stream.startswith("/screen/stream?run=")

    bob_context, bob = stack.signed_in("bob")
    refused = bob.goto(f"/runs/{held_run}/screen")
    assert refused is not None and refused.status == 404
    assert "no run" in text_of(bob) and bob.query_selector("[data-screen-stream]") is None
    for url in (stream, f"/screen/stream?run={held_run}"):
        direct = bob.request.get(url, max_redirects=0)
        assert direct.status == 404, (url, direct.status)
        assert "event: frame" not in direct.text()
    worker = bob.goto(f"/workers/{stack.worker.worker_id}/screen")
    assert worker is not None and worker.status == 403
    assert "only an admin watches worker" in text_of(bob)
    direct = bob.request.get(f"/screen/stream?worker={stack.worker.worker_id}")
    assert direct.status == 403
    # Without a session: the sign-in form, never a frame.
    anonymous = stack.browser.new_context(base_url=stack.url)
    nobody = anonymous.request.get(stream, max_redirects=0)
    assert nobody.status == 303 and "/signin" in nobody.headers["location"]
    anonymous.close()
    bob_context.close()
    context.close()


def test_take_over_pauses_the_run_types_into_the_xterm_hands_back_and_a_kill_cuts_it(
    stack: Stack, held_run: str
) -> None:
    context, page = stack.signed_in("ann")
    page.goto(f"/runs/{held_run}")
    page.click("text=Take over…")
    page.fill("#reason", "fix the terminal")
    page.click("button:has-text('Take over')")
    page.wait_for_url("**/takeovers/tk_*")
    _wait_frame(page)
    run = stack.run_of("ann", held_run)
    assert run.waiting.code == "human_active", run
    status_page = context.new_page()
    status_page.goto(f"/runs/{held_run}")
    assert "human_active" in text_of(status_page)
    status_page.close()

    _type_on_the_screen(page, "by a person")
    wait_until(lambda: "by a person" in stack.typed.read_text(), 10, 0.1, "the person's line")
    assert page.query_selector("[data-screen=input-error].hidden") is not None

    page.fill("#note", "typed one line")
    page.click("button:has-text('Hand back')")
    page.wait_for_url(f"**/runs/{held_run}")
    assert "handed back after" in text_of(page)
    assert stack.run_of("ann", held_run).status == "RUNNING"
    kinds = journal(stack.coordinator, held_run, token_file=stack.tokens["ann"])
    back = next(e for e in kinds if e["kind"] == "desktop.handback")
    assert back["data"]["note"] == "typed one line" and back["data"]["events"] > 0

    # Taken over again, then the kill switch: the person's input is refused, and says so.
    page.click("text=Take over…")
    page.click("button:has-text('Take over')")
    page.wait_for_url("**/takeovers/tk_*")
    _wait_frame(page)
    stack.coordinator.cli_json(
        "kill", "engage", "--worker", stack.worker.worker_id, "--reason", "stop now"
    )
    before = stack.typed.read_text()
    wait_until(
        lambda: page.get_attribute("[data-screen-stream]", "data-ended") == "yes",
        10,
        0.1,
        "the live view to end at the kill switch",
    )
    assert "kill switch" in page.inner_text("[data-screen=end]")
    _type_on_the_screen(page, "after the kill")
    wait_until(
        lambda: (
            "kill switch" in (page.get_attribute("[data-screen-stream]", "data-input-error") or "")
        ),
        10,
        0.1,
        "the refusal shown in the page",
    )
    assert "Your input was refused" in page.inner_text("[data-screen=input-error]")
    time.sleep(0.5)
    assert stack.typed.read_text() == before
    page.click("button:has-text('Hand back')")
    page.wait_for_url(f"**/runs/{held_run}")
    context.close()


def _type_on_the_screen(page: Any, text: str) -> None:
    """Click the xterm on the page's image (the pointer goes there), type a line."""
    page.mouse.click(*_on_the_image(page, XTERM_AT))
    page.keyboard.type(text)
    page.keyboard.press("Enter")
