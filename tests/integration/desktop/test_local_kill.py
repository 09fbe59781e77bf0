"""A worker's own kill switch is visible to admins (30.19): the worker reports it (engaged,
since when, by which means) in its hello and on every change, the coordinator keeps it with
the worker's presence in the store, and `kill status`, `status`, `workers show`, `top` and the
console's kill and worker pages show it. Before, all of them said nothing was engaged while the
worker refused every input.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import grpc
import pytest

from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import fleet_pb2, worker_pb2, worker_pb2_grpc
from shared.local_kill import MAX_REASON, LocalKill
from tests.conftest import require
from tests.harness import (
    BIN,
    ConsoleProcess,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    wait_until,
)

# slow: workers started and signalled per test; CI runs it
pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def worker(coordinator: CoordinatorProcess, tmp_path: Path) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(coordinator, f"desk-{uuid.uuid4().hex[:6]}", home=tmp_path, browser=False)
    proc.start().wait_online()
    yield proc
    proc.stop()


def local_kill(
    worker: WorkerProcess, *args: str, reason: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "deskfleet-worker"), "kill", *args, "--state-dir", str(worker.state_dir)]
    if reason is not None:
        argv += ["--reason", reason]
    return subprocess.run(argv, capture_output=True, text=True, env=worker.env(), timeout=30)


def reported(coordinator: CoordinatorProcess, worker_id: str) -> dict[str, Any] | None:
    """The worker's own switch in `kill status --json`, or None when it is not listed."""
    doc = coordinator.cli_json("kill", "status")
    return next((k for k in doc["local"] if k["workerId"] == worker_id), None)


def wait_reported(coordinator: CoordinatorProcess, worker_id: str, engaged: bool) -> Any:
    def seen() -> Any:
        found = reported(coordinator, worker_id)
        return (found or True) if (found is not None) == engaged else None

    return wait_until(seen, 15, 0.1, f"kill status showing {worker_id}'s own switch {engaged}")


def epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_the_workers_own_switch_shows_in_every_admin_view_and_goes_when_released(
    coordinator: CoordinatorProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    wid = worker.worker_id
    assert reported(coordinator, wid) is None
    before = time.time()
    done = local_kill(worker, "engage", reason="a person took the machine")
    assert done.returncode == 0, done.stderr
    assert "the coordinator is told" in done.stdout
    entry = wait_reported(coordinator, wid, True)
    assert entry["workerName"] == worker.name
    state = entry["state"]
    assert (state["engaged"], state["means"], state["reason"]) == (
        True,
        "command",
        "a person took the machine",
    )
    assert before - 1 <= epoch(state["since"]) <= time.time() + 1
    assert coordinator.cli_json("kill", "status")["localCount"] >= 1

    # kill status, as a person reads it
    text = coordinator.cli("kill", "status").stdout
    assert "engaged on the workers themselves" in text and wid in text
    assert "a person took the machine" in text and "no kill switch is engaged" not in text
    # status and workers show
    row = next(w for w in coordinator.cli_json("status")["workers"] if w["id"] == wid)
    assert row["localKill"]["engaged"] is True and row["localKill"]["means"] == "command"
    table = coordinator.cli("status").stdout
    assert "LOCAL KILL" in table and "engaged by command" in table
    assert re.search(rf"local kill switch engaged on \d+ worker\(s\) of this page: .*{wid}", table)
    shown = coordinator.cli("workers", "show", wid).stdout
    assert re.search(r"local kill:\s+engaged by command since .*: a person took the machine", shown)
    assert coordinator.cli_json("workers", "show", wid)["localKill"]["reason"] == (
        "a person took the machine"
    )
    # top
    top = coordinator.cli_json("top")
    assert top["killSwitchEngaged"] is True
    assert wid in [k["workerId"] for k in top["localKillSwitches"]]
    assert next(w for w in top["workers"] if w["id"] == wid)["localKill"]["engaged"] is True
    frame = coordinator.cli("top", "--once").stdout
    assert f"worker {wid} locally (by command): a person took the machine" in frame

    # A second engage keeps the first one's time and reason.
    again = local_kill(worker, "engage", reason="another reason")
    assert "already engaged" in again.stdout and "a person took the machine" in again.stdout

    assert local_kill(worker, "release").returncode == 0
    wait_reported(coordinator, wid, False)
    row = next(w for w in coordinator.cli_json("status")["workers"] if w["id"] == wid)
    assert "localKill" not in row
    assert "local kill:    released" in coordinator.cli("workers", "show", wid).stdout

    # SIGUSR1 engages it too, and says so.
    worker.signal(signal.SIGUSR1)
    entry = wait_reported(coordinator, wid, True)
    assert (entry["state"]["means"], entry["state"]["reason"]) == ("signal", "engaged by SIGUSR1")
    assert local_kill(worker, "release").returncode == 0
    wait_reported(coordinator, wid, False)


def test_a_switch_engaged_while_the_worker_was_stopped_is_in_its_hello(
    coordinator: CoordinatorProcess, worker: WorkerProcess
) -> None:
    """Reported at connect, with its own time: a restart neither hides nor renews it."""
    worker.stop()
    # A file a person put there (not written by the worker) engages it as well.
    (worker.state_dir / "KILL").write_text("hands off\n")
    worker.start().wait_online()
    entry = reported(coordinator, worker.worker_id)
    assert entry is not None, "the hello did not carry the local switch"
    assert (entry["state"]["means"], entry["state"]["reason"]) == ("file", "hands off")
    since = entry["state"]["since"]
    worker.stop()
    worker.start().wait_online()
    again = reported(coordinator, worker.worker_id)
    assert again is not None and again["state"]["since"] == since
    assert local_kill(worker, "release").returncode == 0
    wait_reported(coordinator, worker.worker_id, False)


@pytest.fixture
def desk(coordinator: CoordinatorProcess, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A worker with a display: a desktop request of a connected worker without one is refused."""
    require(Xvfb.available(), "Xvfb and xauth are not installed")
    screen = Xvfb(tmp_path / "x").start()
    proc = WorkerProcess(
        coordinator,
        f"desk-{uuid.uuid4().hex[:6]}",
        home=tmp_path,
        browser=False,
        display_env=screen.env,
    )
    try:
        proc.start().wait_online()
        yield proc
    finally:
        proc.stop()
        screen.stop()


def test_an_owner_sees_the_local_switches_of_workers_their_runs_asked_to_control_only(
    coordinator: CoordinatorProcess, desk: WorkerProcess, tmp_path: Path
) -> None:
    worker = desk
    assert local_kill(worker, "engage", reason="at the desk").returncode == 0
    wait_reported(coordinator, worker.worker_id, True)
    token = coordinator.cli_json("users", "create", f"ola-{uuid.uuid4().hex[:8]}")["token"]
    token_file = tmp_path / "ola.token"
    token_file.write_text(token)
    doc = coordinator.cli_json("kill", "status", token_file=token_file)
    assert (doc["local"], doc["localCount"]) == ([], 0)
    # Once one of the owner's runs asked for that desktop, the owner sees what stops it.
    coordinator.cli(
        "desktop",
        "request",
        "--worker",
        worker.worker_id,
        "--action",
        "screenshot",
        token_file=token_file,
    )
    doc = coordinator.cli_json("kill", "status", token_file=token_file)
    assert [k["workerId"] for k in doc["local"]] == [worker.worker_id]
    assert local_kill(worker, "release").returncode == 0


def _sign_in(console: ConsoleProcess, token: str) -> urllib.request.OpenerDirector:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = opener.open(f"{console.url}/signin", timeout=10).read().decode()
    pre = re.search(r'name="pre" value="([^"]+)"', form)
    assert pre is not None
    body = urllib.parse.urlencode({"pre": pre.group(1), "next": "/fleet", "token": token})
    request = urllib.request.Request(
        f"{console.url}/signin", data=body.encode(), headers={"Origin": console.url}
    )
    opener.open(request, timeout=10).read()
    return opener


def test_the_consoles_kill_and_worker_pages_show_the_local_switch(
    coordinator: CoordinatorProcess, worker: WorkerProcess
) -> None:
    assert local_kill(worker, "engage", reason="<b>lunch</b> break").returncode == 0
    wait_reported(coordinator, worker.worker_id, True)
    console = ConsoleProcess(coordinator).start()
    try:
        browser = _sign_in(console, coordinator.admin_token_file.read_text().strip())
        kill = browser.open(f"{console.url}/kill", timeout=10).read().decode()
        row = re.search(rf'<tr data-local-kill="{worker.worker_id}">(.*?)</tr>', kill, re.S)
        assert row is not None, kill
        assert "command" in row.group(1) and "&lt;b&gt;lunch&lt;/b&gt; break" in row.group(1)
        assert "Engaged on the workers themselves: " in kill
        page = browser.open(f"{console.url}/workers/{worker.worker_id}", timeout=10).read()
        facts = re.search(r'<dd class="local-kill">(.*?)</dd>', page.decode(), re.S)
        assert facts is not None and "engaged" in facts.group(1) and "by command" in facts.group(1)
    finally:
        console.stop()
        local_kill(worker, "release")


def test_what_a_worker_says_of_its_switch_is_bounded(coordinator: CoordinatorProcess) -> None:
    """A hostile worker's report is checked like any field: INVALID_ARGUMENT naming it."""
    proc = WorkerProcess(coordinator, f"liar-{uuid.uuid4().hex[:6]}", browser=False)
    assert proc.enroll().returncode == 0
    credential = (proc.state_dir / "credential").read_text().strip()
    now = fleet_pb2.LocalKill(engaged=True, means="command", reason="ok")
    now.since.FromSeconds(int(time.time()))
    bad = {
        "hello.local_kill.means": fleet_pb2.LocalKill(
            engaged=True, since=now.since, means="telepathy"
        ),
        "hello.local_kill.reason": fleet_pb2.LocalKill(
            engaged=True, since=now.since, means="command", reason="x" * (MAX_REASON + 1)
        ),
        "hello.local_kill.since": fleet_pb2.LocalKill(engaged=True, means="command"),
    }
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = worker_pb2_grpc.WorkerGatewayStub(channel)
        for field, state in bad.items():
            hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(local_kill=state))
            call = stub.Connect(iter([hello]), metadata=auth_metadata(credential))
            with pytest.raises(grpc.RpcError) as caught:
                list(call)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert field in (caught.value.details() or ""), caught.value.details()
        escape = fleet_pb2.LocalKill(
            engaged=True, since=now.since, means="command", reason="a\x1b[2Jb"
        )
        hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello())
        later = worker_pb2.WorkerMessage(local_kill=escape)
        call = stub.Connect(iter([hello, later]), metadata=auth_metadata(credential))
        with pytest.raises(grpc.RpcError) as caught:
            list(call)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "local_kill.reason" in (caught.value.details() or "")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    from coordinator.store.engine import create_store_engine
    from coordinator.store.models import Base

    url = (
        f"sqlite:///{tmp_path / 'store.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    made = create_store_engine(url, immediate=False, pool_size=1)
    Base.metadata.create_all(made)
    yield made
    made.dispose()


def test_the_store_keeps_each_streams_report_and_lists_the_engaged_ones(engine: Any) -> None:
    """On SQLite and PostgreSQL: the hello's state goes in with the presence row, a later
    report changes only that stream's row, and the listing is exact and newest first."""
    from sqlalchemy.orm import Session

    from coordinator.store import workers as queries
    from coordinator.store.models import ReplicaRow, WorkerRow

    now = 1_800_000_000.0
    with Session(engine) as s, s.begin():
        s.add(
            ReplicaRow(
                name="a", address="x", started_at=now, seen_at=now, lease_expires_at=now + 60
            )
        )
        for i in range(3):
            s.add(
                WorkerRow(
                    id=f"w{i}",
                    name=f"desk {i}",
                    secret_hash=f"h{i}",
                    state="active",
                    labels={},
                    allowed_capabilities=[],
                    advertisement={},
                    enrolled_at=now,
                    revoked_at=None,
                    enrollment_token_id="t",
                )
            )
        s.flush()
        claims = [
            queries.PresenceClaim(
                f"w{i}",
                f"ses{i}",
                {},
                frozenset(),
                LocalKill(True, now - i, "hotkey", f"reason {i}") if i < 2 else LocalKill(),
            )
            for i in range(3)
        ]
        queries.claim_presences(s, claims, "a", now, 15.0)
    with Session(engine) as s:
        count, rows = queries.local_kills(s, now, 10)
        assert count == 2 and [r.worker_id for r in rows] == ["w0", "w1"]
        assert rows[0].worker_name == "desk 0" and rows[0].state == LocalKill(
            True, now, "hotkey", "reason 0"
        )
        assert queries.local_kills(s, now, 1)[0] == 2  # the count is exact whatever the page
    with Session(engine) as s, s.begin():
        queries.set_local_kills(
            s,
            [
                ("w0", "ses0", LocalKill()),  # released
                ("w2", "ses2", LocalKill(True, now + 5, "command", "late")),
                ("w1", "old-session", LocalKill()),  # a superseded stream's report: no effect
            ],
        )
    with Session(engine) as s:
        count, rows = queries.local_kills(s, now, 10)
        assert [(r.worker_id, r.state.means) for r in rows] == [("w2", "command"), ("w1", "hotkey")]
        # A replica whose lease lapsed holds no one online: nothing listed.
        assert queries.local_kills(s, now + 120, 10) == (0, [])
