"""Screenshots of the web console's main pages for the README (docs/console/*.png).

Starts a real coordinator, one worker and the console on loopback, makes a few runs and a
pending desktop request (its display shows the project's local site in a Chromium window, for
the approval's "Show the screen"), and photographs the pages in Chromium at a laptop's width.
`python -m scripts.console_screenshots [--out docs/console]`
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

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

CHROMIUM = "/usr/bin/chromium"


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
        site, site_url = start_site()
        desktop = subprocess.Popen(
            [
                CHROMIUM,
                "--test-type",
                "--no-sandbox",
                "--no-first-run",
                "--disable-gpu",
                f"--user-data-dir={work / 'desktop-profile'}",
                "--window-position=0,0",
                "--window-size=1280,800",
                f"--app={site_url}",
            ],
            env={**xvfb.env, "HOME": str(work), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            worker.wait_online()
            console.start()
            time.sleep(3.0)  # the desktop window's first paint
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
                    page.screenshot(path=str(out / f"{name}.png"), full_page=False)
                    print(out / f"{name}.png")
                browser.close()
        finally:
            desktop.terminate()
            desktop.wait(10)
            site.shutdown()
            site.server_close()
            console.stop()
            worker.stop()
            coordinator.stop()
            xvfb.stop()


if __name__ == "__main__":
    main()
