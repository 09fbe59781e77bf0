"""The worker's side of TLS: its key and certificate request, the channel credentials of each
connection, and renewing the certificate before it runs out.

The key is made on this machine at enrollment and never sent anywhere; the coordinator signs a
request for it. Renewal reuses the key (a fresh request each time) so that the certificate is
the only file that changes, and it changes atomically.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shared.credentials import auth_metadata
from shared.errors import (
    DeskfleetError,
    InvalidArgumentError,
    PermissionDeniedError,
    from_rpc_error,
)
from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc
from shared.transport import host_of
from worker_agent.state import CA, CLIENT_CERT, CLIENT_CSR, CLIENT_KEY, StateDir, WorkerIdentity

log = logging.getLogger("deskfleet.worker")

RENEW_WHEN_LEFT = 1 / 3  # of the certificate's lifetime: leaves time for a coordinator outage
MAX_CHECK_INTERVAL = 3600.0
MIN_CHECK_INTERVAL = 1.0
RENEW_TIMEOUT = 15.0
EXPIRY_MARGIN = 60.0  # seconds: closer to its end, a certificate is not relied on to renew


def new_request(state: StateDir, name: str, *, new_key: bool) -> str:
    """A certificate request for this worker's key (made now when `new_key`), saved beside it."""
    if new_key or state.read_bytes(CLIENT_KEY) is None:
        key = ec.generate_private_key(ec.SECP256R1())
        state.write(
            CLIENT_KEY,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
            0o600,
        )
    else:
        loaded = serialization.load_pem_private_key(state.read_bytes(CLIENT_KEY) or b"", None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise InvalidArgumentError(f"{state.file(CLIENT_KEY)}: expected an ECDSA key")
        key = loaded
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name or "deskfleet-worker")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    pem = csr.public_bytes(serialization.Encoding.PEM).decode()
    state.write(CLIENT_CSR, pem)
    return pem


@dataclass(frozen=True)
class Validity:
    not_before: float
    not_after: float

    @classmethod
    def of(cls, pem: bytes) -> Validity:
        cert = x509.load_pem_x509_certificate(pem)
        return cls(cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp())

    @property
    def renew_at(self) -> float:
        return self.not_after - (self.not_after - self.not_before) * RENEW_WHEN_LEFT


def with_port(address: str, port: int) -> str:
    host = host_of(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class WorkerTransport:
    """Where each connection goes and with which credentials; renews the certificate."""

    def __init__(self, state: StateDir, identity: WorkerIdentity, credential: str) -> None:
        self._state = state
        self._identity = identity
        self._metadata = auth_metadata(credential)
        self._lock = asyncio.Lock()

    def use_credential(self, credential: str) -> None:
        """The worker's credential after a rotation (renewals authenticate with it)."""
        self._metadata = auth_metadata(credential)

    def _credentials(self, with_certificate: bool) -> grpc.ChannelCredentials | None:
        ca = self._state.read_bytes(CA)
        if ca is None:
            return None
        cert = self._state.read_bytes(CLIENT_CERT) if with_certificate else None
        if cert is None:
            return grpc.ssl_channel_credentials(ca)
        return grpc.ssl_channel_credentials(ca, self._state.read_bytes(CLIENT_KEY), cert)

    def _validity(self) -> Validity | None:
        pem = self._state.read_bytes(CLIENT_CERT)
        return Validity.of(pem) if pem is not None else None

    def stream_target(self, attempt: int) -> tuple[str, grpc.ChannelCredentials | None]:
        """The address and credentials of connection `attempt` (round robin)."""
        index = attempt % len(self._identity.coordinators)
        if self._identity.stream_coordinators and self._state.read_bytes(CLIENT_CERT):
            return self._identity.stream_coordinators[index], self._credentials(True)
        return self._identity.coordinators[index], self._credentials(False)

    def check_interval(self) -> float:
        """How long until the certificate should be looked at again."""
        validity = self._validity()
        if validity is None:
            return MAX_CHECK_INTERVAL
        lifetime = validity.not_after - validity.not_before
        return max(MIN_CHECK_INTERVAL, min(MAX_CHECK_INTERVAL, lifetime / 10))

    async def renew_if_due(self) -> bool:
        """Renew when less than a third of the certificate's lifetime is left; True if renewed.

        A revoked worker's refusal propagates (the worker stops); other failures are logged,
        and the next check tries again while the current certificate still serves.
        """
        if not self._identity.stream_coordinators:
            return False  # the coordinator signs no certificates for us
        validity = self._validity()
        now = time.time()
        if validity is not None and now < validity.renew_at:
            return False
        # Near its end the certificate may expire on the way: then use the credential path.
        usable = validity is not None and now < validity.not_after - min(
            EXPIRY_MARGIN, (validity.not_after - validity.not_before) / 10
        )
        async with self._lock:
            for with_certificate in (True, False) if usable else (False,):
                try:
                    await self._renew(with_certificate)
                    return True
                except PermissionDeniedError:
                    raise
                except DeskfleetError as exc:
                    log.warning("certificate renewal failed: %s", exc.message)
        return False

    async def _renew(self, still_valid: bool) -> None:
        csr = await asyncio.to_thread(new_request, self._state, self._identity.name, new_key=False)
        # A valid certificate proves itself on the worker port; without one (expired, or none
        # yet) the coordinator accepts the credential alone on its main port.
        addresses = (
            self._identity.stream_coordinators if still_valid else self._identity.coordinators
        )
        credentials = self._credentials(still_valid)
        last: DeskfleetError | None = None
        for address in addresses:
            channel = (
                grpc.aio.secure_channel(address, credentials)
                if credentials is not None
                else grpc.aio.insecure_channel(address)
            )
            async with channel:
                try:
                    reply = await worker_pb2_grpc.WorkerGatewayStub(channel).RenewCertificate(
                        worker_pb2.RenewCertificateRequest(csr_pem=csr),
                        metadata=self._metadata,
                        timeout=RENEW_TIMEOUT,
                    )
                except grpc.aio.AioRpcError as exc:
                    last = from_rpc_error(exc, address)
                    if last.code == grpc.StatusCode.UNAVAILABLE:
                        continue
                    raise last from exc
            if reply.ca_pem:
                self._state.write(CA, reply.ca_pem)
            self._state.write(CLIENT_CERT, reply.certificate_pem)
            log.info(
                "client certificate renewed through %s; valid until %s",
                address,
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reply.not_after)),
            )
            return
        assert last is not None
        raise last

    async def keep_renewed(self) -> None:
        """Check the certificate periodically (for a worker that stays connected for weeks)."""
        while True:
            await asyncio.sleep(self.check_interval())
            try:
                await self.renew_if_due()
            except DeskfleetError as exc:
                # The stream's own checks end the session when the worker is refused.
                log.warning("certificate renewal refused: %s", exc.message)
