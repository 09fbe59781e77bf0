"""Worker client certificates: signed at enrollment and renewal, checked when a stream opens.

The worker's credential says who it is; its certificate binds that to a key that never leaves
the machine, checked by TLS on the worker port. The coordinator records each certificate it
signs, so a copied older certificate (after renewal) or one of a revoked worker is refused even
while it is still within its validity.
"""

from __future__ import annotations

import datetime as dt
import time

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from coordinator.security.tls import CertificateAuthority, IssuedCertificate
from coordinator.store import Database, workers as worker_queries
from coordinator.store.models import WorkerCertificateRow
from shared.errors import AuthenticationError, FailedPreconditionError

# The gRPC auth-context property holding the peer's certificate (PEM) on a TLS connection.
PEER_CERT_PROPERTY = "x509_pem_cert"


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds")


def row_for(worker_id: str, issued: IssuedCertificate, now: float) -> WorkerCertificateRow:
    return WorkerCertificateRow(
        fingerprint=issued.fingerprint,
        serial=issued.serial,
        worker_id=worker_id,
        issued_at=now,
        not_after=issued.not_after,
        superseded_at=None,
    )


class WorkerCertificates:
    """Signs worker certificates with the coordinator's CA and decides which ones it accepts."""

    def __init__(self, db: Database, ca: CertificateAuthority, days: float) -> None:
        self._db = db
        self.ca = ca
        self._days = days

    def sign(self, worker_id: str, csr_pem: str) -> IssuedCertificate:
        """Sign without recording (enrollment records it in its own transaction)."""
        return self.ca.sign_request(csr_pem, worker_id, self._days)

    async def check(
        self, worker_id: str, peer_pem: bytes | None, *, renewing: bool = False
    ) -> IssuedCertificate:
        """The peer's certificate, if it is this worker's newest one from our CA and valid now.
        `renewing`: a replaced certificate is a renewal that came second (FailedPrecondition)."""
        if peer_pem is None:
            raise AuthenticationError(
                "worker streams need the worker's client certificate: this is the coordinator's"
                " admin and enrollment port; a worker enrolled with --ca-file connects to the"
                " worker port with its certificate"
            )
        issued = self.ca.verify_peer(peer_pem, time.time())
        if issued.common_name != worker_id:
            raise AuthenticationError(
                f"the client certificate is for {issued.common_name!r}, not for worker {worker_id}"
            )
        found = await self._db.read(worker_queries.certificate_by_fingerprint, issued.fingerprint)
        if found is None:
            raise AuthenticationError(
                f"the client certificate (serial {issued.serial}) is not one this coordinator"
                f" issued to worker {worker_id}"
            )
        row, state = found
        if state == "revoked":
            raise AuthenticationError(f"worker {worker_id} has been revoked; its certificates too")
        if row.superseded_at is not None and renewing:
            raise FailedPreconditionError(_ALREADY_RENEWED.format(issued.serial, worker_id))
        if row.superseded_at is not None:
            raise AuthenticationError(
                f"the client certificate (serial {issued.serial}) of worker {worker_id} was"
                f" replaced at {_iso(row.superseded_at)}; only its newest certificate is accepted"
            )
        return issued

    async def renew(
        self, worker_id: str, peer_pem: bytes | None, csr_pem: str
    ) -> IssuedCertificate:
        """A new certificate for the worker; the one it presents (if any) stops being accepted.

        A worker renews with its current certificate. Without one it may only get a first
        certificate, or a new one once its last has expired (it was away too long): then the
        credential alone vouches for it, as it did at enrollment.
        """
        presented = (
            await self.check(worker_id, peer_pem, renewing=True) if peer_pem is not None else None
        )
        if presented is None:
            current = await self._db.read(worker_queries.current_certificate, worker_id)
            _renewable_without_certificate(worker_id, current)
        issued = self.sign(worker_id, csr_pem)

        def record(s: Session) -> None:
            # Under the worker row's lock: of renewals racing with one certificate, the first
            # replaces it and the others find it already replaced.
            worker = worker_queries.worker_for_update(s, worker_id)
            if worker is None or worker.state == "revoked":
                raise AuthenticationError(f"worker {worker_id} has been revoked")
            current = worker_queries.current_certificate(s, worker_id)
            if presented is None:
                _renewable_without_certificate(worker_id, current)
            elif current is None or current.fingerprint != presented.fingerprint:
                raise FailedPreconditionError(_ALREADY_RENEWED.format(presented.serial, worker_id))
            worker_queries.record_certificate(s, row_for(worker_id, issued, time.time()))

        try:
            await self._db.write(record)
        except IntegrityError as exc:  # the one-current index: another renewal won
            serial = presented.serial if presented is not None else "(none)"
            raise FailedPreconditionError(_ALREADY_RENEWED.format(serial, worker_id)) from exc
        return issued


_ALREADY_RENEWED = (
    "the client certificate (serial {}) of worker {} was already renewed by another request;"
    " use the newest certificate"
)


def _renewable_without_certificate(worker_id: str, current: WorkerCertificateRow | None) -> None:
    if current is not None and current.not_after > time.time():
        raise AuthenticationError(
            f"worker {worker_id} holds a valid certificate until"
            f" {_iso(current.not_after)}: renew with it, on the worker port"
        )
