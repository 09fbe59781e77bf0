"""The store: migrations, init, a dead store reported as UNAVAILABLE, and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from coordinator.store import Database, replicas
from coordinator.store.schema import head_revision, upgrade
from tests.harness import (
    BIN,
    CoordinatorProcess,
    TcpProxy,
    WorkerProcess,
    base_env,
    journal,
    submit,
)


def _init(tmp_path: Path, db_url: str, token_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "deskfleet-coordinator", "init", "--db", db_url, "--admin-token-file", token_file],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        timeout=60,
    )


def test_bad_database_urls_are_refused_in_one_line(tmp_path: Path) -> None:
    done = _init(tmp_path, "mysql://root@localhost/x", tmp_path / "t")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "deskfleet-coordinator: --db: unsupported database 'mysql'; use"
        " sqlite:////abs/path/fleet.db or postgresql://user@host/db"
    )


def test_serve_on_an_uninitialised_store_says_to_run_init(tmp_path: Path) -> None:
    empty = tmp_path / "none.db"
    empty.touch()  # a file that is no store yet; a missing one is named as missing
    done = subprocess.run(
        [
            BIN / "deskfleet-coordinator",
            "serve",
            "--db",
            f"sqlite:///{empty}",
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"deskfleet-coordinator: the store (sqlite at {empty}) has no deskfleet schema; run"
        f" `deskfleet-coordinator init --db sqlite:///{empty}` first"
    )


def test_an_unreadable_store_is_unavailable_never_zero_online(
    coordinator: CoordinatorProcess,
) -> None:
    worker = WorkerProcess(coordinator, "w").start()
    try:
        worker.wait_online()
        db = coordinator.workdir / "fleet.db"
        # Damage the store under the running coordinator: the main file, the WAL and its index.
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            if path.exists():
                path.write_bytes(b"\xde\xad" * (path.stat().st_size // 2))
        done = coordinator.cli("status", json_out=True, check=False)
        assert done.returncode == 5
        assert done.stdout == ""
        assert done.stderr.strip() == (
            "deskfleet: the coordinator's store is unavailable: file is not a database"
        )
    finally:
        worker.stop()


@pytest.mark.postgres
def test_postgresql_store_end_to_end(tmp_path: Path, pg_url: str) -> None:
    coordinator = CoordinatorProcess(tmp_path / "pg", pg_url).start()
    worker = WorkerProcess(coordinator, "pgw")
    try:
        worker.start().wait_online()
        status = coordinator.status()
        assert status["headlessOnline"] == 1
        coordinator.cli("workers", "revoke", worker.worker_id)
        assert worker.proc is not None and worker.proc.wait(10) == 3
    finally:
        worker.stop()
        coordinator.stop()


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[tuple[str, TcpProxy]]:
    proxy = TcpProxy(("127.0.0.1", 5432))
    yield pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), proxy
    proxy.cut()


@pytest.mark.postgres
def test_a_dead_postgresql_is_unavailable(tmp_path: Path, pg_proxy: tuple[str, TcpProxy]) -> None:
    url, proxy = pg_proxy
    coordinator = CoordinatorProcess(tmp_path / "pgdead", url).start()
    try:
        assert coordinator.status()["headlessOnline"] == 0
        proxy.cut()
        done = coordinator.cli("status", json_out=True, check=False, timeout=60)
        assert done.returncode == 5, done.stderr
        assert done.stdout == ""
        assert done.stderr.startswith("deskfleet: the coordinator's store is unavailable:")
        assert len(done.stderr.strip().splitlines()) == 1
    finally:
        coordinator.stop()


@pytest.mark.postgres
@pytest.mark.slow
def test_runs_and_receipts_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    coordinator = CoordinatorProcess(tmp_path / "pgruns", pg_url).start()
    worker = WorkerProcess(coordinator, "pgw")
    try:
        worker.start().wait_online()
        tricky = "nul\x00 lone\ud800 é 😀"
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "actions": [
                        {"kind": "diag.echo", "args": {"value": tricky}, "idempotent": True},
                        {"kind": "diag.fail", "args": {"fail_attempts": 1}, "idempotent": True},
                    ]
                },
                ensure_ascii=True,
            )
        )
        run = submit(coordinator, plan, wait=True)
        assert run["status"] == "SUCCEEDED", run["stopReason"]
        receipts = [e for e in journal(coordinator, run["id"]) if e["kind"] == "receipt"]
        assert receipts[0]["data"]["result"] == {"echo": tricky}
        assert coordinator.cli_json("journal", "verify", run["id"])["ok"] is True
        # Free text is stored as text, which cannot hold NUL on PostgreSQL: refused up front.
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"title": "bad\x00title", "actions": [{"kind": "diag.echo"}]}))
        refused = coordinator.cli("runs", "submit", str(bad), check=False)
        assert refused.returncode == 2
        assert refused.stderr.startswith("deskfleet: title: must not contain control")
    finally:
        worker.stop()
        coordinator.stop()


@pytest.mark.postgres
async def test_a_deadlocked_transaction_on_postgresql_runs_again(pg_url: str) -> None:
    """Two units lock the same two rows in opposite orders: PostgreSQL aborts one, and the
    store runs it again instead of calling the store unavailable."""
    upgrade(pg_url)
    db = Database(pg_url)
    tries = {"a": 0, "b": 0}
    both_hold_one = threading.Barrier(2, timeout=10)

    def beat_both(s: Session, first: str, second: str, who: str) -> str:
        tries[who] += 1
        replicas.beat(s, first, who, 0.0, float(tries[who]))
        s.flush()
        if tries[who] == 1:
            both_hold_one.wait()  # each holds its first row: the next write closes the cycle
        replicas.beat(s, second, who, 0.0, float(tries[who]))
        s.flush()
        return who

    try:
        await db.write(lambda s: [replicas.beat(s, n, "", 0.0, 0.0) for n in ("x", "y")])
        done = await asyncio.gather(
            db.write(beat_both, "x", "y", "a"), db.write(beat_both, "y", "x", "b")
        )
        assert sorted(done) == ["a", "b"]
        assert sorted(tries.values()) == [1, 2]  # one of them was the deadlock's victim
        rows = await db.read(replicas.replicas)
        assert {r.name for r in rows} == {"x", "y"}
    finally:
        await db.close()


def test_init_is_idempotent_and_keeps_a_valid_admin_credential(tmp_path: Path) -> None:
    url, token = f"sqlite:///{tmp_path / 'db' / 'f.db'}", tmp_path / "admin.token"
    first = _init(tmp_path, url, token)
    assert first.returncode == 0, first.stderr
    assert f"schema empty -> {head_revision()}" in first.stdout
    secret = token.read_text()
    again = _init(tmp_path, url, token)
    assert again.returncode == 0 and "is valid, kept" in again.stdout
    assert token.read_text() == secret


def test_init_refuses_to_overwrite_a_foreign_token_file(tmp_path: Path) -> None:
    token = tmp_path / "admin.token"
    token.write_text("someone else's\n")
    done = _init(tmp_path, f"sqlite:///{tmp_path / 'f.db'}", token)
    assert done.returncode == 1 and "holds no admin credential" in done.stderr
    assert token.read_text() == "someone else's\n"
