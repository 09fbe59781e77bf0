"""Browser actions through runs: real coordinator, real worker, real Chromium, the local site."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from scripts.local_site.server import FACTS, search_template
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    journal,
    submit,
    wait_run,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> Iterator[CoordinatorProcess]:
    """One coordinator for the module's tests that need no configuration of their own. Where
    research goes depends on which workers are online, so each test starts its own, and the
    next test begins once the coordinator sees none of them online any more."""
    yield module_coordinator
    wait_until(
        lambda: not any(w["online"] for w in module_coordinator.status()["workers"]),
        30,
        0.1,
        "the test's workers offline",
    )


def _receipts(coordinator: CoordinatorProcess, run_id: str) -> list[dict]:
    return [e["data"] for e in journal(coordinator, run_id) if e["kind"] == "receipt"]


def test_a_run_fetches_pages_through_a_worker(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
    site: str,
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {
                "kind": "browser.fetch",
                "args": {"url": f"{site}{path}"},
                "idempotent": True,
                "route": {"capability": "headless"},
            }
            for path in ("/varn/north-light.html", "/files/report.pdf")
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED", run["stopReason"]
    page, pdf = (r["result"] for r in _receipts(coordinator, run["id"]))
    assert page["outcome"] == "ok" and FACTS["/varn/north-light.html"] in page["text"]
    assert (pdf["outcome"], pdf["content_type"], pdf["text"]) == (
        "unsupported_content",
        "application/pdf",
        "",
    )


def test_browser_check_looks_at_a_page_for_a_postcondition(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
    site: str,
) -> None:
    workers("w").wait_online()
    north = f"{site}/redirect-to-north"  # a redirect: the check names the final URL
    fact = FACTS["/varn/north-light.html"]
    checks = [
        {"url": north, "text": fact},
        {"url": north, "text": "not on the page"},
        {"url": north},
    ]
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {
                "kind": "browser.check",
                "args": a,
                "idempotent": True,
                "route": {"capability": "headless"},
            }
            for a in checks
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED", run["stopReason"]
    found = [r["result"] for r in _receipts(coordinator, run["id"])]
    assert [(r["contains"], r["status"], r["outcome"]) for r in found] == [
        (True, 200, "ok"),
        (False, 200, "ok"),
        (True, 200, "ok"),
    ]
    assert all(r["url"] == f"{site}/varn/north-light.html" for r in found)
    assert set(found[0]) == {"url", "status", "contains", "outcome", "reason", "elapsed_ms"}


def _browser_pids(worker: WorkerProcess) -> set[int]:
    """The Chromium browser processes (not its renderers or helpers) below the worker.

    A browser is a Chromium process whose parent is not one: while a browser forks a helper,
    the child shows the browser's command line (no `--type=`) until it execs, and was once
    counted as a second browser."""
    assert worker.proc is not None
    chromium: dict[int, tuple[int, list[str]]] = {}
    for proc in psutil.Process(worker.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            if cmdline and "chrom" in cmdline[0]:
                chromium[proc.pid] = (proc.ppid(), cmdline)
    return {
        pid
        for pid, (parent, cmdline) in chromium.items()
        if parent not in chromium and not any(a.startswith("--type=") for a in cmdline)
    }


def test_the_browser_launched_to_measure_the_worker_serves_its_fetches(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
    site: str,
) -> None:
    worker = workers("w")
    assert worker.wait_online()["versions"]["chromium"]
    measured = _browser_pids(worker)
    assert len(measured) == 1, measured  # launched to measure it, and kept
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "browser.fetch", "args": {"url": f"{site}/varn/lens.html"}, "idempotent": True}],
    )
    assert submit(coordinator, plan, wait=True)["status"] == "SUCCEEDED"
    assert _browser_pids(worker) == measured  # no second launch for the first action


def test_the_coordinator_decides_whether_private_networks_are_reachable(
    tmp_path: Path, site: str
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "closed", allow_private_networks=False).start()
    worker = WorkerProcess(coordinator, "w")
    try:
        worker.start().wait_online()
        plan = write_plan(
            tmp_path / "plan.json",
            [
                {
                    "kind": "browser.fetch",
                    "idempotent": True,
                    "args": {"url": f"{site}/varn/lens.html", "policy": {"allow_private": True}},
                }
            ],
        )
        run = submit(coordinator, plan, wait=True)
        [receipt] = _receipts(coordinator, run["id"])
        assert receipt["result"]["outcome"] == "refused"
        assert "loopback or private address" in receipt["result"]["reason"]
        # What a newcomer trying research on a local page sees: the flag that opens it.
        lens = f"{site}/varn/lens.html"
        done = coordinator.cli("research", "lens", "--url", lens, "--wait", check=False)
        assert done.returncode == 8, done.stderr
        assert (
            "no evidence for 'lens'" in done.stdout
            and "no page was read (refused 1)" in done.stdout
        )
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("deskfleet: no_evidence: 1 page(s) not read (1 refused; first: ")
        assert "`deskfleet-coordinator serve --allow-private-networks` allows them" in line
    finally:
        worker.stop()
        coordinator.stop()


def test_research_on_a_closed_port_says_connection_refused_and_no_evidence(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    workers("w").wait_online()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for url in (f"http://127.0.0.1:{port}/", f"https://127.0.0.1:{port}/"):
        done = coordinator.cli("research", "anything", "--url", url, "--wait", check=False)
        assert done.returncode == 8, done.stderr
        assert "HTTP 502" not in done.stdout + done.stderr
        assert f"- {url}: network_error: connection refused at 127.0.0.1:{port}" in done.stdout
        assert "no evidence for 'anything'" in done.stdout
        assert "no page was read (network_error 1)" in done.stdout
        assert done.stderr.strip().splitlines()[-1] == (
            "deskfleet: no_evidence: 1 page(s) not read (1 network_error; first: connection"
            f" refused at 127.0.0.1:{port})"
        )


def _research(coordinator: CoordinatorProcess, *args: str) -> dict:
    done = coordinator.cli("research", *args, "--wait", json_out=True, check=False, timeout=120)
    assert done.returncode in (0, 6), done.stderr
    doc: dict = json.loads(done.stdout)
    return doc


def test_research_finds_the_known_facts_with_their_urls(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("a").wait_online()
    workers("b").wait_online()
    doc = _research(
        coordinator, "keeper 1962", "--search-url", search_template(site), "--max-sources", "3"
    )
    assert doc["status"] == "SUCCEEDED", doc["stopReason"]
    report = doc["report"]
    evidence = {s["url"]: s["excerpts"] for s in report["sources"] if s["evidence"]}
    assert evidence[f"{site}/varn/keepers.html"] == [FACTS["/varn/keepers.html"] + "."]
    events = journal(coordinator, doc["id"])
    snippets = next(e["data"] for e in events if e["kind"] == "research.sources")["snippets"]
    assert snippets and all(s["is_evidence"] is False for s in snippets)
    assert {s["receipt"] for s in report["sources"]} <= {
        e["data"]["receipt"] for e in events if e["kind"] == "receipt"
    }


@pytest.fixture
def steady(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A coordinator with a lease long enough that two Chromiums starting at once on two cores
    cannot make its workers time out and hand their units to each other."""
    proc = CoordinatorProcess(tmp_path / "steady", heartbeat=0.5, lease=8.0).start()
    yield proc
    proc.stop()


