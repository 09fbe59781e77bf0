"""Per-owner limits: runs in flight and bytes stored, on real coordinators (SQLite and
PostgreSQL), set by admins only; and the cap on one plan's size."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.admin_cli.render import as_dict
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc, runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, submit, wait_run, write_plan

EXIT_ERROR, EXIT_AUTH, EXIT_NOT_FOUND = 1, 3, 4


@pytest.fixture(params=["sqlite", "postgresql"])
def limited(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A coordinator whose owners may have 2 runs in flight and store 1 MiB."""
    db_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    limits = ("--owner-max-active-runs", "2", "--owner-max-stored-bytes", "1MiB")
    proc = CoordinatorProcess(tmp_path / "limited", db_url, serve_args=limits).start()
    yield proc
    proc.stop()


# What the test only needs done or read (users, accepted runs, limits, runs, audit) goes
# through one in-process channel; what it checks the CLI says (refusals, their exit codes and
# messages, and the limits an admin sets with it) runs `deskfleet`. A CLI process per call is
# a Python start on a loaded machine, and most calls here are not about the CLI.


def _admin(coordinator: CoordinatorProcess) -> admin_pb2_grpc.AdminServiceStub:
    channel = coordinator.channel()
    assert channel is not None
    return admin_pb2_grpc.AdminServiceStub(channel)


def _owner(coordinator: CoordinatorProcess, name: str) -> Path:
    request = admin_pb2.CreateUserRequest(name=name)
    token = _admin(coordinator).CreateUser(request, metadata=coordinator.admin_metadata()).token
    path = coordinator.workdir / f"{name}.token"
    path.write_text(token)
    return path


def _submitted(coordinator: CoordinatorProcess, token: Path, plan: Path) -> dict[str, Any]:
    """The accepted run (`runs submit --json`'s document); a refusal fails the test."""
    return submit(coordinator, plan, token_file=token)


def _submit(coordinator: CoordinatorProcess, token: Path, plan: Path) -> tuple[int, str]:
    """`deskfleet runs submit`, for a refusal: its exit code and message."""
    args = ("runs", "submit", str(plan))
    done = coordinator.cli(*args, token_file=token, json_out=True, check=False)
    return done.returncode, done.stderr


def _limits(coordinator: CoordinatorProcess, name: str = "", token: Path | None = None) -> Any:
    """`users limits [NAME] --json`'s document."""
    md = coordinator.admin_metadata(token)
    request = admin_pb2.GetUserLimitsRequest(name=name)
    answer = _admin(coordinator).GetUserLimits(request, metadata=md, timeout=30)
    return {
        "name": answer.name,
        "activeRuns": answer.active_runs,
        "storedBytes": answer.stored_bytes,
        "maxActiveRuns": answer.max_active_runs,
        "maxActiveRunsSet": answer.max_active_runs_set,
    }


def _set_limits(coordinator: CoordinatorProcess, *args: str) -> Any:
    """`deskfleet users limits ARGS`, as an admin: the CLI reads the sizes and `default`."""
    return coordinator.cli_json("users", "limits", *args)


