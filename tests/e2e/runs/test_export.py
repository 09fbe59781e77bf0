"""Evidence export end to end: a real coordinator, a real desktop worker on Xvfb, a desktop run
whose screenshot is an artifact and whose recording has frames, exported by the real CLI and
verified by it offline (no coordinator, no configuration); a byte flipped in the journal
inside the file is caught and named."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.store.engine import create_store_engine
from shared import evidence_bundle as layout
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, Xvfb
from tests.harness.evidence import add_frames, member, members

pytestmark = pytest.mark.slow

EXIT_NOT_FOUND = 4
EXIT_NOT_VERIFIED = 6


def _deskfleet(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "deskfleet"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def _offline_env(home: Path) -> dict[str, str]:
    """No coordinator, no credential, no config file: what an auditor's machine has."""
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKFLEET_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), DESKFLEET_COORDINATOR="")
    env.pop("DESKFLEET_COORDINATOR")
    return env


def _flip_in_place(bundle: Path, name: str) -> None:
    """One bit of one byte of `name`'s data changed where it lies in the tar file, as damage or
    an edit would: the tar's own headers stay as they were."""
    with tarfile.open(bundle) as tar:
        info = tar.getmember(name)
    at = info.offset_data + info.size // 2
    with bundle.open("r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 1]))


def test_a_desktop_run_exported_verifies_offline_and_a_flipped_journal_byte_is_named(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    tmp_path: Path,
) -> None:
    desk = workers("desk", display_env=xvfb.env, browser=False)
    desk.wait_online()
    run = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        desk.worker_id,
        "--action",
        "screenshot",
        "--reason",
        "evidence export",
    )
    [approval] = [a for a in coordinator.cli_json("approvals", "list")["approvals"]]
    coordinator.cli_json("approvals", "approve", approval["id"])
    shot = coordinator.cli_json("desktop", "act", run["id"], "screenshot")
    [artifact] = shot["artifacts"]
    # The recorder is another part of the coordinator: its frames are put in the store here.
    engine = create_store_engine(coordinator.db_url)
    try:
        add_frames(engine, run["id"], [0.0, 0.3, 1.2], (320, 200))
    finally:
        engine.dispose()

    env = dict(os.environ)
    env.update(
        DESKFLEET_COORDINATOR=coordinator.address,
        DESKFLEET_TOKEN_FILE=str(coordinator.admin_token_file),
    )
    out = tmp_path / "evidence.tar"
    done = _deskfleet(
        "runs", "export", run["id"], "--out", str(out), "--json", env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["file"] == str(out) and doc["size"] == out.stat().st_size
    assert doc["frames"] == 3 and doc["video"] is True, doc
    assert not (tmp_path / "evidence.tar.part").exists()
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    names = members(out)
    assert f"{layout.ARTIFACTS}{artifact['sha256']}" in names
    assert {layout.JOURNAL, layout.RECEIPTS, layout.VIDEO, layout.frame_name(3)} <= set(names)
    manifest = json.loads(member(out, layout.MANIFEST))
    assert manifest["replica"] == coordinator.replica and manifest["run_id"] == run["id"]

    key = subprocess.run(
        [str(BIN / "deskfleet-coordinator"), "evidence-key", "--db", coordinator.db_url, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    fingerprint = json.loads(key.stdout)["fingerprint"]
    assert doc["fingerprint"] == fingerprint == manifest["key"]["fingerprint"]
    auditor = _offline_env(tmp_path / "auditor")
    # The coordinator is stopped: verification needs nothing of it.
    coordinator.stop()
    unpinned = _deskfleet("verify", str(out), env=auditor, cwd=tmp_path)
    assert unpinned.returncode == 0, unpinned.stderr
    assert f"signed by {fingerprint}; that key is NOT pinned" in unpinned.stdout
    pinned = _deskfleet(
        "verify", str(out), "--key", fingerprint, "--json", env=auditor, cwd=tmp_path
    )
    assert pinned.returncode == 0, pinned.stderr
    report = json.loads(pinned.stdout)
    assert report["ok"] and report["keyPinned"] and report["frames"] == 3 and report["video"]
    assert report["artifacts"] == 1 and report["events"] == manifest["journal"]["events"]

    _flip_in_place(out, layout.JOURNAL)
    flipped = _deskfleet("verify", str(out), "--key", fingerprint, env=auditor, cwd=tmp_path)
    assert flipped.returncode == EXIT_NOT_VERIFIED, flipped.stdout + flipped.stderr
    problems = [line for line in flipped.stderr.splitlines() if line.startswith("problem: ")]
    assert any(p.startswith(f"problem: {layout.JOURNAL}: ") for p in problems), flipped.stderr
    assert f"problem: {layout.JOURNAL}: sha256 " in flipped.stderr  # the manifest's hash
    assert flipped.stdout == ""


def test_an_owner_exports_only_their_own_runs_and_no_file_is_replaced(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    token = tmp_path / "olga.token"
    token.write_text(coordinator.cli_json("users", "create", "olga")["token"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"actions": [{"kind": "diag.echo", "args": {"value": 1}}]}))
    worker = workers("w", browser=False)
    worker.wait_online()
    mine = coordinator.cli_json("runs", "submit", str(plan), "--wait", token_file=token)
    admins = coordinator.cli_json("runs", "submit", str(plan), "--wait")

    out = tmp_path / "mine.tar"
    coordinator.cli("runs", "export", mine["id"], "--out", str(out), token_file=token)
    refused = coordinator.cli(
        "runs",
        "export",
        admins["id"],
        "--out",
        str(tmp_path / "x.tar"),
        token_file=token,
        check=False,
    )
    assert refused.returncode == EXIT_NOT_FOUND and "no run" in refused.stderr
    assert not (tmp_path / "x.tar").exists() and not (tmp_path / "x.tar.part").exists()
    again = coordinator.cli("runs", "export", mine["id"], "--out", str(out), check=False)
    assert again.returncode != 0 and "--force" in again.stderr
    coordinator.cli("runs", "export", mine["id"], "--out", str(out), "--force")  # an admin: any run
    audit = coordinator.cli_json("audit")["entries"]
    exports = [e for e in audit if e["action"] == "run.export"]
    assert [e["target"] for e in exports] == [mine["id"], mine["id"]]
