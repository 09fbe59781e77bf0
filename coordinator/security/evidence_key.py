"""The coordinator's evidence key: the Ed25519 key that signs the manifests of exported runs.

`deskfleet-coordinator init` writes it (PKCS#8 PEM, mode 0600), by default as `evidence.key`
beside a SQLite database; replicas sharing PostgreSQL are given one file
(`--evidence-key-file`) so that a bundle exported from any of them names the same key. The
private half never leaves that file; `deskfleet-coordinator evidence-key` prints the public
half and its fingerprint for auditors to pin.

A key file that others may read is refused rather than used: a signature is worth only as
much as the secrecy of the key, and a readable key could have been copied.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from shared import evidence_keys
from shared.errors import FailedPreconditionError
from shared.files import create_private

KEY_FILE_NAME = "evidence.key"
MAX_KEY_FILE_BYTES = 16 * 1024  # a PEM Ed25519 key is under 200 bytes


@dataclass(frozen=True)
class EvidenceKey:
    private: Ed25519PrivateKey
    path: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def fingerprint(self) -> str:
        return evidence_keys.fingerprint(self.public)

    @property
    def public_pem(self) -> str:
        return evidence_keys.public_pem(self.public)

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def create(path: Path) -> bool:
    """Write a new key to `path` (0600) unless a file is there; whether it did. A file that is
    there is left as it is: `load` says what is wrong with it."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return create_private(path, pem)


def load(path: Path) -> EvidenceKey:
    """The key in `path`, or a one-line FailedPreconditionError saying what is wrong."""
    try:
        # Looked at before it is opened: opening a FIFO put in its place would wait forever.
        if not stat.S_ISREG(path.stat().st_mode):
            raise FailedPreconditionError(f"{path}: the evidence key is not a regular file")
        with path.open("rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            data = fh.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise FailedPreconditionError(
            f"{path}: no evidence key there (`deskfleet-coordinator init` creates it)"
        ) from exc
    except OSError as exc:
        raise FailedPreconditionError(
            f"{path}: cannot read the evidence key ({exc.strerror})"
        ) from exc
    if mode & 0o077:
        raise FailedPreconditionError(
            f"{path}: the evidence key is readable by others (mode {stat.S_IMODE(mode):04o});"
            f" `chmod 600 {path}`, and make a new key if anyone may have copied it"
        )
    if len(data) > MAX_KEY_FILE_BYTES:
        raise FailedPreconditionError(f"{path}: not an evidence key (the file is too large)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise FailedPreconditionError(
            f"{path}: not an evidence key (an unencrypted PEM Ed25519 private key)"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise FailedPreconditionError(f"{path}: not an Ed25519 key")
    return EvidenceKey(key, path)
