"""The coordinator's certificate authority: its files, the server certificate, worker certificates.

A directory made by `deskfleet-coordinator ca init` holds:

    ca.pem        the CA certificate: handed to workers and admins (`--ca-file`)
    ca.key        the CA's private key (0600): only `serve --ca-dir` reads it, to sign workers
    server.pem    the coordinator's certificate (SANs: the host names and addresses given)
    server.key    its private key (0600)

Keys are ECDSA P-256: small, fast to sign and verify, and supported by every TLS stack gRPC
uses. Worker certificates carry the worker id as their common name; the coordinator records the
fingerprint of each one it signs, so that only a worker's newest certificate is accepted.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared.errors import AuthenticationError, FailedPreconditionError, InvalidArgumentError
from shared.files import replace_atomically

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"
DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CA_DAYS = 3650  # the CA outlives many server and worker certificates; replacing it re-enrolls all
DEFAULT_SERVER_DAYS = 825
DEFAULT_WORKER_DAYS = 30
# Clocks of workers and coordinator differ a little: a certificate is valid from a minute ago.
BACKDATE = dt.timedelta(minutes=1)
MAX_CSR_BYTES = 16 * 1024


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and the facts the coordinator records about it."""

    pem: str
    common_name: str
    serial: str  # hex
    fingerprint: str  # sha256 of the DER, hex: what the coordinator matches a peer against
    not_before: float  # epoch seconds
    not_after: float

    @classmethod
    def from_pem(cls, pem: str | bytes) -> IssuedCertificate:
        data = pem.encode() if isinstance(pem, str) else pem
        try:
            cert = x509.load_pem_x509_certificate(data)
        except ValueError as exc:
            raise InvalidArgumentError("not a PEM certificate") from exc
        return cls._of(cert)

    @classmethod
    def _of(cls, cert: x509.Certificate) -> IssuedCertificate:
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return cls(
            pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
            common_name=str(names[0].value) if names else "",
            serial=format(cert.serial_number, "x"),
            fingerprint=fingerprint(cert),
            not_before=cert.not_valid_before_utc.timestamp(),
            not_after=cert.not_valid_after_utc.timestamp(),
        )


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def certificate_request(key: ec.EllipticCurvePrivateKey, common_name: str) -> str:
    """A PKCS#10 request for `key`; the coordinator sets the name it certifies itself."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or "deskfleet-worker")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "deskfleet"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


class CertificateAuthority:
    """The CA certificate and key: signs the server's certificate and the workers'."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self.cert = cert
        self._key = key
        self.pem = cert.public_bytes(serialization.Encoding.PEM).decode()

    @classmethod
    def create(cls, days: int = CA_DAYS) -> CertificateAuthority:
        key = new_private_key()
        now = dt.datetime.now(dt.UTC)
        name = _name("deskfleet CA")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        """The CA in `directory`, or a one-line error saying how to make one."""
        cert_path, key_path = directory / CA_CERT, directory / CA_KEY
        if not cert_path.exists() or not key_path.exists():
            raise FailedPreconditionError(
                f"{directory} holds no CA ({CA_CERT} and {CA_KEY}): run"
                f" `deskfleet-coordinator ca init --dir {directory}` first"
            )
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise FailedPreconditionError(f"cannot read the CA in {directory}: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise FailedPreconditionError(f"{key_path}: expected an ECDSA key")
        return cls(cert, key)

    def save(self, directory: Path) -> None:
        replace_atomically(directory / CA_KEY, private_key_pem(self._key), 0o600)
        replace_atomically(directory / CA_CERT, self.pem.encode(), 0o644)

    def issue(
        self,
        public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey,
        common_name: str,
        *,
        not_before: dt.datetime,
        not_after: dt.datetime,
        hosts: Sequence[str] = (),
    ) -> IssuedCertificate:
        """Sign a leaf certificate: a server's when `hosts` are given, else a worker's."""
        usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
            )
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False
            )
        return IssuedCertificate._of(builder.sign(self._key, hashes.SHA256()))

    def sign_request(self, csr_pem: str, common_name: str, days: float) -> IssuedCertificate:
        """A worker certificate for the key in `csr_pem`, named `common_name` (whatever the
        request says: a worker cannot choose whom it is certified as)."""
        if len(csr_pem) > MAX_CSR_BYTES:
            raise InvalidArgumentError("csr_pem: too large")
        try:
            csr = x509.load_pem_x509_csr(csr_pem.encode())
        except ValueError as exc:
            raise InvalidArgumentError("csr_pem: not a PEM certificate request") from exc
        if not csr.is_signature_valid:
            raise InvalidArgumentError("csr_pem: its signature does not match its key")
        key = csr.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
            raise InvalidArgumentError("csr_pem: the key must be ECDSA or RSA")
        if isinstance(key, rsa.RSAPublicKey) and key.key_size < 2048:
            raise InvalidArgumentError("csr_pem: an RSA key must have at least 2048 bits")
        now = dt.datetime.now(dt.UTC)
        validity = dt.timedelta(days=days)
        # Backdated for clock skew, but by a tenth at most: a short-lived certificate (tests)
        # must not look two-thirds spent, and so due for renewal, the moment it is issued.
        return self.issue(
            key,
            common_name,
            not_before=now - min(BACKDATE, validity / 10),
            not_after=now + validity,
        )

    def verify_peer(self, pem: bytes, now: float) -> IssuedCertificate:
        """Check a client certificate ourselves: issued by this CA, for client use, valid now.

        gRPC's Python API cannot ask for a client certificate and verify it without also
        requiring one, so the TLS layer only proves the peer holds the key; the rest is here.
        """
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            raise AuthenticationError("the client certificate cannot be read") from exc
        try:
            cert.verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, InvalidSignature) as exc:
            raise AuthenticationError(
                "the client certificate was not issued by this coordinator's CA"
            ) from exc
        issued = IssuedCertificate._of(cert)
        if not issued.not_before <= now <= issued.not_after:
            when = dt.datetime.fromtimestamp(issued.not_after, dt.UTC).isoformat(timespec="seconds")
            raise AuthenticationError(
                f"the client certificate of {issued.common_name} expired at {when}"
                if now > issued.not_after
                else f"the client certificate of {issued.common_name} is not valid yet"
            )
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            usages = x509.ExtendedKeyUsage([])
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
            raise AuthenticationError("the certificate presented is not a client certificate")
        return issued


