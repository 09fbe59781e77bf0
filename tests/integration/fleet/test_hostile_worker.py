"""A hostile enrolled worker against a real coordinator: streams opened by hand with a real
worker's credential (`tests/harness/raw_worker.py`), every message chosen by the test.

What it may not do: report on another worker's attempt (30.3), make the store keep or lose
kill switch acknowledgements (30.4), advertise without bounds (30.5); and the attack forms
that held before, kept held: a capability it was not granted, control characters in what it
advertises, heartbeats it never reads the answers to, large junk receipts, idle connections.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from coordinator.admin_cli.render import as_dict
from shared.advertisement import Capability, Display
from shared.gen.deskfleet.v1 import (
    desktop_pb2,
    desktop_pb2_grpc,
    fleet_pb2,
    fleet_pb2_grpc,
    worker_pb2,
)
from tests.harness import (
    BIN,
    CoordinatorProcess,
    base_env,
    journal,
    submit,
    verify_journal,
    wait_run,
    wait_until,
    write_plan,
)
from tests.harness.raw_worker import HEADLESS, RawWorker

pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test has its own raw workers, runs and switches."""
    return module_coordinator


@pytest.fixture
def raw(coordinator: CoordinatorProcess) -> Iterator[Callable[..., RawWorker]]:
    made: list[RawWorker] = []

    def make(name: str, **kw: Any) -> RawWorker:
        worker = RawWorker(coordinator, name, **kw)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.close()


def _receipt(d: worker_pb2.Dispatch, result_json: str, **kw: Any) -> worker_pb2.Receipt:
    now = time.time()
    fields: dict[str, Any] = {
        "action_id": d.action_id,
        "run_id": d.run_id,
        "attempt_id": d.attempt_id,
        "epoch": d.epoch,
        "status": "succeeded",
        "result_json": result_json,
        "started_at": now,
        "finished_at": now,
    }
    return worker_pb2.Receipt(**(fields | kw))


# ------------------------------------------------------------------ 30.3 forged receipts


def test_a_worker_cannot_start_or_complete_another_workers_attempt(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    claimant, forger = raw("claimant"), raw("forger")
    claimant.connect()
    forger.connect()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "real"}, "idempotent": False,
          "route": {"worker": claimant.worker_id}}],
    )  # fmt: skip
    run_id = submit(coordinator, plan)["id"]
    d = claimant.expect("dispatch").dispatch
    assert d.run_id == run_id

    # What the run's owner reads in GetRun is all the forger needs.
    forger.send(started=worker_pb2.ActionStarted(action_id=d.action_id, attempt_id=d.attempt_id))
    forger.send(receipt=_receipt(d, '{"echo": "forged"}'))
    ack = forger.expect("receipt_ack").receipt_ack
    assert (ack.action_id, ack.accepted) == (d.action_id, False)
    assert ack.reason == "this worker does not hold the claim on the attempt"
    run = wait_run(coordinator, run_id, lambda r: True)
    assert run["status"] == "RUNNING"
    [action] = run["actions"]
    assert (action["status"], action["workerId"], action["receiptId"]) == (
        "DISPATCHED",
        claimant.worker_id,
        "",
    )
    events = journal(coordinator, run_id)
    refused = {e["kind"]: e["data"] for e in events if e["kind"].endswith(".refused")}
    assert set(refused) == {"receipt.refused", "started.refused"}
    assert {d["worker"] for d in refused.values()} == {forger.worker_id}
    assert not [e for e in events if e["kind"] in ("receipt", "action.started")]

    # The claimant's own receipt is still taken, with its own result.
    claimant.send(receipt=_receipt(d, '{"echo": "real"}'))
    assert claimant.expect("receipt_ack").receipt_ack.accepted
    run = wait_run(coordinator, run_id, lambda r: r["status"] == "SUCCEEDED")
    [recorded] = [e["data"] for e in journal(coordinator, run_id) if e["kind"] == "receipt"]
    assert recorded["result"] == {"echo": "real"}
    assert verify_journal(coordinator, run_id)["ok"]
    shown = coordinator.cli("runs", "show", run_id).stdout
    assert "receipt from" in shown and "does not hold the claim" in shown


# ---------------------------------------------------------------- 30.4 kill acknowledgements


