"""Worker certificates under concurrent renewals, on both stores: one current certificate per
worker, and the renewals that lose the race hear so (FAILED_PRECONDITION), never INTERNAL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.security.certificates import WorkerCertificates, row_for
from coordinator.security.tls import CertificateAuthority, certificate_request, new_private_key
from coordinator.store import Database, workers as worker_queries
from coordinator.store.models import WorkerCertificateRow, WorkerRow
from coordinator.store.schema import upgrade
from shared.errors import AuthenticationError, FailedPreconditionError

WORKER = "wrk_race"
RACERS = 3


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


def _csr() -> str:
    return certificate_request(new_private_key(), WORKER)


async def _enrolled(db: Database, certificates: WorkerCertificates) -> bytes:
    """A worker with its first certificate (as enrollment leaves it); that certificate's PEM."""
    issued = certificates.sign(WORKER, _csr())

    def enroll(s: Session) -> None:
        worker_queries.add_worker(
            s,
            WorkerRow(
                id=WORKER,
                name="race",
                secret_hash="h" * 64,
                state="active",
                labels={},
                allowed_capabilities=[],
                advertisement={},
                enrolled_at=time.time(),
                enrollment_token_id="tok",
            ),
        )
        worker_queries.record_certificate(s, row_for(WORKER, issued, time.time()))

    await db.write(enroll)
    return issued.pem.encode()


async def _current(db: Database) -> list[str]:
    def unit(s: Session) -> list[str]:
        rows = s.execute(
            select(WorkerCertificateRow.fingerprint).where(
                WorkerCertificateRow.worker_id == WORKER,
                WorkerCertificateRow.superseded_at.is_(None),
            )
        )
        return list(rows.scalars())

    return await db.read(unit)


async def test_concurrent_renewals_with_one_certificate_leave_one_current(db: Database) -> None:
    certificates = WorkerCertificates(db, CertificateAuthority.create(), 30)
    first = await _enrolled(db, certificates)

    results = await asyncio.gather(
        *(certificates.renew(WORKER, first, _csr()) for _ in range(RACERS)),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1, results
    assert all(isinstance(e, FailedPreconditionError) for e in lost), lost
    assert all("already renewed" in str(e) for e in lost)
    assert await _current(db) == [won[0].fingerprint]

    # Only the winner's certificate opens a stream; the next renewal with it works.
    assert (await certificates.check(WORKER, won[0].pem.encode())).fingerprint == won[0].fingerprint
    with pytest.raises(AuthenticationError, match="was replaced at"):
        await certificates.check(WORKER, first)
    again = await certificates.renew(WORKER, won[0].pem.encode(), _csr())
    assert await _current(db) == [again.fingerprint]
    # A renewal that comes after the race, with the replaced certificate, hears the same.
    with pytest.raises(FailedPreconditionError, match="already renewed"):
        await certificates.renew(WORKER, first, _csr())


async def test_the_store_refuses_a_second_current_certificate(db: Database) -> None:
    certificates = WorkerCertificates(db, CertificateAuthority.create(), 30)
    await _enrolled(db, certificates)
    extra = certificates.sign(WORKER, _csr())

    def insert_without_superseding(s: Session) -> None:
        s.add(row_for(WORKER, extra, time.time()))
        s.flush()

    with pytest.raises(Exception, match=r"(?i)unique"):
        await db.write(insert_without_superseding)