def test_research_over_given_urls_reports_binaries_and_challenges_apart(
    steady: CoordinatorProcess, site: str
) -> None:
    coordinator = steady
    started = [WorkerProcess(coordinator, name).start() for name in ("a", "b")]
    try:
        for worker in started:
            worker.wait_online()
        _given_urls(coordinator, site)
    finally:
        for worker in started:
            worker.stop()


def _given_urls(coordinator: CoordinatorProcess, site: str) -> None:
    urls = [
        "/varn/north-light.html",
        "/varn/lens.html",
        "/varn/range.html",
        "/files/report.pdf",
        "/files/photo.png",
        "/challenge",
        "/captcha",
    ]
    args = [a for u in urls for a in ("--url", site + u)]
    doc = _research(coordinator, "when was the north light first lit", *args)
    report = doc["report"]
    assert report["evidence"] >= 1
    north = next(s for s in report["sources"] if s["url"].endswith("/north-light.html"))
    assert FACTS["/varn/north-light.html"] + "." in north["excerpts"]
    failures = {f["url"].removeprefix(site): f for f in report["failures"]}
    assert failures["/files/report.pdf"]["outcome"] == "unsupported_content"
    assert failures["/files/report.pdf"]["content_type"] == "application/pdf"
    assert failures["/files/photo.png"]["outcome"] == "unsupported_content"
    assert failures["/challenge"]["outcome"] == "access_challenge"
    assert failures["/captcha"]["outcome"] == "access_challenge"
    # The work units were shared by the two workers.
    assert len({s["worker"] for s in report["sources"] + report["failures"]}) == 2


