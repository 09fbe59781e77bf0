"""The public half of a coordinator's evidence key: how it is written and named.

An evidence bundle names the key that signed its manifest by the key's fingerprint,
`SHA256:` and the hex SHA-256 of the raw 32-byte Ed25519 public key, so that a person can pin
it (`deskfleet verify --key`) after reading it once from `deskfleet-coordinator evidence-key`
on a machine they trust. Verifying needs only this module and the bundle: no coordinator.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from shared.errors import InvalidArgumentError

FINGERPRINT_PREFIX = "SHA256:"


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(key: Ed25519PublicKey) -> str:
    return FINGERPRINT_PREFIX + hashlib.sha256(raw_public(key)).hexdigest()


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def load_public_pem(text: bytes, where: str) -> Ed25519PublicKey:
    """An Ed25519 public key in PEM, or one InvalidArgumentError line naming `where`."""
    try:
        key = serialization.load_pem_public_key(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"{where}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidArgumentError(f"{where}: not an Ed25519 public key")
    return key
