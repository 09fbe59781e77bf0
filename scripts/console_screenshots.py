"""Screenshots of the web console's main pages for the README (docs/console/*.png).

Starts a real coordinator, one worker and the console on loopback, makes a few runs and a
pending desktop request (its display shows the project's local site in a Chromium window, for
the approval's "Show the screen"), and photographs the pages in Chromium at a laptop's width.
`python -m scripts.console_screenshots [--out docs/console]`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.local_site.server import start as start_site
from tests.harness import (
    ConsoleProcess,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    submit,
    wait_run,
    write_plan,
)
from tests.harness.sites import FIELD, DesktopSite

CHROMIUM = "/usr/bin/chromium"


def research_run(coordinator: CoordinatorProcess, site: str) -> str:
    """A research run over the local site: evidence, a PDF that is not, a page past the limit."""
    paths = ["/varn/keepers.html", "/varn/lens.html", "/files/report.pdf", "/varn/range.html"]
    done = coordinator.cli(
        "research",
        "keeper 1962",
        *[a for p in paths for a in ("--url", site + p)],
        "--max-pages",
        "3",
        "--wait",
        json_out=True,
        check=False,
        timeout=180,
    )
    run_id: str = json.loads(done.stdout)["id"]
    return run_id


def desktop_run(coordinator: CoordinatorProcess, worker: WorkerProcess) -> str:
    """A desktop run that fills in the form shown on the display, for its replay."""
    run: dict[str, Any] = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        worker.worker_id,
        "--reason",
        "note the lunch",
        *[f"--action={a}" for a in ("screenshot", "left_click", "type", "key")],
    )
    approval = coordinator.cli_json("approvals", "list")["approvals"][0]
    coordinator.cli("approvals", "approve", approval["id"])
    x, y, w, h = FIELD
    for args in (
        ["screenshot"],
        ["left_click", "--x", str(x + w // 2), "--y", str(y + h // 2)],
        ["type", "--text", "lunch with the team"],
        ["key", "--key", "Return", "--screenshot-after"],
    ):
        coordinator.cli("desktop", "act", run["id"], *args, timeout=90)
    coordinator.cli("runs", "cancel", run["id"])
    return str(run["id"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("docs/console"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        xvfb = Xvfb(work / "x").start()
        coordinator = CoordinatorProcess(work / "coord").start()
        worker = WorkerProcess(coordinator, "desk-01", display_env=xvfb.env).start()
        console = ConsoleProcess(coordinator)
        form = DesktopSite().start()
        site, site_url = start_site()
        window = subprocess.Popen(
            [
                CHROMIUM,
                "--test-type",
                "--no-sandbox",
                "--no-first-run",
                "--disable-gpu",
                f"--user-data-dir={work / 'profile'}",
                "--window-position=0,0",
                "--window-size=1280,800",
                f"--app={form.url}",
            ],
            env={**xvfb.env, "HOME": str(work), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            worker.wait_online()
            console.start()
            time.sleep(3)  # the form's window comes up
            researched = research_run(coordinator, site_url)
            replayed = desktop_run(coordinator, worker)
            for title, kind, extra in (
                ("nightly link check", "diag.echo", {"value": "ok"}),
                ("flaky export", "diag.fail", {"message": "export timed out", "fail_attempts": 1}),
            ):
                plan = write_plan(
                    work / "plan.json",
                    [{"kind": kind, "args": extra, "idempotent": True}],
                    title=title,
                )
                run = submit(coordinator, plan)
                last = wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
            coordinator.cli_json(
                "desktop",
                "request",
                "--worker",
                worker.worker_id,
                "--reason",
                "fill in the expense form",
                "--action=screenshot",
                "--action=left_click",
                "--action=type",
            )
            pending = coordinator.cli_json("approvals", "list")["approvals"][0]
            token = coordinator.admin_token_file.read_text().strip()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM,
                    args=[
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        "--no-first-run",
                    ],
                )
                page = browser.new_page(
                    base_url=console.url, viewport={"width": 1200, "height": 760}
                )
                page.goto("/signin")
                page.fill("#token", token)
                page.click("button[type=submit]")
                page.wait_for_url("**/fleet")
                shots = {
                    "fleet": "/fleet",
                    "run": f"/runs/{last['id']}",
                    "approval": f"/approvals/{pending['id']}",
                    "kill": "/kill",
                    "research": f"/runs/{researched}#report",
                    "replay": f"/runs/{replayed}/replay",
                }
                for name, url in shots.items():
                    page.goto(url)
                    if name == "approval":
                        page.click("form[data-peek] button[type=submit]")
                        page.wait_for_selector("svg#screen image.peek")
                        # The screen at the bottom, the peek's card above it.
                        page.locator("#screen").evaluate("e => e.scrollIntoView({block: 'end'})")
                        box = page.locator("#screen").bounding_box()
                        assert box is not None
                        s = box["width"] / 1280
                        page.mouse.move(box["x"] + 200 * s, box["y"] + 150 * s)
                        page.mouse.down()
                        page.mouse.move(box["x"] + 800 * s, box["y"] + 500 * s, steps=4)
                        page.mouse.up()
                    if name == "replay":  # the click on the field, drawn over its frame
                        page.click("button[data-replay=next]")
                    page.screenshot(path=str(out / f"{name}.png"), full_page=False)
                    print(out / f"{name}.png")
                browser.close()
        finally:
            window.terminate()
            window.wait()
            site.shutdown()
            site.server_close()
            form.stop()
            console.stop()
            worker.stop()
            coordinator.stop()
            xvfb.stop()


if __name__ == "__main__":
    main()