def certificate_hosts(pem: bytes) -> set[str]:
    """The DNS names and addresses a certificate is for."""
    return _hosts_of(pem)


def _hosts_of(pem: bytes) -> set[str]:
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(a) for a in san.get_values_for_type(x509.IPAddress)
    }


def init_ca(directory: Path, hosts: Sequence[str], days: int) -> list[str]:
    """Create the CA (never replacing one) and a server certificate for `hosts`.

    Returns one line per thing done or kept. The server certificate is re-issued only when it
    is missing or does not name exactly `hosts`: it is cheap, the CA is not.
    """
    if days < 1:
        raise InvalidArgumentError("--days must be at least 1")
    hosts = list(dict.fromkeys(h.strip() for h in hosts if h.strip())) or list(DEFAULT_HOSTS)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = []
    if (directory / CA_CERT).exists() or (directory / CA_KEY).exists():
        ca = CertificateAuthority.load(directory)
        lines.append(f"CA kept: {directory / CA_CERT} (an existing CA is never replaced)")
    else:
        ca = CertificateAuthority.create()
        ca.save(directory)
        lines.append(f"CA created: {directory / CA_CERT} (key {directory / CA_KEY}, mode 0600)")
    server_pem = directory / SERVER_CERT
    if server_pem.exists() and (directory / SERVER_KEY).exists():
        current = server_pem.read_bytes()
        if _hosts_of(current) == {_canonical(h) for h in hosts} and _issued_by(current, ca):
            lines.append(f"server certificate kept: {server_pem} ({', '.join(hosts)})")
            return lines
    key = new_private_key()
    now = dt.datetime.now(dt.UTC)
    issued = ca.issue(
        key.public_key(),
        hosts[0],
        not_before=now - BACKDATE,
        not_after=now + dt.timedelta(days=days),
        hosts=hosts,
    )
    replace_atomically(directory / SERVER_KEY, private_key_pem(key), 0o600)
    replace_atomically(server_pem, issued.pem.encode(), 0o644)
    lines.append(
        f"server certificate written: {server_pem} for {', '.join(hosts)}, valid {days} days"
    )
    return lines


def _canonical(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host


def _issued_by(pem: bytes, ca: CertificateAuthority) -> bool:
    try:
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