@pytest.mark.slow
def test_owner_limits_refuse_new_runs_until_there_is_room(
    limited: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = limited
    alice = _owner(coordinator, "alice")
    as_alice, as_admin = coordinator.admin_metadata(alice), coordinator.admin_metadata()
    channel = coordinator.channel()
    assert channel is not None
    runs, admin = runs_pb2_grpc.RunServiceStub(channel), _admin(coordinator)
    small = write_plan(tmp_path / "small.json", [{"kind": "diag.echo", "args": {"value": "x"}}])
    # No worker yet: runs wait for one, in flight.
    first = _submitted(coordinator, alice, small)
    second = _submitted(coordinator, alice, small)
    code, err = _submit(coordinator, alice, small)
    assert code == EXIT_ERROR, err
    assert err.startswith("deskfleet: owner limit max_active_runs=2:"), err
    listed = runs.ListRuns(runs_pb2.ListRunsRequest(), metadata=as_alice, timeout=30)
    assert len(listed.runs) == 2  # none written
    # Another owner has room of their own.
    bob = _owner(coordinator, "bob")
    _submitted(coordinator, bob, small)

    # A finished run frees its place.
    runs.CancelRun(runs_pb2.RunRef(id=first["id"]), metadata=as_alice, timeout=30)
    third = _submitted(coordinator, alice, small)
    mine = _limits(coordinator, token=alice)
    assert (mine["name"], mine["activeRuns"], mine["maxActiveRuns"]) == ("alice", 2, 2)
    assert not mine["maxActiveRunsSet"] and mine["storedBytes"] > 0

    # Owners read their own limits only, and set none.
    denied = coordinator.cli(
        "users", "limits", "alice", "--max-active-runs", "50", token_file=alice, check=False
    )
    assert denied.returncode == EXIT_AUTH, denied.stderr
    assert "SetUserLimits needs an admin credential" in denied.stderr
    other = coordinator.cli("users", "limits", "bob", token_file=alice, check=False)
    assert other.returncode == EXIT_NOT_FOUND, other.stderr

    # An admin's override takes effect at once.
    raised = _set_limits(coordinator, "alice", "--max-active-runs", "5")
    assert (raised["maxActiveRuns"], raised["maxActiveRunsSet"]) == (5, True)
    # The byte limit (1 MiB, the default here) refuses a large plan, whole.
    big = write_plan(
        tmp_path / "big.json", [{"kind": "diag.echo", "args": {"value": "b" * 700_000}}]
    )
    large = [_submitted(coordinator, alice, big)]
    code, err = _submit(coordinator, alice, big)
    assert code == EXIT_ERROR, err
    assert err.startswith("deskfleet: owner limit max_stored_bytes=1048576:"), err
    assert "would add 7" in err  # the plan's 700,000 bytes and its journal event
    stored = _limits(coordinator, "alice")["storedBytes"]
    assert 700_000 < stored < 1_048_576  # the refused run stored nothing
    assert _set_limits(coordinator, "alice", "--max-stored-bytes", "10MiB")["maxStoredBytes"] == (
        10 * 1024 * 1024
    )
    large.append(_submitted(coordinator, alice, big))
    # Back to the default: 4 runs in flight, at most 2.
    back = _set_limits(coordinator, "alice", "--max-active-runs", "default")
    assert (back["maxActiveRuns"], back["maxActiveRunsSet"], back["activeRuns"]) == (2, False, 4)
    assert _submit(coordinator, alice, small)[0] == EXIT_ERROR
    audit = admin.ListAudit(admin_pb2.ListAuditRequest(), metadata=as_admin, timeout=30)
    acts = [e for e in as_dict(audit)["entries"] if e["action"] == "user.limits"]
    assert len(acts) == 3 and all(e["actorRole"] == "admin" for e in acts)

    # Runs a worker finishes leave the count; their receipts count as stored bytes.
    worker = WorkerProcess(coordinator, "w", browser=False).start()
    try:
        worker.wait_online()
        for run in (second, third, *large):  # all four in flight finish
            done = lambda r: r["status"] == "SUCCEEDED"  # noqa: E731
            wait_run(coordinator, run["id"], done, token_file=alice)
        after = _limits(coordinator, "alice")
        assert after["activeRuns"] == 0 and after["storedBytes"] > stored
        _submitted(coordinator, alice, small)
    finally:
        worker.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def few_secrets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A coordinator whose owners may store 3 secrets."""
    db_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    proc = CoordinatorProcess(
        tmp_path / "secrets", db_url, serve_args=("--owner-max-secrets", "3")
    ).start()
    yield proc
    proc.stop()


def test_secrets_count_toward_stored_bytes_and_are_limited_in_number(
    few_secrets: CoordinatorProcess,
) -> None:
    coordinator = few_secrets
    alice = _owner(coordinator, "alice")

    def stored() -> int:
        return int(_limits(coordinator, "alice")["storedBytes"])

    def set_secret(name: str, value: str) -> tuple[int, str]:
        done = coordinator.cli(
            "secrets", "set", name, input_text=value + "\n", token_file=alice, check=False
        )
        return done.returncode, done.stderr

    value = "v" * 10_000  # the longest a secret may be
    for name in ("A", "B", "C"):
        before = stored()
        assert set_secret(name, value) == (0, "")
        assert stored() - before > len(value)  # its sealed value and name (30.8)
    code, err = set_secret("D", "x")
    assert code == EXIT_ERROR
    assert err.startswith("deskfleet: owner limit max_secrets=3: "), err
    assert err.count("\n") == 1 and "serve --owner-max-secrets" in err
    # An admin storing one for alice meets her limit too.
    done = coordinator.cli("secrets", "set", "D", "--owner", "alice", input_text="x\n", check=False)
    assert done.returncode == EXIT_ERROR and "max_secrets=3" in done.stderr, done.stderr
    # A new value for a secret she has is no new secret; past her byte limit it is refused.
    assert set_secret("A", "short") == (0, "")
    _set_limits(coordinator, "alice", "--max-stored-bytes", str(stored() + 100))
    code, err = set_secret("A", value)
    assert code == EXIT_ERROR and err.startswith("deskfleet: owner limit max_stored_bytes="), err


def test_every_row_an_owner_writes_counts_toward_stored_bytes(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """Each text counts for each place it is stored: its own row, the run's journal event,
    the audit entry (before, only the journal counted)."""
    alice = _owner(coordinator, "alice")

    def stored() -> int:
        return int(_limits(coordinator, "alice")["storedBytes"])

    def grows(by: int, *args: str, token: Path | None = alice) -> Any:
        before = stored()
        done = coordinator.cli_json(*args, token_file=token)
        assert stored() - before >= by, (args[:2], stored() - before, by)
        return done

    # Guidance: its row and its journal events (queued, then delivered at the boundary).
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "route": {"worker": "no"}}])
    run = _submitted(coordinator, alice, plan)
    text = "g" * 4000
    grows(3 * len(text), "runs", "guide", run["id"], text)
    # A kill switch's reason: the switch, its audit entry and the run's journal event.
    reason = "r" * 1000
    grows(3 * len(reason), "kill", "engage", "--run", run["id"], "--reason", reason)
    # A desktop request: the title and reason in the run and its approval, and the journal.
    desk = WorkerProcess(coordinator, "desk", browser=False)
    assert desk.enroll().returncode == 0
    why, title = "w" * 2000, "t" * 500
    asked = ("desktop", "request", "--worker", desk.worker_id, "--action=type")
    desktop = grows(2 * len(why) + 2 * len(title), *asked, "--reason", why, "--title", title)
    # An act's arguments (refused here, before any approval) are stored with its action.
    typed = "k" * 3000
    before = stored()
    act = ("desktop", "act", desktop["id"], "type", "--text", typed)
    done = coordinator.cli(*act, token_file=alice, check=False)
    assert done.returncode != 0 and "not_approved" in done.stdout, done.stdout
    assert stored() - before >= len(typed)
    # An admin's answer is stored with the owner's run, and counts for the owner: in the
    # approval, its journal event and the stop reason of the run it cancels.
    [approval] = [
        a
        for a in coordinator.cli_json("approvals", "list")["approvals"]
        if a["runId"] == desktop["id"]
    ]
    answer = "n" * 2000
    grows(3 * len(answer), "approvals", "deny", approval["id"], "--reason", answer, token=None)
