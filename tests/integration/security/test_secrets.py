"""Secrets at rest: values sealed under a key outside the database, files for the coordinator's
user alone, plaintext rows sealed on start, rotation, and one line when the key is missing."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.security import secret_box
from coordinator.security.secret_box import SecretBox
from coordinator.store import Database
from coordinator.store.models import SecretRow
from coordinator.store.schema import upgrade
from shared.errors import FailedPreconditionError
from tests.harness import BIN, CoordinatorProcess, base_env

VALUE = "hunter2-correct-horse-ø"
LEGACY = "legacy-plaintext-battery-staple"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _box(tmp_path: Path) -> tuple[Path, SecretBox]:
    key = tmp_path / "secrets.key"
    assert secret_box.create_key_file(key)
    return key, SecretBox.load(key)


# --- the box, in process ----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    url = (
        f"sqlite:///{tmp_path / 'fleet.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    await asyncio.to_thread(upgrade, url)
    database = Database(url)
    yield database
    await database.close()


async def test_plaintext_rows_are_sealed_and_a_rotation_reseals_all(
    db: Database, tmp_path: Path
) -> None:
    key, box = _box(tmp_path)

    def legacy(s: object) -> None:
        s.add(SecretRow(owner_id="usr_a", name="OLD", value=LEGACY, updated_at=0, updated_by="x"))  # type: ignore[attr-defined]

    await db.write(legacy)
    assert await db.write(secret_box.seal_all, box, plaintext_only=True) == 1
    assert await db.write(secret_box.seal_all, box, plaintext_only=True) == 0
    stored = await db.read(lambda s: s.get(SecretRow, ("usr_a", "OLD")).value)
    assert secret_box.is_sealed(stored) and LEGACY not in stored
    assert box.open("usr_a", "OLD", stored) == LEGACY

    newer = SecretBox((secret_box.new_key(), *box.keys))  # a rotation's first step
    assert await db.write(secret_box.seal_all, newer) == 1
    rotated = await db.read(lambda s: s.get(SecretRow, ("usr_a", "OLD")).value)
    assert SecretBox(newer.keys[:1]).open("usr_a", "OLD", rotated) == LEGACY
    with pytest.raises(FailedPreconditionError):
        box.open("usr_a", "OLD", rotated)
    assert key.exists()


# --- a real coordinator -------------------------------------------------------------------------


def _init(workdir: Path, db_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            BIN / "deskfleet-coordinator",
            "init",
            "--db",
            db_url,
            "--admin-token-file",
            workdir / "admin.token",
        ],
        capture_output=True,
        text=True,
        env=base_env(workdir),
        timeout=60,
        check=True,
    )


def _raw(state: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in state.iterdir() if p.name.startswith("fleet.db")}


def test_secret_values_never_reach_the_database_files_in_plaintext(tmp_path: Path) -> None:
    workdir, state = tmp_path / "coord", tmp_path / "coord" / "state"
    workdir.mkdir()
    db_url = f"sqlite:///{state / 'fleet.db'}"
    done = _init(workdir, db_url)
    key = state / "secrets.key"  # the default: next to the SQLite database
    assert f"secrets key written to {key}" in done.stdout
    with sqlite3.connect(state / "fleet.db") as conn:  # a value stored before sealing existed
        conn.execute("INSERT INTO secrets VALUES ('usr_legacy', 'OLD', ?, 0, 'x')", (LEGACY,))
    conn.close()

    coordinator = CoordinatorProcess(workdir, db_url)
    coordinator.secrets_key_file = key
    coordinator.start()
    try:
        coordinator.cli("secrets", "set", "PIN", input_text=VALUE + "\n")
        raw = _raw(state)
        assert {"fleet.db", "fleet.db-wal", "fleet.db-shm"} <= set(raw)
        for name, data in raw.items():
            for secret in (VALUE, LEGACY):
                assert secret.encode() not in data, (name, secret)
                assert secret.encode("utf-16-le") not in data, (name, secret)
        for path in (*(state / n for n in raw), key, workdir / "admin.token"):
            assert _mode(path) == 0o600, path
        assert _mode(state) == 0o700
        with sqlite3.connect(f"file:{state / 'fleet.db'}?mode=ro", uri=True) as conn:
            rows = dict(conn.execute("SELECT name, value FROM secrets").fetchall())
        conn.close()
        me = coordinator.cli_json("whoami")["id"]
        assert SecretBox.load(key).open(me, "PIN", rows["PIN"]) == VALUE
        assert SecretBox.load(key).open("usr_legacy", "OLD", rows["OLD"]) == LEGACY

        # Without its key the coordinator still serves, and says so in one line when asked.
        coordinator.stop()
        key.rename(tmp_path / "away.key")
        coordinator.start()
        refused = coordinator.cli("secrets", "set", "PIN2", input_text="x\n", check=False)
        assert refused.returncode != 0
        assert refused.stderr.strip().splitlines() == [f"deskfleet: {secret_box.NO_KEY}"]
        coordinator.stop()
        (tmp_path / "away.key").rename(key)

        rotated = subprocess.run(
            [BIN / "deskfleet-coordinator", "rotate-secrets-key", "--db", db_url],
            capture_output=True,
            text=True,
            env=base_env(workdir),
            timeout=60,
        )
        assert rotated.returncode == 0, rotated.stderr
        assert "2 stored secret value(s) sealed with the new key" in rotated.stdout
        assert _mode(key) == 0o600 and len(key.read_text().split()) == 1
        with sqlite3.connect(f"file:{state / 'fleet.db'}?mode=ro", uri=True) as conn:
            after = dict(conn.execute("SELECT name, value FROM secrets").fetchall())
        conn.close()
        assert SecretBox.load(key).open(me, "PIN", after["PIN"]) == VALUE
        coordinator.start()
        started = time.monotonic()
        coordinator.cli("secrets", "set", "PIN", input_text=VALUE + "\n")
        assert time.monotonic() - started < 30
    finally:
        coordinator.stop()