def test_a_worker_killed_mid_research_has_its_units_rerun_elsewhere(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    a, b = workers("a"), workers("b")
    a.wait_online()
    b.wait_online()
    urls = [f"{site}/delay/3/varn/notes/{i}.html" for i in range(4)]
    run = coordinator.cli_json(
        "research", "tower painted", *[x for u in urls for x in ("--url", u)]
    )
    wait_run(
        coordinator,
        run["id"],
        lambda r: sum(x["status"] == "STARTED" for x in r["actions"]) == 4,
        20,
    )
    a.signal(signal.SIGKILL)
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    report = next(
        e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "research.report"
    )
    assert sorted(s["url"] for s in report["sources"]) == sorted(urls)
    assert {s["worker"] for s in report["sources"]} == {b.worker_id}
    assert all(s["evidence"] for s in report["sources"])


def test_research_without_a_headless_worker_or_a_desktop_says_what_is_missing(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("no-browser", extra_args=("--chromium", "/nonexistent/chromium")).wait_online()
    run = coordinator.cli_json("research", "lens", "--url", f"{site}/varn/lens.html")
    waiting = wait_run(
        coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT", 20
    )
    assert waiting["waiting"]["code"] == "no_eligible_worker"
    detail = waiting["waiting"]["detail"]
    assert "route headless: needs capability headless" in detail
    assert "route desktop: no desktop offers computer_use" in detail


def _desktop_only_worker(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], xvfb: Xvfb
) -> WorkerProcess:
    """A desktop whose token grants Computer Use only: no headless route can use it."""
    desk = workers("desk", display_env=xvfb.env, start=False)
    assert desk.enroll(coordinator.create_token("--capability", "computer_use")).returncode == 0
    desk.start().wait_online()
    return desk


def test_without_a_headless_worker_research_runs_on_an_approved_desktop(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    site: str,
) -> None:
    desk = _desktop_only_worker(coordinator, workers, xvfb)
    urls = [f"{site}/varn/lens.html", f"{site}/varn/keepers.html"]
    run = coordinator.cli_json("research", "lens", *(f"--url={u}" for u in urls))
    waiting = wait_run(coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_AUTHORITY", 20)
    assert waiting["waiting"]["code"] == "needs_approval"
    assert "route headless: needs capability headless" in waiting["waiting"]["detail"]
    # A connected desktop grants nothing: it waits for a person's answer.
    time.sleep(1.5)
    assert coordinator.cli_json("runs", "show", run["id"])["status"] == "WAITING_FOR_AUTHORITY"
    [approval] = [
        a for a in coordinator.cli_json("approvals", "list")["approvals"] if a["runId"] == run["id"]
    ]
    assert approval["kind"] == "research" and approval["workerId"] == desk.worker_id
    coordinator.cli("approvals", "approve", approval["id"])
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 90)
    assert done["status"] == "SUCCEEDED", done
    report = next(
        e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "research.report"
    )
    sources = {s["url"]: s for s in report["sources"]}
    assert set(sources) == set(urls)
    assert {s["worker"] for s in sources.values()} == {desk.worker_id}
    lens = sources[f"{site}/varn/lens.html"]
    assert lens["evidence"] and FACTS["/varn/lens.html"] + "." in lens["excerpts"]
    # Each page was read in a visible browser on the desk, not its headless one.
    for event in journal(coordinator, run["id"]):
        if event["kind"] == "receipt":
            entry = coordinator.cli_json("journal", "read", run["id"], "--seq", str(event["seq"]))
            assert json.loads(entry["text"])["result"]["browser"] == "visible"


def test_a_denied_desktop_fallback_ends_the_research_with_what_it_has(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    site: str,
) -> None:
    _desktop_only_worker(coordinator, workers, xvfb)
    run = coordinator.cli_json("research", "lens", "--url", f"{site}/varn/lens.html")
    wait_run(coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_AUTHORITY", 20)
    [approval] = [
        a for a in coordinator.cli_json("approvals", "list")["approvals"] if a["runId"] == run["id"]
    ]
    coordinator.cli("approvals", "deny", approval["id"], "--reason", "not on this desk")
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 30)
    report = next(
        e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "research.report"
    )
    assert report["sources"] == [] or not any(s["evidence"] for s in report["sources"])
    assert any("denied: not on this desk" in str(k) for k in report["skipped"]), report
    assert done["status"] == "SUCCEEDED"


def test_the_routing_policy_orders_routes_and_owners_can_override_it(
    tmp_path: Path, site: str
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "research": {
                    "routes": [
                        {"name": "lab", "capability": "headless", "labels": {"site": "lab"}},
                        {"name": "anywhere", "capability": "headless"},
                    ]
                },
                "owners": {
                    "olga": {
                        "research": {
                            "routes": [
                                {
                                    "name": "only-lab",
                                    "capability": "headless",
                                    "labels": {"site": "lab"},
                                }
                            ]
                        }
                    }
                },
            }
        )
    )
    coordinator = CoordinatorProcess(tmp_path / "c", policy=policy).start()
    plain = WorkerProcess(coordinator, "plain")
    try:
        plain.start().wait_online()
        done = _research(coordinator, "lens", "--url", f"{site}/varn/lens.html")
        # The lab route has no worker, so the next route took the unit.
        assert done["status"] == "SUCCEEDED"
        assert done["actions"][0]["workerId"] == plain.worker_id
        token = tmp_path / "olga.token"
        token.write_text(coordinator.cli_json("users", "create", "olga")["token"])
        run = coordinator.cli_json(
            "research", "lens", "--url", f"{site}/varn/lens.html", token_file=token
        )
        waiting = wait_run(
            coordinator,
            run["id"],
            lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT",
            20,
            token_file=token,
        )
        assert waiting["waiting"]["detail"].startswith(
            "route only-lab: needs capability headless and labels site=lab"
        )
    finally:
        plain.stop()
        coordinator.stop()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"research": {"routes": [{"name": "x", "capability": "gpu"}]}}))
    broken = CoordinatorProcess(tmp_path / "broken", policy=bad)
    with pytest.raises(RuntimeError, match="capability: one of headless, computer_use"):
        broken.start()


