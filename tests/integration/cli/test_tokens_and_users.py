"""Enrollment tokens and users as an admin handles them: a token captured by `$(...)` enrolls,
a lifetime of nothing is refused, tokens are listed (never their secret) and revoked, users are
listed and created straight into a file, and owners administer none of it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from shared.states import RUN_STATES
from tests.harness import CoordinatorProcess, WorkerProcess


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test makes its own tokens and users."""
    return module_coordinator


def owner_token_file(coordinator: CoordinatorProcess, name: str) -> Path:
    owner = coordinator.cli_json("users", "create", name)
    path = coordinator.workdir / f"{name}.token"
    path.write_text(owner["token"])
    return path


# --- tokens create ---------------------------------------------------------------------------


def test_the_created_token_is_stdout_alone_and_enrolls_as_captured(
    coordinator: CoordinatorProcess,
) -> None:
    """`T=$(deskfleet tokens create)` took the description line too, and `enroll --token "$T"`
    answered "not an enrollment token"."""
    done = coordinator.cli("tokens", "create", "--capability", "headless")
    captured = done.stdout.rstrip("\n")  # what $(...) keeps
    assert "\n" not in captured and captured.startswith("dfe_")
    assert (
        done.stderr.startswith("enrollment token enr_") and "capabilities: headless" in done.stderr
    )
    worker = WorkerProcess(coordinator, "captured", browser=False)
    enrolled = worker.enroll(captured)
    assert enrolled.returncode == 0, enrolled.stderr
    # --json is still the one document, with the token in it.
    doc = coordinator.cli_json("tokens", "create")
    assert doc["token"].startswith("dfe_") and doc["id"].startswith("enr_")


@pytest.mark.parametrize("ttl", ["0", "0s", "0.5s", "-1h"])
def test_a_lifetime_of_nothing_is_refused_in_one_line(
    coordinator: CoordinatorProcess, ttl: str
) -> None:
    """`--ttl 0` made a token of the coordinator's default hour."""
    before = len(coordinator.cli_json("tokens", "list"))
    done = coordinator.cli("tokens", "create", f"--ttl={ttl}", check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"deskfleet: --ttl {ttl}: ") and "e.g. 10m, 1h, 2d" in done.stderr
    assert len(coordinator.cli_json("tokens", "list")) == before  # nothing was made


# --- tokens list and revoke ------------------------------------------------------------------


def test_tokens_list_shows_uses_expiry_and_revocation_never_the_secret(
    coordinator: CoordinatorProcess,
) -> None:
    made = coordinator.cli_json("tokens", "create", "--uses", "2", "--capability", "headless")
    assert WorkerProcess(coordinator, "listed", browser=False).enroll(made["token"]).returncode == 0
    listed = coordinator.cli("tokens", "list", json_out=True).stdout
    assert made["token"] not in listed and made["token"].split(".", 1)[1] not in listed
    tokens = json.loads(listed)
    mine = next(t for t in tokens if t["id"] == made["id"])
    assert mine == {
        "id": made["id"],
        "capabilities": ["headless"],
        "uses": 2,
        "used": 1,
        "expiresAt": made["expiresAt"],
        "revoked": False,
    }
    newest = coordinator.cli_json("tokens", "create")["id"]
    assert coordinator.cli_json("tokens", "list")[0]["id"] == newest  # newest first
    table = coordinator.cli("tokens", "list").stdout
    assert made["token"] not in table
    header, *rows = table.splitlines()
    assert header.split() == ["ID", "CAPABILITIES", "USED", "EXPIRES", "STATE"]
    row = next(r for r in rows if r.startswith(made["id"]))
    assert "headless" in row and "1 of 2" in row and row.endswith("usable")


def test_a_revoked_token_enrolls_no_worker(coordinator: CoordinatorProcess) -> None:
    made = coordinator.cli_json("tokens", "create", "--uses", "5")
    done = coordinator.cli("tokens", "revoke", made["id"])
    assert done.stdout.startswith(f"enrollment token {made['id']} revoked")
    refused = WorkerProcess(coordinator, "too-late", browser=False).enroll(made["token"])
    assert refused.returncode == 3
    assert len(refused.stderr.strip().splitlines()) == 1
    assert f"enrollment token {made['id']} was revoked at" in refused.stderr
    assert "ask an admin for a new one" in refused.stderr
    listed = next(t for t in coordinator.cli_json("tokens", "list") if t["id"] == made["id"])
    assert listed["revoked"] is True and listed["used"] == 0
    row = next(r for r in coordinator.cli("tokens", "list").stdout.splitlines() if made["id"] in r)
    assert row.endswith("revoked")
    # Again: the same answer, one audit entry.
    again = coordinator.cli_json("tokens", "revoke", made["id"])
    assert again["revoked"] is True and set(again) == set(listed)
    acts = [
        e
        for e in coordinator.cli_json("audit")["entries"]
        if e["action"] == "token.revoke" and e["target"] == made["id"]
    ]
    assert len(acts) == 1


