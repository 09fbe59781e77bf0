"""CLI conventions: one JSON document, one-line errors, configuration from flags/env/file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.harness import BIN, CoordinatorProcess, base_env
from tests.harness.cli import run_in_process


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: these tests enroll no worker and change no setting."""
    return module_coordinator


def test_json_output_is_exactly_one_document(coordinator: CoordinatorProcess) -> None:
    for args in (("status",), ("workers", "list"), ("whoami",), ("tokens", "create")):
        out = coordinator.cli(*args, json_out=True).stdout
        json.loads(out)  # raises on anything but one document


def test_tables_by_default(coordinator: CoordinatorProcess) -> None:
    assert coordinator.cli("status").stdout.startswith("headless online: 0")
    assert "no workers enrolled" in coordinator.cli("workers", "list").stdout


def test_unknown_worker_is_not_found_in_one_line(coordinator: CoordinatorProcess) -> None:
    done = coordinator.cli("workers", "show", "wkr_nope", check=False)
    assert (done.returncode, done.stderr) == (
        4,
        "deskfleet: no worker with id or name 'wkr_nope' (see `deskfleet workers list`)\n",
    )


def test_unreachable_coordinator_is_one_line_and_exit_5(coordinator: CoordinatorProcess) -> None:
    env = base_env(coordinator.workdir)
    done = subprocess.run(
        [
            BIN / "deskfleet",
            "status",
            "--coordinator",
            "127.0.0.1:1",
            "--token-file",
            str(coordinator.admin_token_file),
            "--timeout",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 5 and done.stdout == ""
    assert done.stderr.startswith("deskfleet: cannot reach the coordinator at 127.0.0.1:1")
    assert len(done.stderr.splitlines()) == 1


def test_config_file_supplies_address_and_credential(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    env = base_env(tmp_path)  # its own configuration directory, not the shared coordinator's
    config = tmp_path / "xdg-config" / "deskfleet" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {"coordinator": coordinator.address, "token_file": str(coordinator.admin_token_file)}
        )
    )
    done = subprocess.run(
        [BIN / "deskfleet", "whoami", "--json"], capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["role"] == "admin"
    # Flags win over the file.
    done = subprocess.run(
        [BIN / "deskfleet", "whoami", "--token-file", "/nonexistent"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "deskfleet: token file /nonexistent does not exist\n",
    )


def test_missing_credential_says_how_to_give_one(coordinator: CoordinatorProcess) -> None:
    env = base_env(coordinator.workdir)
    env["DESKFLEET_COORDINATOR"] = coordinator.address
    done = subprocess.run(
        [BIN / "deskfleet", "status"], capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == (
        "deskfleet: no credential: pass --token-file PATH or set DESKFLEET_TOKEN_FILE\n"
    )


def test_worker_run_without_enrollment_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [BIN / "deskfleet-worker", "run", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "holds no enrollment: run `deskfleet-worker enroll" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_the_cli_run_in_the_test_process_answers_as_the_installed_program(
    coordinator: CoordinatorProcess,
) -> None:
    """The tests run `deskfleet` by its `main` in their own process (tests/harness/cli.py):
    exit code, stdout and stderr must be what the installed program gives, for an answer, a
    refusal, a usage error and input on stdin."""
    env = base_env(coordinator.workdir)
    env["DESKFLEET_COORDINATOR"] = coordinator.address
    env["DESKFLEET_TOKEN_FILE"] = str(coordinator.admin_token_file)
    cases: list[tuple[list[str], str | None]] = [
        (["workers", "list", "--json"], None),
        (["workers", "show", "wkr_nope"], None),
        (["runs", "submit"], None),  # no plan: argparse's usage error, exit 2
        (["secrets", "set", "HARNESS_PIN"], "4711\n"),  # the value is read from stdin
        (["status", "--coordinator", "127.0.0.1:99999"], None),
    ]
    for args, stdin in cases:
        argv = [str(BIN / "deskfleet"), *args]
        real = subprocess.run(argv, capture_output=True, text=True, env=env, input=stdin)
        here = run_in_process(argv, env, stdin, 30)
        assert (here.returncode, here.stdout, here.stderr) == (
            real.returncode,
            real.stdout,
            real.stderr,
        ), args
        assert real.returncode != 0 or real.stdout, args  # each case says something