# ------------------------------------------------------------------------------- app routes

# A stand-in for an external research app (a command-line agent that calls a model service,
# which cannot run here): it reads the query as JSON on stdin and answers in the app format,
# naming pages of the local site, or fails in one of the ways a real one does.
FAKE_APP = """
import json, sys, time
import os, pathlib
mode, site = sys.argv[1], sys.argv[2]
pathlib.Path(__file__).with_name("pid-" + mode).write_text(str(os.getpid()))
request = json.load(sys.stdin)
if mode == "flood":
    sys.stdout.write("x" * (3 * 1024 * 1024))
if mode == "sleep":
    time.sleep(60)
if mode == "credit":
    print("error: credit limit reached for this API key", file=sys.stderr)
    sys.exit(3)
if mode == "garbage":
    print("<html>Service temporarily unavailable</html>")
    sys.exit(0)
if mode == "slow":
    time.sleep(3)
print(json.dumps({
    "answer": "Ada Morrow left in 1962 (" + request["query"] + ")",
    "sources": [
        {"url": site + "/varn/keepers.html", "title": "Varn Keepers",
         "excerpts": ["Its last keeper, Ada Morrow, left the tower in 1962.",
                      "Ada Morrow kept the light until 1970."]},
        {"url": site + "/varn/lens.html", "title": "Varn Lens",
         "excerpts": ["The keeper cleaned the lens every day until 1962."]},
    ][: request["max_sources"]],
}))
"""


def _app(tmp_path: Path, name: str, mode: str, site: str) -> tuple[str, str]:
    script = tmp_path / "fake_research_app.py"
    script.write_text(FAKE_APP)
    return "--research-app", f"{name}={sys.executable} {script} {mode} {site}"