def _switch(coordinator: CoordinatorProcess, kill_id: str) -> dict[str, Any]:
    channel = coordinator.channel()
    assert channel is not None
    reply = desktop_pb2_grpc.KillSwitchServiceStub(channel).Status(
        desktop_pb2.KillStatusRequest(include_released=True),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    switch: dict[str, Any] = next(s for s in as_dict(reply)["switches"] if s["id"] == kill_id)
    return switch


def _store_bytes(coordinator: CoordinatorProcess) -> int:
    db = Path(coordinator.db_url.removeprefix("sqlite:///"))
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def _bad_acks_beside_a_real_one(coordinator: CoordinatorProcess, acker: RawWorker) -> None:
    """Engage a switch for `acker` and one for another worker; the acker sends 200 junk
    acknowledgements around its one real one. Only the real one counts."""
    other = RawWorker(coordinator, "bystander")
    kill = coordinator.cli_json("kill", "engage", "--worker", acker.worker_id, "--reason", "t")
    theirs = coordinator.cli_json("kill", "engage", "--worker", other.worker_id, "--reason", "t")
    try:
        acker.expect("kill", where=lambda m: m.kill.kill_id == kill["id"])
        junk = [
            worker_pb2.KillAck(kill_id=f"kill_{i:04}" + "x" * 65536, engaged=True)
            for i in range(200)
        ]
        near = [
            worker_pb2.KillAck(kill_id="kill_nothing", engaged=True),  # no such switch
            worker_pb2.KillAck(kill_id=theirs["id"], engaged=True),  # another worker's
            worker_pb2.KillAck(kill_id=kill["id"], engaged=False),  # not released
        ]
        for ack in [*junk[:100], *near, worker_pb2.KillAck(kill_id=kill["id"], engaged=True)]:
            acker.send(kill_ack=ack)
        for ack in [*junk[100:], *near]:
            acker.send(kill_ack=ack)
        mine = wait_until(
            lambda: (s := _switch(coordinator, kill["id"]))["acknowledgedCount"] and s,
            15,
            0.1,
            "the real acknowledgement",
        )
        assert mine["acknowledged"] == [acker.worker_id] and mine["unacknowledgedCount"] == 0
        # The junk after it was read too: once another real change arrives behind it.
        coordinator.cli("kill", "release", "--id", kill["id"], "--reason", "t")
        acker.expect("kill", where=lambda m: m.kill.kill_id == kill["id"] and not m.kill.engaged)
        acker.send(kill_ack=worker_pb2.KillAck(kill_id=kill["id"], engaged=False))
        wait_until(
            lambda: (
                _switch(coordinator, kill["id"])["acknowledgedCount"] == 1
                and _switch(coordinator, kill["id"])["acknowledged"] == [acker.worker_id]
            ),
            15,
            0.1,
            "the release's acknowledgement",
        )
        assert _switch(coordinator, theirs["id"])["acknowledgedCount"] == 0
    finally:
        coordinator.cli("kill", "release", "--id", theirs["id"], "--reason", "t", check=False)
        coordinator.cli("kill", "release", "--id", kill["id"], "--reason", "t", check=False)


def test_kill_acks_count_only_for_a_switch_that_applies_and_junk_costs_the_store_nothing(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker]
) -> None:
    acker = raw("acker")
    acker.connect()
    before = _store_bytes(coordinator)
    _bad_acks_beside_a_real_one(coordinator, acker)
    # 200 ids of 64 KiB stored were 26 MB; refused, they cost nothing but the real rows.
    assert _store_bytes(coordinator) - before < 1024 * 1024
    lines = [line for line in coordinator.log.read_text().splitlines() if "refused" in line]
    counted = [line for line in lines if "kill switch acknowledgements" in line]
    assert counted and len(counted) <= 3, counted  # logged at a bounded rate, not 200 times


@pytest.mark.postgres
def test_on_postgresql_one_bad_kill_ack_costs_no_other_its_place(
    pg_store: tuple[str, Path], tmp_path: Path
) -> None:
    url, credentials = pg_store
    coordinator = CoordinatorProcess(tmp_path / "pg", url)
    shutil.copy(credentials / "admin.token", coordinator.admin_token_file)
    shutil.copy(credentials / "secrets.key", coordinator.secrets_key_file)
    coordinator.start()
    acker = RawWorker(coordinator, "acker")
    try:
        acker.connect()
        _bad_acks_beside_a_real_one(coordinator, acker)
    finally:
        acker.close()
        coordinator.stop()


