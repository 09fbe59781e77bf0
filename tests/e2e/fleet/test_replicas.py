"""Several coordinator replicas on one PostgreSQL: one fleet, work across replicas, failover.

Real replica processes on a real PostgreSQL database (skipped, saying so, where no server
answers on 127.0.0.1:5432; CI starts one).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinator.admin_cli.render import as_dict
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    TcpProxy,
    WorkerProcess,
    Xvfb,
    journal,
    submit,
    verify_journal,
    wait_run,
    wait_until,
    write_plan,
)
from tests.harness.models import AnthropicStandIn, computer
from tests.harness.sites import FIELD, DesktopSite

pytestmark = pytest.mark.postgres


@dataclass
class Pair:
    a: CoordinatorProcess
    b: CoordinatorProcess
    workers: list[WorkerProcess]

    def worker(
        self,
        on: CoordinatorProcess,
        name: str,
        *,
        also: CoordinatorProcess | None = None,
        **kw: Any,
    ) -> WorkerProcess:
        """A worker enrolled through `on`, streaming to it (then to `also` if it fails)."""
        kw.setdefault("browser", False)  # no test here browses: no Chromium to start
        worker = WorkerProcess(on, name, **kw)
        addresses = ",".join(c.address for c in (on, also) if c is not None)
        done = worker.enroll(coordinators=addresses)
        assert done.returncode == 0, done.stderr
        self.workers.append(worker.start())
        return worker


def _replicas(
    tmp_path: Path,
    store: tuple[str, Path],
    url: str | None = None,
    start: bool = True,
    **kw: Any,
) -> tuple[CoordinatorProcess, CoordinatorProcess]:
    """Replicas a and b of the initialised `store` (reached at `url`, default its own),
    started unless told otherwise."""
    kw.setdefault("scripts_dir", tmp_path / "scripts")  # a goal may move to the other one
    db_url, credentials = store
    pair = []
    for name in ("a", "b"):
        replica = CoordinatorProcess(tmp_path / name, url or db_url, replica=name, **kw)
        # One store, one admin and one secrets key: the store's own.
        shutil.copy(credentials / "admin.token", replica.admin_token_file)
        shutil.copy(credentials / "secrets.key", replica.secrets_key_file)
        pair.append(replica)
    a, b = pair
    return (a.start(), b.start()) if start else (a, b)


@pytest.fixture
def pair(tmp_path: Path, pg_store: tuple[str, Path]) -> Iterator[Pair]:
    a, b = _replicas(tmp_path, pg_store)
    pair = Pair(a, b, [])
    yield pair
    for worker in pair.workers:
        worker.stop()
    a.stop()
    b.stop()


def _online(coordinator: CoordinatorProcess, *workers: WorkerProcess) -> dict[str, str]:
    """Wait until `coordinator` sees every worker online; worker id -> replica."""

    def check() -> dict[str, str] | None:
        rows = {w["id"]: w for w in coordinator.status()["workers"]}
        if all(rows.get(w.worker_id, {}).get("online") for w in workers):
            return {w.worker_id: rows[w.worker_id]["replica"] for w in workers}
        return None

    found: dict[str, str] = wait_until(check, 60, 0.2, "workers online")
    return found


def _kill_switches(coordinator: CoordinatorProcess) -> list[dict[str, Any]]:
    """`deskfleet kill status --json`'s switches, through the harness's channel: polled, a CLI
    process per look would compete with the replicas for the cores."""
    channel = coordinator.channel()
    assert channel is not None
    reply = desktop_pb2_grpc.KillSwitchServiceStub(channel).Status(
        desktop_pb2.KillStatusRequest(), metadata=coordinator.admin_metadata(), timeout=30
    )
    switches: list[dict[str, Any]] = as_dict(reply).get("switches", [])
    return switches


def _pending_approvals(coordinator: CoordinatorProcess) -> list[dict[str, Any]]:
    """`deskfleet approvals list --json`'s approvals (pending), through the harness's channel."""
    channel = coordinator.channel()
    assert channel is not None
    reply = desktop_pb2_grpc.ApprovalServiceStub(channel).ListApprovals(
        desktop_pb2.ListApprovalsRequest(limit=50),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    approvals: list[dict[str, Any]] = as_dict(reply).get("approvals", [])
    return approvals


def _fleet(coordinator: CoordinatorProcess) -> tuple[int, int, list[tuple[Any, ...]]]:
    """The fleet as `coordinator` reports it, without the heartbeat times that keep moving."""
    doc = coordinator.status()
    rows = [
        (w["id"], w["name"], w["online"], w["replica"], w["state"], json.dumps(w["capabilities"]))
        for w in doc["workers"]
    ]
    return doc["headlessOnline"], doc["computerUseOnline"], rows


def test_both_replicas_show_one_fleet_and_a_plan_submitted_on_a_runs_on_bs_worker(
    pair: Pair, tmp_path: Path
) -> None:
    # With a browser each: the fleet counts them as headless workers.
    wa = pair.worker(pair.a, "wa", browser=True)
    wb = pair.worker(pair.b, "wb", browser=True)
    holders = _online(pair.a, wa, wb)
    assert holders == {wa.worker_id: "a", wb.worker_id: "b"}

    # Each replica counts from its own worker index, which learns of the other's connects
    # through the store's notifications: the two agree once those have arrived.
    def agreeing() -> tuple[Any, ...] | None:
        from_a, from_b = _fleet(pair.a), _fleet(pair.b)
        return from_a if from_a == from_b else None

    assert wait_until(agreeing, 10, 0.1, "both replicas to show the same fleet")[0] == 2
    table = pair.b.cli("status").stdout
    assert " a " in table and " b " in table  # the table names each worker's replica

    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.echo", "args": {"value": i}, "route": {"worker": wb.worker_id}}
            for i in range(3)
        ],
    )
    started = time.monotonic()
    run = submit(pair.a, plan, wait=True)
    elapsed = time.monotonic() - started
    assert run["status"] == "SUCCEEDED", run["stopReason"]
    assert {a["workerId"] for a in run["actions"]} == {wb.worker_id}
    # Three actions forwarded one after another: notifications, not the 1 s poll, carry them.
    assert elapsed < 10, elapsed
    receipts = [e["data"] for e in journal(pair.b, run["id"]) if e["kind"] == "receipt"]
    assert [r["result"] for r in receipts] == [{"echo": i} for i in range(3)]


def test_a_worker_drained_on_b_gets_no_work_from_a_until_b_undrains_it(
    pair: Pair, tmp_path: Path
) -> None:
    """Each replica routes from its own copy of the fleet: a drain or undrain made on one
    reaches the other's routing, whichever holds the worker's stream."""
    worker = pair.worker(pair.a, "w")
    _online(pair.b, worker)
    pair.b.cli("workers", "drain", worker.worker_id)
    plan = write_plan(tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": 1}}])
    run = submit(pair.a, plan)
    waiting = wait_run(pair.a, run["id"], lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT", 30)
    assert waiting["actions"][0]["status"] == "PENDING"
    pair.b.cli("workers", "undrain", worker.worker_id)
    done = wait_run(pair.a, run["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    assert done["actions"][0]["workerId"] == worker.worker_id


def test_a_kill_switch_engaged_on_b_reaches_a_worker_streaming_to_a(pair: Pair) -> None:
    wa = pair.worker(pair.a, "wa")
    _online(pair.b, wa)
    kill = pair.b.cli_json("kill", "engage", "--reason", "replica test")

    def acknowledged() -> dict[str, Any] | None:
        [switch] = _kill_switches(pair.a)
        return switch if wa.worker_id in switch["acknowledged"] else None

    switch = wait_until(acknowledged, 10, 0.1, "the worker on replica a to acknowledge")
    assert switch["id"] == kill["id"] and not switch.get("unacknowledged")
    pair.b.cli("kill", "release", "--fleet", "--reason", "done")


def test_a_replica_killed_mid_run_its_worker_moves_and_the_run_finishes_once(
    pair: Pair, tmp_path: Path
) -> None:
    worker = pair.worker(pair.a, "w", also=pair.b)
    assert _online(pair.b, worker) == {worker.worker_id: "a"}
    actions: list[dict[str, Any]] = [
        {"kind": "diag.append", "args": {"name": f"{i}.txt", "line": "once"}} for i in range(2)
    ]
    actions.append({"kind": "diag.sleep", "args": {"seconds": 3}, "idempotent": True})
    actions += [
        {"kind": "diag.append", "args": {"name": f"{i}.txt", "line": "once"}} for i in range(2, 4)
    ]
    run = submit(pair.a, write_plan(tmp_path / "plan.json", actions))
    wait_run(pair.b, run["id"], lambda r: r["actions"][2]["status"] == "STARTED", 30)
    pair.a.kill()  # kill -9: no goodbye, its leases simply stop being renewed

    wait_until(lambda: _online(pair.b, worker) == {worker.worker_id: "b"}, 60, 0.2, "the move to b")
    done = wait_run(pair.b, run["id"], lambda r: r["status"] in STOPPED, 90)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    for i in range(4):  # no non-idempotent action ran twice
        assert worker.scratch(f"{i}.txt").read_text().splitlines() == ["once"], i
    events = journal(pair.b, run["id"])
    receipted = {e["data"]["action"] for e in events if e["kind"] == "receipt"}
    assert receipted >= {a["id"] for a in done["actions"]}  # no receipt lost
    assert verify_journal(pair.b, run["id"])["ok"] is True


def test_an_approval_answered_on_b_unblocks_a_goal_waiting_on_a(
    pair: Pair, xvfb: Xvfb, tmp_path: Path
) -> None:
    desk = pair.worker(pair.b, "desk", display_env=xvfb.env)
    _online(pair.a, desk)
    shot = {"name": "computer", "arguments": {"action": "screenshot"}}
    model = pair.a.script(
        "script.json",
        [{"tool_calls": [shot]}, {"text": "seen", "tool_calls": []}],
    )
    goal = pair.a.cli_json(
        "goal", "look at the screen", "--desktop", desk.worker_id, "--model", model
    )
    approval = wait_until(
        lambda: (pending := _pending_approvals(pair.b)) and pending[0],
        30,
        0.2,
        "the goal's approval, seen from replica b",
    )
    pair.b.cli("approvals", "approve", approval["id"])
    done = wait_run(pair.a, goal["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    [result] = [e["data"] for e in journal(pair.a, goal["id"]) if e["kind"] == "goal.tool_result"]
    assert not result["is_error"] and result["images"][0]["media_type"] == "image/png"


def test_a_goal_of_a_replica_that_died_is_adopted_and_finishes_without_repeating_a_step(
    pair: Pair, tmp_path: Path
) -> None:
    steps: list[dict[str, Any]] = [
        {"sleep": 0.3, "tool_calls": [{"name": "recall", "arguments": {"text": f"step {i}"}}]}
        for i in range(20)
    ]
    model = pair.a.script("long.json", [*steps, {"text": "all done", "tool_calls": []}])
    goal = pair.a.cli_json("goal", "a long goal", "--model", model)

    def results() -> list[dict[str, Any]]:
        return [e for e in journal(pair.b, goal["id"]) if e["kind"] == "goal.tool_result"]

    wait_until(lambda: len(results()) >= 3, 30, 0.1, "3 steps on replica a")
    pair.a.kill()
    done = wait_run(pair.b, goal["id"], lambda r: r["status"] in STOPPED, 90)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    events = journal(pair.b, goal["id"])
    [adopted] = [e["data"] for e in events if e["kind"] == "goal.adopted"]
    assert adopted == {"replica": "b", "previous": "a", "execution": 2}
    texts = [e["data"]["arguments"]["text"] for e in results()]
    assert len(texts) == len(set(texts)) == 20


def test_a_replica_that_died_right_after_a_goals_type_ran_hands_the_goal_on_typing_once(
    tmp_path: Path,
    pg_store: tuple[str, Path],
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
) -> None:
    # Replica a exits right after its third receipt (the type's) is committed, before the goal
    # journals the call's result; b adopts the goal and reads the type's outcome from the
    # ledger. The model is the real Anthropic provider talking to a stand-in both replicas call.
    x, y, w, h = FIELD
    text = "Lit in 1868, says the journal"
    model = AnthropicStandIn(
        [
            {"computer": [computer("screenshot")]},
            {"computer": [computer("left_click", coordinate=[x + w // 2, y + h // 2])]},
            {"computer": [computer("type", text=text)]},
            {"computer": [computer("key", text="Return")]},
            {"text": "Done."},
        ]
    ).start()
    # A lease of 5 s: on a loaded machine the test's usual 1.5 s let the worker's stream to a
    # lapse and move to b, whose receipt a did not count, and a died later than meant.
    a, b = _replicas(tmp_path, pg_store, env=model.env, start=False, heartbeat=1.0, lease=5.0)
    a.start(fault="exit-after-receipt-commit@3")
    b.start()
    pair = Pair(a, b, [])
    try:
        window()
        desktop_site.reset()
        desk = pair.worker(a, "desk", also=b, display_env=xvfb.env)
        _online(b, desk)
        goal = a.cli_json(
            "goal", "write when the light was first lit", "--desktop", desk.worker_id,
            "--model", "anthropic:claude-test",
        )  # fmt: skip
        a.cli("runs", "guide", goal["id"], "use the middle field")
        [approval] = wait_until(lambda: _pending_approvals(b), 30, 0.2, "the goal's approval")
        b.cli("approvals", "approve", approval["id"])
        assert a.proc is not None and a.proc.wait(60) == 86, "the armed fault did not stop a"

        def stopped() -> dict[str, Any] | None:
            for asked in _pending_approvals(b):  # the worker's new session asks again
                b.cli("approvals", "approve", asked["id"])
            run = b.cli_json("runs", "show", goal["id"])
            return run if run["status"] in STOPPED else None

        done = wait_until(stopped, 120, 0.3, "the adopted goal's end on b")
        assert done["status"] == "SUCCEEDED", done["stopReason"]
        assert wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the submit") == [text]
        [child] = b.cli_json("runs", "list", "--parent", goal["id"])["runs"]
        actions = b.cli_json("runs", "show", child["id"])["actions"]
        [typed] = [a for a in actions if a["kind"] == "desktop.type"]
        assert typed["attempts"] == 1
        result = model.tool_results(3)["toolu_03_0"]
        assert "succeeded" in json.dumps(result) and not result.get("is_error")
        assert "use the middle field" in json.dumps(model.requests[3])
        events = journal(b, goal["id"])
        assert [e["data"]["replica"] for e in events if e["kind"] == "goal.adopted"] == ["b"]
        recovered = [
            e["data"].get("recovered")
            for e in events
            if e["kind"] == "goal.tool_result" and e["data"]["call"] == "toolu_03_0"
        ]
        assert recovered == [typed["id"]]
    finally:
        for worker in pair.workers:
            worker.stop()
        a.stop()
        b.stop()
        model.stop()


def test_an_unreachable_store_is_unavailable_from_every_replica(
    tmp_path: Path, pg_store: tuple[str, Path]
) -> None:
    proxy = TcpProxy(("127.0.0.1", 5432))
    url = pg_store[0].replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    a, b = _replicas(tmp_path, pg_store, url)
    try:
        assert _fleet(a) == _fleet(b)
        proxy.cut()
        for replica in (a, b):
            done = replica.cli("status", json_out=True, check=False, timeout=60)
            assert done.returncode == 5, done.stderr
            assert done.stdout == ""
            assert done.stderr.startswith("deskfleet: the coordinator's store is unavailable:")
    finally:
        proxy.cut()
        a.stop()
        b.stop()


def test_journal_search_on_postgresql_uses_the_index_and_finds_archived_text(
    pair: Pair, tmp_path: Path
) -> None:
    # Without a browser the worker is online at once and the run is submitted while its hello
    # is still being reconciled: an attempt claimed in that moment must still run, once.
    worker = pair.worker(pair.a, "w")
    _online(pair.b, worker)
    values = ["a needle here", "x" * 6000 + " a deep NEEDLE", "100%_sure", "plain"]
    plan = write_plan(
        tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": v}} for v in values]
    )
    run = submit(pair.a, plan, wait=True)
    assert run["status"] == "SUCCEEDED", run["stopReason"]
    receipts = [e for e in journal(pair.b, run["id"]) if e["kind"] == "receipt"]
    assert receipts[1]["data"]["incomplete"] is True  # archived: only a preview in the journal

    found = pair.b.cli_json("journal", "search", run["id"], "needle")
    assert [m["seq"] for m in found["matches"]] == [receipts[0]["seq"], receipts[1]["seq"]]
    assert "deep NEEDLE" in found["matches"][1]["excerpt"]
    # LIKE's wildcards in a query are plain characters to the search.
    wild = pair.b.cli_json("journal", "search", run["id"], "%_s")
    assert [m["seq"] for m in wild["matches"]] == [receipts[2]["seq"]]
    import psycopg

    with psycopg.connect(pair.a.db_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert "journal_data_trgm" in indexes


def test_a_second_replica_with_a_taken_name_is_refused(pair: Pair, tmp_path: Path) -> None:
    namesake = CoordinatorProcess(tmp_path / "a2", pair.a.db_url, replica="a")
    namesake.workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(pair.a.admin_token_file, namesake.admin_token_file)
    with pytest.raises(RuntimeError, match="did not start"):
        namesake.start()
    assert (
        "another replica named 'a' is running on this store; give each replica its own"
        " --replica NAME"
    ) in namesake.log.read_text()
    # A replica that crashed leaves a row that stops moving: its successor starts at once.
    pair.b.kill()
    CoordinatorProcess(tmp_path / "b2", pair.a.db_url, replica="b").start().stop()


def test_a_required_question_of_a_goal_driven_on_a_is_answered_on_b(
    pair: Pair, tmp_path: Path
) -> None:
    ask = {"name": "ask_human", "arguments": {"question": "which door?", "required": True}}
    model = pair.a.script("ask.json", [{"tool_calls": [ask]}, {"text": "ok", "tool_calls": []}])
    goal = pair.a.cli_json("goal", "ask on a", "--model", model)

    def asked() -> dict[str, Any] | None:
        listed = pair.b.cli_json("questions", "list", "--run", goal["id"])
        return listed["questions"][0] if listed.get("questions") else None

    question = wait_until(asked, 30, 0.2, "the goal's question, seen from replica b")
    pair.b.cli("questions", "answer", question["id"], "the blue one")
    done = wait_run(pair.a, goal["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    [result] = [e["data"] for e in journal(pair.a, goal["id"]) if e["kind"] == "goal.tool_result"]
    assert result["text"] == "the person answered: the blue one"
    assert [e for e in journal(pair.a, goal["id"]) if e["kind"] == "goal.adopted"] == []
