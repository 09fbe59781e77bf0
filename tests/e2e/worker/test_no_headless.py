"""`deskfleet-worker run --no-headless`: a worker that never starts a browser, and is never
given browser work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import require
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    submit,
    wait_run,
    wait_until,
    write_plan,
)
from worker_agent.capabilities import DEFAULT_CHROMIUM

pytestmark = pytest.mark.slow

DISABLED = "disabled by local policy (--no-headless)"


def _capability(row: dict, name: str) -> dict:
    return next(c for c in row["capabilities"] if c["name"] == name)


def _descendants(pid: int) -> dict[int, str]:
    """The processes below `pid` now, by pid, with their command lines (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name in brackets may hold spaces; the parent pid follows it.
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                try:
                    raw = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    continue
                found[child] = raw.replace(b"\0", b" ").decode(errors="replace")
                frontier.append(child)
    return found


def _started_watching_children(worker: WorkerProcess) -> tuple[dict, set[str]]:
    """Start the worker and watch its process tree until it is online: (its row, every
    descendant's command line seen meanwhile)."""
    worker.start()
    assert worker.proc is not None
    seen: set[str] = set()

    def online() -> dict | None:
        seen.update(_descendants(worker.proc.pid).values())  # type: ignore[union-attr]
        row = worker.row()
        return row if row and row["online"] else None

    row: dict = wait_until(online, 60, 0.02, f"worker {worker.name} online")
    seen.update(_descendants(worker.proc.pid).values())
    return row, seen


def _browser_processes(cmdlines: set[str]) -> set[str]:
    return {c for c in cmdlines if "chrom" in c.lower() or "playwright" in c.lower()}


def test_a_worker_without_a_browser_comes_online_without_starting_one(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    # The same watch over a worker with a browser sees its capability probe launch Chromium:
    # what the watch finds missing below would have been seen.
    browsing_row, browsing_seen = _started_watching_children(
        workers("browsing", browser=True, start=False)
    )
    assert _capability(browsing_row, "headless")["available"] is True
    assert _browser_processes(browsing_seen), browsing_seen

    plain = workers("plain", browser=False, start=False)
    row, seen = _started_watching_children(plain)
    assert _browser_processes(seen) == set(), seen
    headless = _capability(row, "headless")
    assert (headless["available"], headless["reason"]) == (False, DISABLED)
    assert "chromium" not in row["versions"] and "playwright" not in row["versions"]
    assert coordinator.status()["headlessOnline"] == 1  # the browsing one only
    shown = coordinator.cli("workers", "show", plain.worker_id).stdout
    assert f"headless: absent: {DISABLED}" in shown
    listed = coordinator.cli_json("workers", "list", "--capability", "headless")
    assert plain.worker_id not in {w["id"] for w in listed["workers"]}


def test_research_waits_for_a_browser_rather_than_going_to_one_without(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    site: str,
) -> None:
    # A desktop offering Computer Use but no browser: neither the headless route nor the
    # desktop fallback (a visible browser) can use it.
    desk = workers("desk", display_env=xvfb.env, browser=False)
    row = desk.wait_online()
    assert _capability(row, "computer_use")["available"] is True
    assert _capability(row, "headless")["reason"] == DISABLED
    run = coordinator.cli_json("research", "lens", "--url", f"{site}/varn/lens.html")
    waiting = wait_run(
        coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT", 20
    )
    assert waiting["waiting"]["code"] == "no_eligible_worker"
    detail = waiting["waiting"]["detail"]
    assert "route headless: needs capability headless" in detail
    assert "no desktop offers computer_use with a working browser" in detail
    assert coordinator.cli_json("approvals", "list")["approvals"] == []
    assert all(not a.get("workerId") for a in waiting["actions"]), waiting["actions"]
    coordinator.cli("runs", "cancel", run["id"])


def test_other_work_runs_there_and_a_browser_action_is_refused_with_the_reason(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("plain", browser=False)
    worker.wait_online()
    echo = write_plan(
        tmp_path / "echo.json",
        [{"kind": "diag.echo", "args": {"value": "here"}, "idempotent": True}],
        title="echo",
    )
    done = submit(coordinator, echo, wait=True)
    assert done["status"] == "SUCCEEDED", done
    assert done["actions"][0]["workerId"] == worker.worker_id

    # A plan that names no capability may reach it with a browser action: refused, not run.
    fetch = write_plan(
        tmp_path / "fetch.json",
        [{"kind": "browser.fetch", "args": {"url": "https://example.com/"}}],
        title="fetch anyway",
    )
    done = submit(coordinator, fetch, wait=True)
    assert done["status"] in STOPPED and done["status"] != "SUCCEEDED", done
    [action] = done["actions"]
    assert action["workerId"] == worker.worker_id
    assert action["status"] == "FAILED", action
    assert action["error"].startswith(
        "not_offered: this worker runs without a browser (--no-headless)"
    ), action
    assert action["error"] in done["stopReason"]
    assert "Traceback" not in worker.log.read_text()


def test_the_worker_cli_does_not_import_a_browser_without_one(tmp_path: Path) -> None:
    """Playwright and the page extraction are imported only for a worker with a browser."""
    probe = """
import argparse, json, sys
from worker_agent.actions import ActionRegistry
from worker_agent.cli import _browsers
args = argparse.Namespace(no_headless=sys.argv[1] == "off", no_computer_use=True,
                          chromium="/usr/bin/chromium", browser_idle=30.0,
                          chromium_sandbox="auto", renderer_memory=1024)
registry = ActionRegistry()
_browsers(args, registry)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"playwright", "trafilatura"})
print(json.dumps({"kinds": registry.kinds(), "heavy": heavy}))
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    found = {}
    for mode in ("off", "on"):
        done = subprocess.run(
            [sys.executable, "-c", probe, mode], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        found[mode] = json.loads(done.stdout)
    kinds = ["browser.check", "browser.fetch", "browser.screenshot", "browser.search"]
    assert found["off"] == {"kinds": kinds, "heavy": []}
    assert found["on"] == {"kinds": kinds, "heavy": ["playwright", "trafilatura"]}