# ------------------------------------------------------------------------ 30.5 bounded hello


def _refused_hello(worker: RawWorker, hello: worker_pb2.Hello) -> str:
    """Open a stream with this hello: it must be refused as INVALID_ARGUMENT; the details."""
    worker.open(hello)
    with pytest.raises(grpc.RpcError) as caught:
        worker.expect("welcome", timeout=15)
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    details: str = error.details()
    return details


def _status_bytes(coordinator: CoordinatorProcess) -> int:
    channel = coordinator.channel()
    assert channel is not None
    reply = fleet_pb2_grpc.FleetServiceStub(channel).GetWorkerStatus(
        fleet_pb2.GetWorkerStatusRequest(), metadata=coordinator.admin_metadata(), timeout=30
    )
    return int(reply.ByteSize())


def _row(coordinator: CoordinatorProcess, worker_id: str) -> dict[str, Any]:
    channel = coordinator.channel()
    assert channel is not None
    reply = fleet_pb2_grpc.FleetServiceStub(channel).GetWorker(
        fleet_pb2.WorkerRef(id=worker_id), metadata=coordinator.admin_metadata(), timeout=30
    )
    return as_dict(reply)


def test_a_hello_past_its_bounds_is_refused_naming_the_limit_and_nothing_is_written(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker]
) -> None:
    before = _status_bytes(coordinator)
    ad = HEADLESS.to_proto()
    bloated = fleet_pb2.Advertisement()
    bloated.CopyFrom(ad)
    bloated.versions.update({f"v{i}": "x" * 1000 for i in range(8000)})  # the 8 MB hello
    many = fleet_pb2.Advertisement()
    many.CopyFrom(ad)
    many.versions.update({f"v{i}": "1.0" for i in range(100)})
    huge_screen = fleet_pb2.Advertisement()
    huge_screen.CopyFrom(ad)
    huge_screen.displays.add(index=0, width=16_000_000, height=16_000_000)
    wide = fleet_pb2.Advertisement()  # every entry within its bounds, the whole past 64 KiB
    wide.CopyFrom(ad)
    wide.labels.update({f"{i:0>250}": "l" * 256 for i in range(64)})
    wide.versions.update({f"{i:0>250}": "v" * 256 for i in range(64)})
    held = [worker_pb2.HeldAction(action_id="act_1", attempt_id="att", state="running")]
    cases = [
        (worker_pb2.Hello(advertisement=bloated), "hello limit max_bytes=65536: the hello is 8"),
        (worker_pb2.Hello(advertisement=many), "hello limit max_entries=64:"),
        (worker_pb2.Hello(advertisement=huge_screen), "hello limit max_display_px=32768:"),
        (worker_pb2.Hello(advertisement=wide), "hello limit max_bytes=65536: the hello is"),
        (worker_pb2.Hello(advertisement=ad, held=held * 513), "hello limit max_held=512:"),
        (
            worker_pb2.Hello(
                advertisement=ad, held=[worker_pb2.HeldAction(action_id="a" * 60_000)]
            ),
            "held[0].action_id: 1 to 64 characters (got 60000)",
        ),
    ]
    for i, (hello, said) in enumerate(cases):
        worker = raw(f"bloated-{i}")
        details = _refused_hello(worker, hello)
        assert details.startswith(said) and "\n" not in details and len(details) < 200, details
        row = _row(coordinator, worker.worker_id)
        assert not row["online"] and row["versions"] == {} and row["displays"] == [], row
    # Every status call would carry the 8 MB advertisement; it was never written.
    assert _status_bytes(coordinator) < before + 4096


def test_hello_limits_are_a_serve_setting(tmp_path: Path) -> None:
    done = subprocess.run(
        [BIN / "deskfleet-coordinator", "serve", "--db", "sqlite:///x.db",
         "--hello-limit", "max_entries=lots"],
        capture_output=True, text=True, timeout=60, env=base_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "deskfleet-coordinator: --hello-limit 'max_entries=lots': N must be a whole number"
        " of at least 1"
    ]
    coordinator = CoordinatorProcess(
        tmp_path / "coord", serve_args=("--hello-limit", "max_entries=2")
    ).start()
    try:
        labelled = replace(HEADLESS, labels={"a": "1", "b": "2", "c": "3"})
        worker = RawWorker(coordinator, "labelled")
        details = _refused_hello(worker, worker_pb2.Hello(advertisement=labelled.to_proto()))
        worker.close()
        assert details == "hello limit max_entries=2: advertisement.labels has 3 entries"
        fine = RawWorker(coordinator, "fine")
        fine.connect(replace(HEADLESS, labels={"a": "1", "b": "2"}))
        fine.close()
    finally:
        coordinator.stop()