def test_revoking_an_unknown_token_names_the_list(coordinator: CoordinatorProcess) -> None:
    done = coordinator.cli("tokens", "revoke", "enr_nope", check=False)
    assert (done.returncode, done.stderr) == (
        4,
        "deskfleet: no enrollment token 'enr_nope' (see `deskfleet tokens list`)\n",
    )
    done = coordinator.cli("tokens", "revoke", "dfe_enr_x.secret", check=False)
    assert done.returncode == 2 and "an enrollment token's id (enr_..." in done.stderr


# --- users list and create --save --------------------------------------------------------------


def test_users_list_shows_ids_names_roles_never_tokens(coordinator: CoordinatorProcess) -> None:
    made = coordinator.cli_json("users", "create", "lister", "--role", "admin")
    listed = coordinator.cli("users", "list", json_out=True).stdout
    assert made["token"] not in listed
    users = json.loads(listed)
    assert all(set(u) == {"id", "name", "role", "createdAt"} for u in users)
    assert {
        "id": made["id"],
        "name": "lister",
        "role": "admin",
        "createdAt": made["createdAt"],
    } in (users)
    table = coordinator.cli("users", "list").stdout
    assert table.splitlines()[0].split() == ["ID", "NAME", "ROLE", "CREATED"]
    assert any(r.startswith(made["id"]) and "lister" in r for r in table.splitlines())


def test_users_create_save_writes_a_private_file_as_rotate_does(
    coordinator: CoordinatorProcess,
) -> None:
    path = coordinator.workdir / "saved-user.token"
    done = coordinator.cli("users", "create", "saver", "--save", str(path))
    token = path.read_text().strip()
    assert token.startswith("dfu_") and token not in done.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert done.stdout.endswith(f"its token saved to {path}\n")
    assert coordinator.cli_json("whoami", token_file=path)["name"] == "saver"
    doc = coordinator.cli_json("users", "create", "saver2", "--save", str(path))
    assert doc["token"] == "" and path.read_text().strip().startswith(f"dfu_{doc['id']}.")


def test_users_create_and_rotate_print_the_token_alone_on_stdout(
    coordinator: CoordinatorProcess,
) -> None:
    """`T=$(deskfleet users create ann)` must hold a token that signs in, as tokens create does."""
    made = coordinator.cli("users", "create", "captured")
    assert made.stdout.count("\n") == 1 and made.stdout.startswith("dfu_")
    assert made.stderr.startswith("user usr_") and "(captured, owner); its token, shown once" in (
        made.stderr
    )
    path = coordinator.workdir / "captured.token"
    path.write_text(made.stdout.strip())
    assert coordinator.cli_json("whoami", token_file=path)["name"] == "captured"
    rotated = coordinator.cli("users", "rotate", "captured")
    assert rotated.stdout.count("\n") == 1 and rotated.stdout.startswith("dfu_")
    assert "new token; the old one no longer works" in rotated.stderr
    refused = coordinator.cli("whoami", token_file=path, check=False)
    assert refused.returncode != 0
    path.write_text(rotated.stdout.strip())
    assert coordinator.cli_json("whoami", token_file=path)["name"] == "captured"


def test_users_create_save_to_a_missing_directory_creates_no_user(
    coordinator: CoordinatorProcess,
) -> None:
    """The token is shown once: with nowhere to save it, the user is not made at all."""
    path = coordinator.workdir / "no-such-dir" / "u.token"
    done = coordinator.cli("users", "create", "unsaved", "--save", str(path), check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"deskfleet: --save {path}: no directory {path.parent}\n"
    assert "unsaved" not in [u["name"] for u in coordinator.cli_json("users", "list")]


# --- owners administer none of it ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "rpc"),
    [
        (("tokens", "list"), "ListEnrollmentTokens"),
        (("tokens", "revoke", "enr_x"), "RevokeEnrollmentToken"),
        (("users", "list"), "ListUsers"),
    ],
)
def test_an_owner_is_refused_the_admin_commands(
    coordinator: CoordinatorProcess, args: tuple[str, ...], rpc: str
) -> None:
    token_file = owner_token_file(coordinator, f"owner-{rpc.lower()}")
    done = coordinator.cli(*args, token_file=token_file, check=False)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr.startswith(f"deskfleet: {rpc} needs an admin credential")
    assert len(done.stderr.splitlines()) == 1


# --- runs list --status: the states top shows ------------------------------------------------


def test_runs_list_takes_every_state_top_counts(coordinator: CoordinatorProcess) -> None:
    """`top` counts runs by RECOVERING and DELEGATED too: each of its states, in any case, is a
    `runs list --status` filter, from the one vocabulary (shared/states.py)."""
    states = list(coordinator.cli_json("top")["runsByState"])
    assert {"RECOVERING", "DELEGATED"} <= set(states)
    assert states == [str(s) for s in RUN_STATES]
    for state in [*states, "recovering", "Delegated"]:
        done = coordinator.cli("runs", "list", "--status", state, json_out=True)
        assert json.loads(done.stdout)["runs"] == [], state
    done = coordinator.cli("runs", "list", "--status", "PAUSED", check=False)
    assert done.returncode == 2 and "invalid choice: 'PAUSED'" in done.stderr
    assert "RECOVERING" in done.stderr and "DELEGATED" in done.stderr