def _app_coordinator(tmp_path: Path, routes: list[dict]) -> CoordinatorProcess:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"research": {"routes": routes}}))
    return CoordinatorProcess(tmp_path / "c", policy=policy).start()


def _events(coordinator: CoordinatorProcess, run_id: str, kind: str) -> list[dict]:
    return [e["data"] for e in journal(coordinator, run_id) if e["kind"] == kind]


HEADLESS_ROUTE = {"name": "browsers", "capability": "headless"}


def test_an_app_route_that_answers_is_the_report_and_the_browsers_are_not_used(
    tmp_path: Path, site: str
) -> None:
    coordinator = _app_coordinator(
        tmp_path, [{"name": "deep", "app": "deep", "timeout": 20}, HEADLESS_ROUTE]
    )
    worker = WorkerProcess(coordinator, "w", extra_args=_app(tmp_path, "deep", "ok", site))
    try:
        row = worker.start().wait_online()
        doc = _research(coordinator, "keeper 1962", "--url", f"{site}/varn/keepers.html")
        assert doc["status"] == "SUCCEEDED", doc["stopReason"]
        report = doc["report"]
        assert report["mode"] == "app"
        assert {s["route"] for s in report["sources"]} == {"app:deep"}
        keepers = next(s for s in report["sources"] if s["url"].endswith("/keepers.html"))
        assert FACTS["/varn/keepers.html"] + "." in keepers["excerpts"]
        assert keepers["worker"] == row["id"] and keepers["receipt"].startswith("rcp")
        assert report["answers"][0]["route"] == "app:deep"
        routes = {r["route"]: r for r in report["routes"]}
        assert routes["app:deep"]["outcome"] == "ok"
        assert routes["headless"]["outcome"] == "skipped"
        kinds = {a["kind"]: a["status"] for a in doc["actions"]}
        assert kinds == {"app.research": "SUCCEEDED", "browser.fetch": "SKIPPED"}
        assert report["totals"]["pages_fetched"] == 0
        assert report["totals"]["sources_by_route"] == {"app:deep": 2}
    finally:
        worker.stop()
        coordinator.stop()


def test_app_routes_that_fail_are_journaled_under_their_branch_and_the_browsers_report(
    tmp_path: Path, site: str
) -> None:
    routes = [
        {"name": "slow", "app": "sleeper", "timeout": 2},
        {"name": "broke", "app": "broke", "timeout": 20},
        {"name": "confused", "app": "confused", "timeout": 20},
        {"name": "missing", "app": "nobody-offers-this", "timeout": 20},
        HEADLESS_ROUTE,
    ]
    coordinator = _app_coordinator(tmp_path, routes)
    flags = [
        *_app(tmp_path, "sleeper", "sleep", site),
        *_app(tmp_path, "broke", "credit", site),
        *_app(tmp_path, "confused", "garbage", site),
    ]
    worker = WorkerProcess(coordinator, "w", extra_args=tuple(flags))
    try:
        worker.start().wait_online()
        doc = _research(coordinator, "keeper 1962", "--url", f"{site}/varn/keepers.html")
        assert doc["status"] == "SUCCEEDED", doc["stopReason"]
        branches = {b["route"]: b for b in _events(coordinator, doc["id"], "research.branch")}
        assert branches["app:sleeper"]["code"] == "timeout"
        assert "did not answer within 2 s" in branches["app:sleeper"]["message"]
        assert branches["app:broke"]["code"] == "credit_limit"
        assert "credit limit reached" in branches["app:broke"]["message"]
        assert branches["app:confused"]["code"] == "bad_output"
        assert branches["app:nobody-offers-this"]["code"] == "app_absent"
        assert branches["app:nobody-offers-this"]["message"] == (
            "no worker offers app nobody-offers-this"
        )
        assert all(b["outcome"] == "failed" for b in branches.values())
        # Each failure is under its own branch (work unit) in the report too.
        report = doc["report"]
        failed = [r for r in report["routes"] if r["route"].startswith("app:")]
        assert len({r["work_unit"] for r in failed}) == 4
        assert all(r["outcome"] == "failed" for r in failed)
        # ... and the headless route still ran and produced the evidence.
        assert report["mode"] == "app"
        [source] = report["sources"]
        assert source["route"] == "headless"
        assert source["excerpts"] == [FACTS["/varn/keepers.html"] + "."]
        assert report["totals"]["pages_fetched"] == 1
    finally:
        worker.stop()
        coordinator.stop()