def test_a_receipt_past_its_bounds_is_refused_naming_the_limit_and_the_run_goes_on(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    worker = raw("sloppy")
    worker.connect()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": False,
          "route": {"worker": worker.worker_id}}],
    )  # fmt: skip
    run_id = submit(coordinator, plan)["id"]
    d = worker.expect("dispatch").dispatch
    for changes, said in [
        ({"status": "succeeded\x1b[2J"}, "status: one of cancelled, failed, refused, succeeded"),
        ({"error": "e" * 20_000}, "error: at most 8000 characters (got 20000)"),
        ({"traceparent": "00-" + "1" * 70_000}, "traceparent: at most 64 characters"),
        (
            {"artifacts": [worker_pb2.ReceiptArtifact(sha256="f" * 64, media_type="m" * 70_000)]},
            "artifacts[0].media_type: at most 64 characters (got 70000)",
        ),
    ]:
        worker.send(receipt=_receipt(d, '{"echo": 1}', **changes))
        ack = worker.expect("receipt_ack").receipt_ack
        assert (ack.action_id, ack.attempt_id, ack.accepted) == (d.action_id, d.attempt_id, False)
        assert ack.reason.startswith(said), ack.reason
    # Ids no row could have are answered without the store, cut to the id's length.
    worker.send(receipt=_receipt(d, "{}", action_id="a" * 100_000, run_id="r"))
    ack = worker.expect("receipt_ack").receipt_ack
    assert (ack.action_id, ack.accepted) == ("a" * 64, False)
    assert ack.reason == "action_id: 1 to 64 characters (got 100000)"
    assert wait_run(coordinator, run_id, lambda r: True)["status"] == "RUNNING"
    assert not [e for e in journal(coordinator, run_id) if e["kind"].startswith("receipt")]
    # Junk starts and peek answers are dropped: the stream goes on.
    worker.send(started=worker_pb2.ActionStarted(action_id="a" * 100_000, attempt_id="t"))
    worker.send(peek_result=worker_pb2.PeekResult(peek_id="p" * 100_000, error="e" * 100_000))
    worker.send(receipt=_receipt(d, '{"echo": 1}'))
    assert worker.expect("receipt_ack").receipt_ack.accepted
    assert wait_run(coordinator, run_id, lambda r: r["status"] == "SUCCEEDED")


# ------------------------------------------------------------------- forms that held before

RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def test_a_capability_the_token_did_not_grant_is_not_offered_whatever_the_hello_says(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    worker = raw("boaster", capabilities=("headless",))
    worker.connect(
        replace(
            HEADLESS,
            displays=(Display(0, 0, 0, 1280, 800),),
            capabilities=(Capability("headless", True), Capability("computer_use", True)),
        )
    )
    row = _row(coordinator, worker.worker_id)
    [cu] = [c for c in row["capabilities"] if c["name"] == "computer_use"]
    assert (cu["available"], cu["reason"]) == (False, "not granted by the enrollment token")
    done = coordinator.cli(
        "desktop", "request", "--worker", worker.worker_id, "--action=screenshot", check=False
    )
    assert done.returncode != 0 and "was not enrolled for computer_use" in done.stderr
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True,
          "route": {"worker": worker.worker_id, "capability": "computer_use"}}],
    )  # fmt: skip
    run = submit(coordinator, plan)
    assert run["status"] == "WAITING_FOR_ENVIRONMENT", run
    with pytest.raises(TimeoutError):
        worker.expect("dispatch", timeout=2)
    coordinator.cli("runs", "cancel", run["id"])


