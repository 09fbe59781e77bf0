"""Browser actions through runs: real coordinator, real worker, real Chromium, the local site."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.local_site.server import FACTS, search_template
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    journal,
    submit,
    wait_run,
    write_plan,
)

pytestmark = pytest.mark.slow


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
    finally:
        worker.stop()
        coordinator.stop()


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


def test_research_over_given_urls_reports_binaries_and_challenges_apart(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("a").wait_online()
    workers("b").wait_online()
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


def test_research_without_a_headless_worker_waits_for_the_fallback_route_with_the_reason(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    workers("no-browser", extra_args=("--chromium", "/nonexistent/chromium")).wait_online()
    run = coordinator.cli_json("research", "lens", "--url", f"{site}/varn/lens.html")
    waiting = wait_run(coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_AUTHORITY", 20)
    assert waiting["waiting"]["code"] == "needs_approval"
    detail = waiting["waiting"]["detail"]
    assert "route headless: needs capability headless" in detail
    assert "route desktop: computer_use research needs an approved desktop scope" in detail


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
