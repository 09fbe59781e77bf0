"""Enrollment tokens: expiry, use counts, wrong kinds of secret, private credential files."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test enrolls its own workers with its own tokens."""
    return module_coordinator


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_enrollment_saves_a_private_credential_stored_only_hashed(
    coordinator: CoordinatorProcess,
) -> None:
    worker = WorkerProcess(coordinator, "w")
    done = worker.enroll(coordinator.create_token(), "site=lab", "gpu=none")
    assert done.returncode == 0, done.stderr
    assert f"enrolled as {worker.worker_id}" in done.stdout
    credential = (worker.state_dir / "credential").read_text().strip()
    assert _mode(worker.state_dir / "credential") == 0o600
    assert _mode(coordinator.admin_token_file) == 0o600
    assert credential.startswith(f"dfw_{worker.worker_id}.")
    # The coordinator's store never holds the secret itself.
    assert credential.encode() not in (coordinator.workdir / "fleet.db").read_bytes()
    identity = json.loads((worker.state_dir / "worker.json").read_text())
    assert identity["labels"] == {"site": "lab", "gpu": "none"}
    shown = coordinator.cli_json("workers", "show", worker.worker_id)
    assert shown["labels"] == {"site": "lab", "gpu": "none"} and shown["online"] is False


def test_a_token_is_single_use_by_default(coordinator: CoordinatorProcess) -> None:
    token = coordinator.create_token()
    assert WorkerProcess(coordinator, "a").enroll(token).returncode == 0
    second = WorkerProcess(coordinator, "b").enroll(token)
    assert second.returncode == 3
    assert "has been used up (1 of 1 uses)" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert not (coordinator.workdir / "worker-b" / "credential").exists()


def test_a_token_with_uses_enrolls_that_many(coordinator: CoordinatorProcess) -> None:
    token = coordinator.create_token("--uses", "2")
    results = [WorkerProcess(coordinator, f"w{i}").enroll(token).returncode for i in range(3)]
    assert results == [0, 0, 3]


def test_an_expired_token_is_refused_with_a_clear_message(coordinator: CoordinatorProcess) -> None:
    token = coordinator.create_token("--ttl", "1s")
    time.sleep(1.2)
    done = WorkerProcess(coordinator, "late").enroll(token)
    assert done.returncode == 3
    assert "expired at" in done.stderr and "ask an admin for a new one" in done.stderr
    assert "Traceback" not in done.stderr


def test_other_secrets_are_not_enrollment_tokens(coordinator: CoordinatorProcess) -> None:
    admin = coordinator.admin_token_file.read_text().strip()
    done = WorkerProcess(coordinator, "x").enroll(admin)
    assert done.returncode == 3 and "not an enrollment token" in done.stderr
    forged = WorkerProcess(coordinator, "y").enroll("dfe_enr_0000.forged")
    assert forged.returncode == 3 and "unknown enrollment token" in forged.stderr


def test_enrolling_twice_into_one_state_dir_is_refused(coordinator: CoordinatorProcess) -> None:
    worker = WorkerProcess(coordinator, "once")
    assert worker.enroll().returncode == 0
    again = worker.enroll()
    assert again.returncode == 1 and "already holds an enrolled worker" in again.stderr


def test_enroll_tries_each_coordinator_address(coordinator: CoordinatorProcess) -> None:
    worker = WorkerProcess(coordinator, "multi")
    done = worker.enroll(None, coordinators=f"127.0.0.1:1,{coordinator.address}")
    assert done.returncode == 0, done.stderr
    identity = json.loads((worker.state_dir / "worker.json").read_text())
    assert identity["coordinators"] == ["127.0.0.1:1", coordinator.address]


def test_enroll_against_no_coordinator_fails_in_one_line(coordinator: CoordinatorProcess) -> None:
    done = WorkerProcess(coordinator, "lost").enroll("dfe_x.y", coordinators="127.0.0.1:1")
    assert done.returncode == 1
    assert done.stderr.startswith("deskfleet-worker: cannot reach the coordinator at 127.0.0.1:1")
    assert len(done.stderr.strip().splitlines()) == 1


def test_bad_token_options_are_refused(coordinator: CoordinatorProcess) -> None:
    bad_ttl = coordinator.cli("tokens", "create", "--ttl", "soon", check=False)
    assert bad_ttl.returncode == 2 and "not a duration" in bad_ttl.stderr
    bad_uses = coordinator.cli("tokens", "create", "--uses", "0", check=False)
    assert bad_uses.returncode == 2 and "--uses: must be at least 1" in bad_uses.stderr


# A label of 100 three-byte characters: 100 characters, 300 UTF-8 bytes. Enrollment counted
# characters (at most 200) and the hello bytes (at most 256): it enrolled, and every hello
# of the worker was refused while it reconnected ~1.3 times a second forever (B11).
WIDE = "€" * 100


def test_enrollment_holds_labels_to_the_hellos_limits_in_utf8_bytes(
    coordinator: CoordinatorProcess,
) -> None:
    wide = WorkerProcess(coordinator, "wide", browser=False)
    done = wide.enroll(None, f"zone={WIDE}")
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip().splitlines() == [
        "deskfleet-worker: hello limit max_text=256: labels['zone'] is 300 bytes (a worker's"
        " labels travel in every hello; the operator sets the limit: serve --hello-limit)"
    ]
    assert not (wide.state_dir / "credential").exists()
    many = WorkerProcess(coordinator, "many", browser=False).enroll(
        None, *(f"k{i}=v" for i in range(65))
    )
    assert many.returncode == 1 and "hello limit max_entries=64: labels has 65" in many.stderr
    # What the hello takes, enrollment takes: 256 bytes (more than the 200 characters it
    # allowed before), and such a worker's hello is taken.
    full = WorkerProcess(coordinator, "full", browser=False)
    assert full.enroll(None, f"zone={'z' * 256}", f"{'k' * 256}=v").returncode == 0
    try:
        full.start().wait_online()
    finally:
        full.stop()


def test_a_worker_whose_hello_is_refused_for_a_limit_stops_saying_which_and_how_to_fix_it(
    tmp_path: Path,
) -> None:
    """Enrolled while the operator allowed 512 bytes; the coordinator then serves with the
    default 256: the worker stops at once, in one line, instead of reconnecting forever."""
    coordinator = CoordinatorProcess(tmp_path / "c", serve_args=("--hello-limit", "max_text=512"))
    coordinator.start()
    worker = WorkerProcess(coordinator, "wide", browser=False)
    try:
        assert worker.enroll(None, f"zone={WIDE}").returncode == 0
        coordinator.stop()
        coordinator.serve_args = ()
        coordinator.start(port=coordinator.port)
        worker.start()
        assert worker.proc is not None
        started = time.monotonic()
        assert worker.proc.wait(30) == 3  # the credential's code: reconnecting cannot help
        assert time.monotonic() - started < 15
        worker.stop()
        log = worker.log.read_text()
        assert "Traceback" not in log and "retrying" not in log, log
        assert log.strip().splitlines()[-1] == (
            "deskfleet-worker: the coordinator refused this worker's hello: hello limit"
            " max_text=256: advertisement.labels['zone'] is 300 bytes; fix what the worker"
            " advertises (its labels are given at enrollment: deskfleet-worker enroll --label)"
            " or ask the coordinator's operator to raise the limit (deskfleet-coordinator serve"
            " --hello-limit max_text=N)"
        )
    finally:
        worker.stop()
        coordinator.stop()
