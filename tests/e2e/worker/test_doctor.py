"""`deskfleet-worker doctor` against a real coordinator, with and without a display."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, Xvfb, base_env
from worker_agent.capabilities import DEFAULT_CHROMIUM

# slow: each doctor run starts Chromium and waits on coordinator checks; CI runs it
pytestmark = pytest.mark.slow

# As root (CI) Chromium runs without its sandbox, which doctor reports as a warning that does
# not fail it; as any other user the sandbox is on (tests/e2e/worker/test_sandbox.py covers both).
SANDBOX = "warn" if os.geteuid() == 0 else "ok"
WARNED = ", 1 warning(s)" if SANDBOX == "warn" else ""


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test enrolls (and may revoke) its own workers."""
    return module_coordinator


def doctor(
    state_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "deskfleet-worker"), "doctor", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        env=env or base_env(state_dir.parent),
        timeout=60,
    )


def doctor_json(
    state_dir: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, dict[str, Any]], dict[str, Any]]:
    """(exit code, rows by check name, the whole document)."""
    done = doctor(state_dir, "--json", *args, env=env)
    assert done.stderr == "", done.stderr
    doc = json.loads(done.stdout)
    return done.returncode, {c["name"]: c for c in doc["checks"]}, doc


def statuses(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: row["status"] for name, row in rows.items()}


def enrolled(coordinator: CoordinatorProcess, name: str) -> WorkerProcess:
    worker = WorkerProcess(coordinator, name)
    done = worker.enroll()
    assert done.returncode == 0, done.stderr
    return worker


def test_without_a_display_the_desktop_checks_fail_with_a_fix(
    coordinator: CoordinatorProcess,
) -> None:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    worker = enrolled(coordinator, "no-display")
    code, rows, doc = doctor_json(worker.state_dir)  # base_env drops DISPLAY and friends
    assert code == 1
    assert statuses(rows) == {
        "display": "fail",
        "input": "fail",
        "browser": "ok",
        "sandbox": SANDBOX,
        "coordinator": "ok",
        "credential": "ok",
        "clock": "ok",
    }
    assert rows["display"]["detail"] == "no display: DISPLAY is not set"
    assert "DISPLAY and XAUTHORITY" in rows["display"]["fix"]
    assert "--no-computer-use" in rows["display"]["fix"]
    assert rows["input"]["fix"]
    assert rows["credential"]["detail"] == f"accepted: worker {worker.worker_id} (no-display)"
    assert abs(doc["clockSkewSeconds"]) < 5  # both ends read this machine's clock
    assert (doc["ok"], doc["workerId"]) == (False, worker.worker_id)

    # The table a person reads: every check on its row, the failures' fixes beside them.
    done = doctor(worker.state_dir)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[2].split() == ["CHECK", "RESULT", "DETAIL", "FIX"]
    starts = {line.split()[0]: line.split()[1] for line in lines[3:-2] if line[:1].strip()}
    assert starts == {
        "display": "FAIL",
        "input": "FAIL",
        "browser": "ok",
        "sandbox": SANDBOX if SANDBOX == "ok" else "WARN",
        "coordinator": "ok",
        "credential": "ok",
        "clock": "ok",
    }
    assert "run the worker inside the graphical session" in done.stdout
    assert lines[-1] == "2 check(s) failed" + WARNED


def test_a_headless_node_skips_the_desktop_checks(coordinator: CoordinatorProcess) -> None:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    worker = enrolled(coordinator, "headless")
    code, rows, _ = doctor_json(worker.state_dir, "--no-computer-use")
    assert code == 0, rows
    assert statuses(rows)["display"] == statuses(rows)["input"] == "skip"
    done = doctor(worker.state_dir, "--no-computer-use")
    assert (done.returncode, done.stdout.splitlines()[-1]) == (0, "all checks passed" + WARNED)


def test_a_node_without_a_browser_skips_the_browser_check(
    coordinator: CoordinatorProcess,
) -> None:
    # Given a Chromium that cannot launch: skipped means not even tried.
    worker = enrolled(coordinator, "no-browser")
    code, rows, _ = doctor_json(
        worker.state_dir, "--no-computer-use", "--no-headless", "--chromium", "/nonexistent"
    )
    assert code == 0, rows
    assert rows["browser"] == {
        "name": "browser",
        "status": "skip",
        "detail": "browser disabled here (--no-headless)",
        "fix": "",
    }
    assert rows["sandbox"]["status"] == "skip"
    assert statuses(rows)["coordinator"] == statuses(rows)["credential"] == "ok"


def test_with_a_display_every_check_passes(coordinator: CoordinatorProcess, xvfb: Xvfb) -> None:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    worker = enrolled(coordinator, "desktop")
    env = base_env(worker.state_dir.parent) | xvfb.env
    code, rows, doc = doctor_json(worker.state_dir, env=env)
    assert code == 0, rows
    assert set(statuses(rows).values()) == {"ok", SANDBOX}
    assert rows["display"]["detail"] == f"{xvfb.display}: 1 screen(s) 1280x800"
    assert doc["ok"] is True


def test_a_bad_or_revoked_credential_fails_and_says_to_enroll_again(
    coordinator: CoordinatorProcess,
) -> None:
    worker = enrolled(coordinator, "tampered")
    credential = worker.state_dir / "credential"
    real = credential.read_text()
    credential.write_text(real.replace(".", ".x", 1))  # same worker id, wrong secret
    code, rows, doc = doctor_json(worker.state_dir, "--no-computer-use")
    assert code == 1
    assert rows["coordinator"]["status"] == "ok"
    assert rows["credential"]["status"] == "fail"
    assert rows["credential"]["detail"].startswith(f"{coordinator.address} refused this worker")
    assert "enroll again" in rows["credential"]["fix"]
    assert rows["clock"] == {
        "name": "clock",
        "status": "skip",
        "detail": "not checked: the credential was refused",
        "fix": "",
    }
    assert doc["clockSkewSeconds"] is None

    credential.write_text(real)
    coordinator.cli("workers", "revoke", worker.worker_id)
    code, rows, _ = doctor_json(worker.state_dir, "--no-computer-use")
    assert (code, rows["credential"]["status"]) == (1, "fail")
    assert "revoked" in rows["credential"]["detail"]

    # A credential others can read is refused by doctor even before the coordinator sees it.
    other = enrolled(coordinator, "loose")
    (other.state_dir / "credential").chmod(0o644)
    code, rows, _ = doctor_json(other.state_dir, "--no-computer-use")
    assert (code, rows["credential"]["status"]) == (1, "fail")
    assert rows["credential"]["fix"] == f"chmod 600 {other.state_dir / 'credential'}"


def test_no_enrollment_and_no_coordinator_say_what_to_do(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-state"
    code, rows, doc = doctor_json(empty, "--no-computer-use")
    assert code == 1
    assert rows["credential"]["status"] == "fail"
    assert rows["credential"]["fix"].startswith("deskfleet-worker enroll --coordinator HOST:PORT")
    assert rows["coordinator"]["status"] == "fail"
    assert doc["workerId"] == ""

    worker = enrolled(coordinator, "unreachable")
    code, rows, _ = doctor_json(
        worker.state_dir, "--no-computer-use", "--coordinator", "127.0.0.1:1"
    )
    assert code == 1
    assert rows["coordinator"]["status"] == "fail"
    assert "cannot reach the coordinator at 127.0.0.1:1" in rows["coordinator"]["detail"]
    assert "deskfleet-coordinator serve" in rows["coordinator"]["fix"]
    assert rows["credential"]["status"] == rows["clock"]["status"] == "skip"