def test_control_characters_a_worker_advertises_are_spelled_out_wherever_they_are_shown(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker]
) -> None:
    os_text = "Linux\x1b[2J\x1b[1;1Hfine\u202e"
    worker = raw("shouter")
    worker.connect(
        replace(
            HEADLESS,
            hostname="host\x1b]0;owned\x07",
            os=os_text,
            versions={"deskfleet": "1.0\r\x1b[1Aapproved", "py\x9b31m": "3"},
            capabilities=(
                Capability("headless", False, "no browser\r\x1b[2Kall good\u202e"),
                Capability("computer_use", False, "\x1b[8mhidden"),
            ),
            research_apps=("notes\x1b[0m",),
        )
    )
    shown = {
        "status": coordinator.cli("status").stdout,
        "workers list": coordinator.cli("workers", "list").stdout,
        "workers show": coordinator.cli("workers", "show", worker.worker_id).stdout,
        "top": coordinator.cli("top", "--once").stdout,
    }
    for where, text in shown.items():
        assert not [c for c in RAW if c in text], (where, text)
    assert "Linux\\x1b[2J\\x1b[1;1Hfine\\u202e" in shown["workers show"]
    assert "no browser\\r\\x1b[2Kall good\\u202e" in shown["workers show"]
    # --json is the exact text, its control characters as JSON escapes.
    assert coordinator.cli_json("workers", "show", worker.worker_id)["os"] == os_text


def test_heartbeats_whose_answers_are_never_read_leave_the_coordinator_responsive(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker]
) -> None:
    assert coordinator.proc is not None
    process = psutil.Process(coordinator.proc.pid)
    before = process.memory_info().rss
    worker = raw("chatty")
    # A worker from before stream liveness: each heartbeat is answered, and it reads none.
    hello = worker_pb2.Hello(advertisement=HEADLESS.to_proto(), stream_liveness=False)
    worker.open(hello, read=False)
    beats = 150_000
    for seq in range(beats):
        worker.send(heartbeat=worker_pb2.Heartbeat(seq=seq))
    # The coordinator reads them for several seconds (about 10 here), queueing the answers.
    slowest, until = 0.0, time.monotonic() + 6
    while time.monotonic() < until or not worker.all_sent():
        started = time.monotonic()
        coordinator.status()
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.2)
    assert slowest < 2.0, f"a status call took {slowest:.1f} s during the flood"
    grown = process.memory_info().rss - before
    assert grown < 200 * 1024 * 1024, f"the coordinator grew by {grown >> 20} MiB"
    # Nothing was lost or cut off: once it reads again, every answer is there, in order.
    worker.read_from_now()
    worker.expect("welcome")
    for seq in range(beats):
        assert worker.expect("heartbeat_ack").heartbeat_ack.seq == seq
    assert worker.error is None


def test_large_junk_receipts_are_refused_and_cost_the_store_nothing(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker]
) -> None:
    worker = raw("junk")
    worker.connect()
    before = _store_bytes(coordinator)
    body = '"' + "j" * (12 * 1024 * 1024 - 64) + '"'  # 12 MiB, under the 16 MiB message limit
    for i in range(30):
        worker.send(
            receipt=worker_pb2.Receipt(
                action_id=f"act_junk{i}", run_id="run_junk", attempt_id="att", epoch=1,
                status="succeeded", result_json=body,
            )
        )  # fmt: skip
    acks = [worker.expect("receipt_ack", timeout=120).receipt_ack for _ in range(30)]
    assert {(a.accepted, a.reason) for a in acks} == {(False, "unknown action")}
    assert sorted(a.action_id for a in acks) == sorted(f"act_junk{i}" for i in range(30))
    assert _store_bytes(coordinator) - before < 1024 * 1024
    assert coordinator.status()["workers"] is not None  # still answering


def test_idle_connections_are_closed_by_the_coordinator(coordinator: CoordinatorProcess) -> None:
    """Sockets that never finish a call (nothing sent, or only the HTTP/2 preface) are closed
    by the keepalive (`server.server_options`): a ping every heartbeat interval, and the end
    once one is unanswered for max(5 s, lease - heartbeat). At the defaults (5 s, 15 s) that
    is 15 s; this coordinator's (0.3 s, 1.5 s) about 6 s."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    sockets = [socket.create_connection(("127.0.0.1", coordinator.port)) for _ in range(20)]
    for s in sockets[10:]:
        s.sendall(preface)
    bound = max(coordinator.lease, coordinator.heartbeat + 5) + 5
    started = time.monotonic()
    try:
        for s in sockets:
            s.settimeout(max(bound - (time.monotonic() - started), 0.1))
            while s.recv(65536):  # the server's settings and GOAWAY, then the end
                pass
    finally:
        for s in sockets:
            s.close()
    assert time.monotonic() - started < bound


def _engage_until_in(
    coordinator: CoordinatorProcess, give_up: float, every: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Try `kill engage` until it is taken or `give_up` seconds pass: the last try, and how
    long it took to get in."""
    started = time.monotonic()
    while True:
        done = coordinator.cli("kill", "engage", "--reason", "drill", check=False)
        if done.returncode == 0 or time.monotonic() - started > give_up:
            return done, time.monotonic() - started
        time.sleep(every)