def test_a_thorough_run_merges_app_and_browsers_and_lists_their_disagreements(
    tmp_path: Path, site: str
) -> None:
    routes = [
        {"name": "deep", "app": "deep", "timeout": 30},
        {"name": "broke", "app": "broke", "timeout": 30},
        HEADLESS_ROUTE,
    ]
    coordinator = _app_coordinator(tmp_path, routes)
    flags = [*_app(tmp_path, "deep", "slow", site), *_app(tmp_path, "broke", "credit", site)]
    worker = WorkerProcess(coordinator, "w", extra_args=tuple(flags))
    try:
        worker.start().wait_online()
        doc = _research(
            coordinator, "keeper 1962", "--search-url", search_template(site), "--thorough"
        )
        assert doc["status"] == "SUCCEEDED", doc["stopReason"]
        report = doc["report"]
        assert report["mode"] == "thorough"
        # Both routes ran at once: each was dispatched before the other's receipt came back.
        events = journal(coordinator, doc["id"])
        unit = {a["kind"]: a["id"] for a in doc["actions"]}
        seq = {
            (e["kind"], e["data"].get("action")): e["seq"]
            for e in events
            if e["kind"] in ("action.dispatched", "receipt")
        }
        app, search = unit["app.research"], unit["browser.search"]
        assert seq[("action.dispatched", app)] < seq[("receipt", search)]
        assert seq[("action.dispatched", search)] < seq[("receipt", app)]
        # One report, each source labelled with its route.
        by_route = {(s["route"], s["url"].removeprefix(site)) for s in report["sources"]}
        assert ("headless", "/varn/keepers.html") in by_route
        assert ("app:deep", "/varn/keepers.html") in by_route
        assert ("app:deep", "/varn/lens.html") in by_route
        routes_seen = {r["route"]: r["outcome"] for r in report["routes"]}
        assert routes_seen == {"app:deep": "ok", "app:broke": "failed", "headless": "ok"}
        disagreements = {
            (d["kind"], d["url"].removeprefix(site), d.get("excerpt", ""))
            for d in report["disagreements"]
        }
        assert disagreements == {
            ("only_one_route", "/varn/lens.html", ""),
            ("excerpt_not_in_page", "/varn/keepers.html", "Ada Morrow kept the light until 1970."),
        }
    finally:
        worker.stop()
        coordinator.stop()


