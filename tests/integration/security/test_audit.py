"""The audit log: every administrative act, with who, when and from where; never a secret."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test reads the audit from its own start on
    (`_since`), with users of its own (`_fresh`) and workers in its own directory."""
    return module_coordinator


def _audit(coordinator: CoordinatorProcess, *args: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = coordinator.cli_json("audit", *args)["entries"]
    return entries


def _since(started: float) -> str:
    """`--since` for the moment a test started: the acts of earlier tests are before it."""
    return datetime.fromtimestamp(started, UTC).isoformat()


def _fresh(name: str) -> str:
    """A user name no other test of the shared coordinator has taken."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _pending(coordinator: CoordinatorProcess, run_id: str) -> str:
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run_id]
    approval_id: str = mine["id"]
    return approval_id


def test_each_admin_act_is_audited_with_who_when_and_from_where(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    started = time.time()
    token = coordinator.cli_json("tokens", "create", "--uses", "2")
    bob_name = _fresh("bob")
    bob = coordinator.cli_json("users", "create", bob_name)
    worker = WorkerProcess(coordinator, "w", home=tmp_path)
    assert worker.enroll(token["token"]).returncode == 0
    wid = worker.worker_id
    coordinator.cli("workers", "drain", wid)
    coordinator.cli("workers", "undrain", wid)

    def desktop_run() -> str:
        doc = coordinator.cli_json(
            "desktop", "request", "--worker", wid, "--reason", "look", "--action=screenshot"
        )
        run_id: str = doc["id"]
        return run_id

    approved, denied = desktop_run(), desktop_run()
    approval = _pending(coordinator, approved)
    coordinator.cli("approvals", "approve", approval)
    refusal = _pending(coordinator, denied)
    coordinator.cli("approvals", "deny", refusal, "--reason", "not now")
    kill = coordinator.cli_json("kill", "engage", "--worker", wid, "--reason", "audit test")
    coordinator.cli("kill", "release", "--worker", wid, "--reason", "over")
    secret = "hunter2-do-not-log"
    coordinator.cli("secrets", "set", "PIN", input_text=secret + "\n")
    coordinator.cli("workers", "revoke", wid)

    since = _since(started)
    entries = _audit(coordinator, "--since", since)
    assert [(e["action"], e["target"]) for e in entries] == [
        ("token.create", token["id"]),
        ("user.create", bob["id"]),
        ("worker.drain", wid),
        ("worker.undrain", wid),
        ("approval.approve", approval),
        ("approval.deny", refusal),
        ("kill.engage", kill["id"]),
        ("kill.release", kill["id"]),
        ("secret.set", entries[8]["target"]),
        ("worker.revoke", wid),
    ]
    admin = coordinator.cli_json("whoami")
    for entry in entries:
        assert (entry["actorId"], entry["actorName"], entry["actorRole"]) == (
            admin["id"],
            admin["name"],
            "admin",
        )
        assert entry["peer"].startswith("ipv4:127.0.0.1:"), entry
        assert started - 1 <= entry["at"] <= time.time() + 1
    assert [int(e["seq"]) for e in entries] == sorted(int(e["seq"]) for e in entries)
    assert entries[0]["detail"]["uses"] == 2
    assert entries[1]["detail"] == {"name": bob_name, "role": "owner"}
    assert entries[5]["detail"]["reason"] == "not now"
    assert entries[6]["detail"] == {"scope": "worker", "target": wid, "reason": "audit test"}
    assert entries[8]["target"].endswith("/PIN")
    assert secret not in coordinator.cli("audit", "--json").stdout  # a name, never the value

    # Filters and the table (earlier tests' acts come first in the last hour).
    assert _audit(coordinator, "--since", "1h")[-len(entries) :] == entries
    assert _audit(coordinator, "--since", "2999-01-01T00:00:00") == []
    doc = coordinator.cli_json("audit", "--since", since, "--limit", "3")
    assert [e["seq"] for e in doc["entries"]] == [e["seq"] for e in entries[:3]]
    assert doc["more"] is True
    table = coordinator.cli("audit", "--since", since).stdout
    assert table.splitlines()[0].split() == ["TIME", "WHO", "FROM", "ACTION", "TARGET", "DETAIL"]
    assert "worker.revoke" in table


def test_only_admins_read_the_audit_and_bad_filters_are_refused(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    owner_token = tmp_path / "owner.token"
    owner_token.write_text(coordinator.cli_json("users", "create", _fresh("olga"))["token"])
    denied = coordinator.cli("audit", token_file=owner_token, check=False)
    assert denied.returncode == 3
    assert denied.stderr.startswith(
        "deskfleet: ListAudit needs an admin credential; this one is an owner credential"
    )
    bad = coordinator.cli("audit", "--since", "last tuesday", check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "deskfleet: --since: 'last tuesday' is neither a duration (10m, 1h, 2d)"
        " nor an ISO 8601 time"
    )
    too_many = coordinator.cli("audit", "--limit", "100000", check=False)
    assert too_many.returncode == 2
    assert too_many.stderr.strip() == "deskfleet: limit: between 1 and 10000"


def test_user_tokens_rotate_and_the_old_one_stops_working(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    started = time.time()
    olga, oscar = _fresh("olga"), _fresh("oscar")
    old = tmp_path / "olga.token"
    old.write_text(coordinator.cli_json("users", "create", olga)["token"])
    other = tmp_path / "oscar.token"
    other.write_text(coordinator.cli_json("users", "create", oscar)["token"])
    # An owner rotates their own token, saving it where their CLI reads it.
    saved = tmp_path / "olga.new"
    done = coordinator.cli("users", "rotate", "--save", str(saved), token_file=old)
    assert f"saved to {saved}" in done.stdout and "dfu_" not in done.stdout
    assert saved.stat().st_mode & 0o777 == 0o600
    refused = coordinator.cli("whoami", token_file=old, check=False)
    assert (refused.returncode, refused.stderr) == (3, "deskfleet: unknown credential\n")
    assert coordinator.cli_json("whoami", token_file=saved)["name"] == olga
    # Another user's token is not an owner's to rotate; nor is their existence revealed.
    foreign = coordinator.cli("users", "rotate", oscar, token_file=saved, check=False)
    assert (foreign.returncode, foreign.stderr) == (4, f"deskfleet: no user {oscar!r}\n")
    assert coordinator.cli_json("whoami", token_file=other)["name"] == oscar
    # An admin rotates anyone's.
    rotated = coordinator.cli_json("users", "rotate", oscar)
    assert rotated["name"] == oscar and rotated["token"].startswith("dfu_")
    assert coordinator.cli("whoami", token_file=other, check=False).returncode == 3
    entries = _audit(coordinator, "--since", _since(started))
    actions = [(e["action"], e["detail"]["name"]) for e in entries]
    assert actions[-2:] == [("user.rotate", olga), ("user.rotate", oscar)]


def _whoami_code(coordinator: CoordinatorProcess, credential: str) -> grpc.StatusCode:
    with grpc.insecure_channel(coordinator.address) as channel:
        try:
            admin_pb2_grpc.AdminServiceStub(channel).WhoAmI(
                admin_pb2.WhoAmIRequest(), metadata=auth_metadata(credential), timeout=10
            )
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined,no-any-return]
    return grpc.StatusCode.OK


def test_rotating_an_offline_worker_needs_the_flag_that_says_so(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    since = _since(time.time())
    worker = WorkerProcess(coordinator, "w", home=tmp_path)
    assert worker.enroll().returncode == 0
    file = worker.state_dir / "credential"
    first = file.read_text().strip()
    refused = coordinator.cli("workers", "rotate", worker.worker_id, check=False)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(f"deskfleet: worker {worker.worker_id} is not connected:")
    assert "revoke the worker and enroll it again" in refused.stderr
    assert refused.stderr.strip().endswith("to rotate anyway, use --while-offline")
    # The refusal asked nothing of the worker: it connects and keeps its credential.
    try:
        worker.start().wait_online()
        time.sleep(1.5)
        assert file.read_text().strip() == first
        assert _whoami_code(coordinator, first) == grpc.StatusCode.OK
    finally:
        worker.stop()
    assert [e["action"] for e in _audit(coordinator, "--since", since)] == ["token.create"]
    # Said so, it is asked in the worker's next welcome (and the audit entry says how).
    wait_until(lambda: not worker.row()["online"], 20, 0.1, "the worker offline")
    done = coordinator.cli("workers", "rotate", "--while-offline", worker.worker_id)
    assert "will be given a new credential when it next connects" in done.stdout
    entry = _audit(coordinator, "--since", since)[-1]
    assert (entry["action"], entry["detail"]["while_offline"]) == ("worker.rotate", True)


def test_a_worker_credential_rotates_online_and_when_it_next_connects(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    since = _since(time.time())
    worker = WorkerProcess(coordinator, "w", home=tmp_path).start()
    try:
        worker.wait_online()
        file = worker.state_dir / "credential"
        first = file.read_text().strip()
        done = coordinator.cli("workers", "rotate", worker.worker_id)
        assert "asked for a new credential" in done.stdout
        second = wait_until(
            lambda: (c := file.read_text().strip()) != first and c, 30, 0.1, "a new credential"
        )
        assert file.stat().st_mode & 0o777 == 0o600
        worker.wait_online()
        # The worker reconnected with the new credential, which retired the old one.
        wait_until(
            lambda: _whoami_code(coordinator, first) == grpc.StatusCode.UNAUTHENTICATED,
            10,
            0.2,
            "the old credential refused",
        )
        assert _whoami_code(coordinator, second) == grpc.StatusCode.OK

        # Offline, and said so: the request waits for the worker's next welcome.
        worker.stop()
        coordinator.cli("workers", "rotate", "--while-offline", worker.worker_id)
        assert file.read_text().strip() == second
        worker.start()
        third = wait_until(
            lambda: (c := file.read_text().strip()) != second and c, 30, 0.1, "a third credential"
        )
        worker.wait_online()
        time.sleep(1.0)
        assert file.read_text().strip() == third  # asked once, rotated once
        assert _whoami_code(coordinator, third) == grpc.StatusCode.OK
    finally:
        worker.stop()
    entries = [(e["action"], e["actorRole"]) for e in _audit(coordinator, "--since", since)]
    assert entries == [
        ("token.create", "admin"),
        ("worker.rotate", "admin"),
        ("worker.credential_rotated", "worker"),
        ("worker.rotate", "admin"),
        ("worker.credential_rotated", "worker"),
    ]
