"""Names where people think in names: a worker is taken by its unique name wherever its id is
(workers show/drain/undrain/rotate/revoke, desktop request, kill engage and release), an
ambiguous name is refused listing its candidates, an unknown one in one line; and the people
behind runs, approvals and kill switches are shown by name, their ids kept in --json."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test enrolls workers of its own names."""
    return module_coordinator


def enrolled(coordinator: CoordinatorProcess, name: str, home: Path) -> str:
    """A worker enrolled under `name` (not running: naming it needs no stream)."""
    worker = WorkerProcess(coordinator, name, home=home, browser=False)
    done = worker.enroll()
    assert done.returncode == 0, done.stderr
    return worker.worker_id


def refused(coordinator: CoordinatorProcess, *args: str) -> tuple[int, str]:
    done = coordinator.cli(*args, check=False)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.returncode, done.stderr.strip()


def test_a_unique_name_is_taken_wherever_a_worker_id_is(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """`workers show desk-1` and `desktop request --worker desk-1` said "no worker 'desk-1'"."""
    wid = enrolled(coordinator, "names-desk-1", tmp_path)
    shown = coordinator.cli("workers", "show", "names-desk-1")
    assert wid in shown.stdout
    assert coordinator.cli_json("workers", "show", "names-desk-1")["id"] == wid
    assert coordinator.cli_json("workers", "drain", "names-desk-1")["state"] == "draining"
    assert coordinator.cli_json("workers", "undrain", "names-desk-1")["state"] == "active"

    # The switch is stored by the worker's id, as the worker and its acknowledgements know it.
    kill = coordinator.cli_json(
        "kill", "engage", "--worker", "names-desk-1", "--reason", "named by its name"
    )
    assert kill["target"] == wid and kill["scope"] == "worker"
    released = coordinator.cli_json("kill", "release", "--worker", "names-desk-1")
    assert [k["id"] for k in released["switches"]] == [kill["id"]]

    # A desktop request of the worker the name resolved to. It never connected, so it has
    # advertised nothing to refuse by: the request waits for approval (and for the worker).
    requested = coordinator.cli_json(
        "desktop", "request", "--worker", "names-desk-1", "--action", "screenshot",
        "--reason", "by name",
    )  # fmt: skip
    assert requested["workerId"] == wid, requested
    assert requested["status"] == "WAITING_FOR_AUTHORITY", requested

    assert coordinator.cli_json("workers", "revoke", "names-desk-1")["state"] == "revoked"
    # A revoked worker is still found by its name while no enrolled one has it.
    assert coordinator.cli_json("workers", "show", "names-desk-1")["id"] == wid


def test_an_ambiguous_name_is_refused_with_its_candidates(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    first = enrolled(coordinator, "names-twin", tmp_path / "a")
    second = enrolled(coordinator, "names-twin", tmp_path / "b")
    for args in (
        ("workers", "show", "names-twin"),
        ("workers", "drain", "names-twin"),
        ("kill", "engage", "--worker", "names-twin", "--reason", "which one?"),
        ("desktop", "request", "--worker", "names-twin", "--action", "screenshot"),
    ):
        code, message = refused(coordinator, *args)
        assert code != 0
        assert "2 workers are named 'names-twin'" in message, message
        assert first in message and second in message and "enrolled" in message
        assert "pass the id" in message
    # By its id, either one is still taken.
    assert coordinator.cli_json("workers", "show", second)["id"] == second
    # Revoking one leaves the name to the other.
    coordinator.cli("workers", "revoke", first)
    assert coordinator.cli_json("workers", "show", "names-twin")["id"] == second


def test_an_unknown_worker_is_one_line_naming_id_or_name(coordinator: CoordinatorProcess) -> None:
    for args in (
        ("workers", "show", "names-nobody"),
        ("workers", "rotate", "names-nobody"),
        ("kill", "engage", "--worker", "names-nobody", "--reason", "nobody"),
        ("desktop", "request", "--worker", "names-nobody", "--action", "screenshot"),
    ):
        code, message = refused(coordinator, *args)
        assert code != 0
        assert "no worker with id or name 'names-nobody'" in message, message


def test_kill_status_shows_who_engaged_by_name_and_json_keeps_the_id(
    coordinator: CoordinatorProcess,
) -> None:
    """`kill status` showed BY as usr_01m8…."""
    admin = next(u for u in coordinator.cli_json("users", "list") if u["role"] == "admin")
    kill = coordinator.cli_json("kill", "engage", "--reason", "names: who engaged it")
    try:
        table = coordinator.cli("kill", "status").stdout
        row = next(line for line in table.splitlines() if kill["id"] in line)
        assert f" {admin['name']} " in f" {row} " and admin["id"] not in row, row
        doc = coordinator.cli_json("kill", "status")
        mine = next(k for k in doc["switches"] if k["id"] == kill["id"])
        assert mine["engagedBy"] == admin["id"] and mine["engagedByName"] == admin["name"]
    finally:
        coordinator.cli("kill", "release", "--id", kill["id"])


def test_runs_and_approvals_carry_the_owner_name_beside_the_id(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    owner = coordinator.cli_json("users", "create", "names-owner")
    token = tmp_path / "owner.token"
    token.write_text(owner["token"])
    wid = enrolled(coordinator, "names-desk-owner", tmp_path)
    # A worker that never connected advertised nothing to refuse by: the request is taken.
    done = coordinator.cli(
        "desktop", "request", "--worker", wid, "--action", "screenshot",
        "--reason", "owner names", "--json", token_file=token, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    runs = coordinator.cli_json("runs", "list", "--owner", "names-owner")
    assert runs["runs"][0]["owner"] == owner["id"]
    assert runs["runs"][0]["ownerName"] == "names-owner"
    assert runs["runs"][0]["workerId"] == wid
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    mine = next(a for a in pending if a["workerId"] == wid)
    assert mine["owner"] == owner["id"] and mine["ownerName"] == "names-owner"