def test_research_reports_its_totals_and_stops_at_its_page_and_byte_limits(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("a").wait_online()
    urls = [f"{site}/varn/notes/{i}.html" for i in range(7)]
    doc = _research(
        coordinator,
        "tower painted",
        *[x for u in urls for x in ("--url", u)],
        "--max-pages",
        "6",
        "--max-bytes",
        "1000",  # a page of the site is about 840 bytes
    )
    assert doc["status"] == "SUCCEEDED", doc["stopReason"]
    report = doc["report"]
    totals = report["totals"]
    reasons = {x["url"]: x["reason"] for x in report["skipped"]}
    # The seventh URL is past the page limit; it never became a work unit.
    assert reasons[urls[6]] == "max_pages: the run's page limit (6) is reached"
    # Once 1000 bytes were read, fetches not yet dispatched were skipped with the reason.
    by_bytes = [u for u, r in reasons.items() if r.startswith("max_bytes: the run has read")]
    assert by_bytes
    assert totals["pages_fetched"] + len(by_bytes) == 6
    assert totals["bytes_read"] >= 1000
    assert totals["sources_by_status"] == {"ok": totals["pages_fetched"], "skipped": len(reasons)}
    assert report["limits"] == {"max_pages": 6, "max_bytes": 1000}
    skipped_units = [a for a in doc["actions"] if a["status"] == "SKIPPED"]
    assert len(skipped_units) == len(by_bytes)
    assert _events(coordinator, doc["id"], "research.skipped")

    # The counts match what is listed, and every listed source has its passages' links.
    assert totals["sources"] == len(report["sources"]) == totals["pages_fetched"]
    assert totals["skipped"] == len(report["skipped"])
    assert totals["sources_with_evidence"] == report["evidence"]
    for src in report["sources"]:
        assert [p["text"] for p in src["passages"]] == src["excerpts"]
        assert all(p["link"].startswith(src["final_url"] + "#") for p in src["passages"])
        assert all(":~:text=" in p["link"] and p["score"] > 0 for p in src["passages"])
    best = report["passages"]
    assert best and [p["score"] for p in best] == sorted((p["score"] for p in best), reverse=True)


def test_research_format_md_is_a_readable_report_of_what_was_read_failed_and_skipped(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("a").wait_online()
    paths = ["/varn/keepers.html", "/varn/lens.html", "/files/report.pdf", "/varn/range.html"]
    args = [x for p in paths for x in ("--url", site + p)]
    done = coordinator.cli(
        "research", "keeper 1962", *args, "--max-pages", "3", "--wait", "--format", "md",
        check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    md = done.stdout
    assert md.startswith("# Research: keeper 1962\n"), md
    assert "1 of 2 source(s) read hold matching text, 1 not evidence, 1 skipped" in md
    assert f"### [Varn Keepers](<{site}/varn/keepers.html>)" in md
    assert FACTS["/varn/keepers.html"] + "." in md
    assert f"(<{site}/varn/keepers.html#:~:text=" in md
    assert f"- {site}/files/report.pdf: unsupported_content:" in md
    assert f"## Skipped\n\n- {site}/varn/range.html: max\\_pages:" in md
    assert "Traceback" not in done.stderr


ENV_APP = """
import json, os
print(json.dumps({
    "answer": json.dumps(dict(os.environ)),
    "sources": [{"url": "https://example.org/env", "title": "env", "excerpts": ["env"]}],
}))
"""


def test_an_app_started_by_a_worker_gets_no_provider_key_or_worker_setting(
    tmp_path: Path,
) -> None:
    coordinator = _app_coordinator(tmp_path, [{"name": "env", "app": "env", "timeout": 20}])
    script = tmp_path / "env_app.py"
    script.write_text(ENV_APP)
    secrets = {
        "OPENAI_API_KEY": "sk-provider-secret",
        "DESKFLEET_LOG_LEVEL": "info",
        "DESKFLEET_CHROMIUM": "/usr/bin/chromium",
    }
    worker = WorkerProcess(
        coordinator,
        "w",
        display_env={**secrets, "APP_SETTING": "passed on"},
        extra_args=(
            "--research-app",
            f"env={sys.executable} {script}",
            "--research-app-env",
            "APP_SETTING",
        ),
    )
    try:
        worker.start().wait_online()
        doc = _research(coordinator, "what do you see", "--url", "https://example.org/env")
        [answer] = [a for a in doc["report"]["answers"] if a["route"] == "app:env"]
        env = json.loads(answer["answer"])
        assert env["APP_SETTING"] == "passed on"
        assert env["HOME"] == str(worker.state_dir / "apps" / "env" / "home")
        assert not [k for k in env if k.startswith("DESKFLEET_") or k in secrets]
        assert not set(secrets.values()) & set(env.values())
    finally:
        worker.stop()
        coordinator.stop()


# -- research fan-out bounds (an attack form that held; kept held) ------------------------------


def test_a_search_fans_out_to_at_most_max_sources_and_max_pages(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    """The search page lists ten results: a run fetches max_sources of them, and past its page
    limit lists the rest as skipped without fetching them."""
    workers("fan").wait_online()
    template = search_template(site)
    doc = _research(coordinator, "varn", "--search-url", template, "--max-sources", "2")
    assert doc["status"] == "SUCCEEDED", doc["stopReason"]
    fetches = [a for a in doc["actions"] if a["kind"] == "browser.fetch"]
    assert len(fetches) == 2, [a["intent"] for a in fetches]
    doc = _research(
        coordinator, "varn", "--search-url", template, "--max-sources", "6", "--max-pages", "2"
    )
    fetches = [a for a in doc["actions"] if a["kind"] == "browser.fetch"]
    assert len(fetches) == 2
    skipped = [x for x in doc["report"]["skipped"] if x["reason"].startswith("max_pages")]
    assert len(skipped) == 4, doc["report"]["skipped"]