def _open_files(pid: int) -> tuple[int, int]:
    """The (soft, hard) limit of open files of a running process, as /proc shows it."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open files line")


def test_sockets_past_the_descriptors_left_are_refused_and_the_kill_switch_still_gets_in(
    tmp_path: Path,
) -> None:
    """600 sockets that never start a handshake against a coordinator allowed 256 files: gRPC
    logged "File descriptor limit reached" every second and `kill engage` was refused for 11 s
    (and as long as someone kept opening more). Now the connections past what the descriptors
    allow (less a reserve for the store) are refused at accept, those that do not finish a
    handshake in --handshake-timeout are closed, and the switch gets in right after."""
    coordinator = CoordinatorProcess(tmp_path / "c", serve_args=("--handshake-timeout", "1"))
    coordinator.start(open_files=(256, 256))
    sockets: list[socket.socket] = []
    try:
        for _ in range(600):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", coordinator.port))
            sockets.append(s)
        time.sleep(0.5)
        done, took = _engage_until_in(coordinator, give_up=20, every=0.2)
        assert done.returncode == 0, done.stderr
        assert took < 6, took  # a handshake timeout (1 s) and a reconnect back-off, not 11 s
        assert coordinator.proc is not None and coordinator.proc.poll() is None
        assert "File descriptor limit reached" not in coordinator.log.read_text()
        switches = coordinator.cli_json("kill", "status")["switches"]
        assert [(k["reason"], k["engaged"]) for k in switches] == [("drill", True)]
    finally:
        for s in sockets:
            s.close()
        coordinator.kill()


def test_a_low_soft_limit_of_open_files_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    """Service managers start services with a soft limit of 1,024 and a hard one far higher:
    one worker is one connection, so the coordinator takes what it is allowed at start."""
    coordinator = CoordinatorProcess(tmp_path / "c").start(open_files=(300, 4096))
    try:
        assert coordinator.proc is not None
        assert _open_files(coordinator.proc.pid) == (4096, 4096)
    finally:
        coordinator.kill()


def _frame(kind: int, flags: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + bytes(4) + payload


def test_connections_that_only_answer_pings_are_sent_away_and_free_their_slots(
    tmp_path: Path,
) -> None:
    """200 sockets that finish the HTTP/2 handshake, then answer every ping and never call:
    the handshake timeout does not apply and the keepalive is satisfied, so they held every
    slot of the cap (128 at 256 open files) and `kill engage` stayed out for as long as they
    were open (40 s tried). A connection with no call for 10 s is now sent away."""
    import selectors
    import threading

    settings, ping, ack = 4, 6, 1
    coordinator = CoordinatorProcess(tmp_path / "c", serve_args=("--handshake-timeout", "1"))
    coordinator.start(open_files=(256, 256))
    chosen = selectors.DefaultSelector()
    stop = threading.Event()
    sockets: list[socket.socket] = []

    def answer() -> None:  # acknowledge the server's settings and pings, as a live peer does
        pending: dict[socket.socket, bytes] = {}
        while not stop.is_set():
            for key, _ in chosen.select(0.1):
                s: Any = key.fileobj
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    chosen.unregister(s)
                    continue
                buf = pending.get(s, b"") + data
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    size, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                    payload, buf = buf[9 : 9 + size], buf[9 + size :]
                    if kind in (settings, ping) and not flags & ack:
                        s.sendall(_frame(kind, ack, payload if kind == ping else b""))
                pending[s] = buf

    pump = threading.Thread(target=answer, daemon=True)
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", coordinator.port))
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(settings, 0))
            sockets.append(s)
            chosen.register(s, selectors.EVENT_READ)
        pump.start()
        done, took = _engage_until_in(coordinator, give_up=30, every=0.5)
        assert done.returncode == 0, done.stderr
        assert took < 20  # the idle limit (10 s), not never
    finally:
        stop.set()
        if pump.is_alive():
            pump.join()
        for s in sockets:
            s.close()
        coordinator.kill()
