"""Secret values at rest: sealed with AES-256-GCM under a key kept outside the database.

The key file (`init` creates it, mode 0600; `--secrets-key-file`, by default `secrets.key`
next to a SQLite database) holds one key per line, `dfk1:` and 32 bytes in base64. The first
line seals; every line opens, so that a rotation (`deskfleet-coordinator rotate-secrets-key`)
never leaves a value that no key opens, even if it stops half-way.

A sealed value is `dfs1:KEYID:BASE64(nonce || ciphertext)`, KEYID the first 8 hex digits of the
key's SHA-256. The owner and the secret's name are authenticated with it: a sealed value copied
into another owner's row, or under another name, does not open. Values stored before sealing
existed (no `dfs1:` prefix) are plaintext; `seal_all` seals them at `init` and at start (a
plaintext value that itself began with `dfs1:` would not open: none is known to exist).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.orm import Session

from coordinator.store import desktop as queries
from coordinator.store.models import SecretRow
from shared.errors import FailedPreconditionError
from shared.files import create_private, replace_atomically

KEY_PREFIX = "dfk1:"
SEALED_PREFIX = "dfs1:"
KEY_FILE_NAME = "secrets.key"
NO_KEY = (
    "secrets are unavailable: this coordinator has no secrets key (serve --secrets-key-file;"
    " `deskfleet-coordinator init` creates it)"
)


def _key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def _aad(owner_id: str, name: str) -> bytes:
    return f"deskfleet secret\x00{owner_id}\x00{name}".encode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(SEALED_PREFIX)


@dataclass(frozen=True)
class SecretBox:
    """Seals with the first key, opens with any of them."""

    keys: tuple[bytes, ...]

    @classmethod
    def load(cls, path: Path) -> SecretBox:
        """The keys in `path`, or a one-line FailedPreconditionError."""
        try:
            lines = path.read_text().split()
        except FileNotFoundError as exc:
            raise FailedPreconditionError(
                f"{path}: no secrets key there (`deskfleet-coordinator init` creates it)"
            ) from exc
        except OSError as exc:
            raise FailedPreconditionError(
                f"{path}: cannot read the secrets key ({exc.strerror})"
            ) from exc
        keys = []
        for line in lines:
            try:
                if not line.startswith(KEY_PREFIX):
                    raise ValueError(line)
                key = base64.b64decode(line[len(KEY_PREFIX) :], validate=True)
            except (ValueError, binascii.Error) as exc:
                raise FailedPreconditionError(f"{path}: not a deskfleet secrets key file") from exc
            if len(key) != 32:
                raise FailedPreconditionError(f"{path}: not a deskfleet secrets key file")
            keys.append(key)
        if not keys:
            raise FailedPreconditionError(f"{path}: the secrets key file is empty")
        return cls(tuple(keys))

    @property
    def key_id(self) -> str:
        return _key_id(self.keys[0])

    def seal(self, owner_id: str, name: str, value: str) -> str:
        nonce = os.urandom(12)
        sealed = AESGCM(self.keys[0]).encrypt(nonce, value.encode(), _aad(owner_id, name))
        return f"{SEALED_PREFIX}{self.key_id}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, owner_id: str, name: str, stored: str) -> str:
        """The value of a stored secret (a plaintext one as it is); FailedPrecondition when no
        key of this box opens it."""
        if not is_sealed(stored):
            return stored
        key_id, _, body = stored[len(SEALED_PREFIX) :].partition(":")
        for key in self.keys:
            if _key_id(key) != key_id:
                continue
            try:
                raw = base64.b64decode(body, validate=True)
                return AESGCM(key).decrypt(raw[:12], raw[12:], _aad(owner_id, name)).decode()
            except (ValueError, binascii.Error, InvalidTag):
                break
        raise FailedPreconditionError(
            f"secret {name!r} does not open with this coordinator's secrets key (a rotation it"
            " has not been restarted after, or another key file)"
        )

    def reseal(self, row: SecretRow) -> bool:
        """Seal `row` under the first key unless it already is; whether it changed."""
        if is_sealed(row.value) and row.value.startswith(f"{SEALED_PREFIX}{self.key_id}:"):
            return False
        row.value = self.seal(row.owner_id, row.name, self.open(row.owner_id, row.name, row.value))
        return True


def create_key_file(path: Path) -> bool:
    """Write a new key to `path` (mode 0600) unless a file is there; whether it did."""
    return create_private(path, _key_line(new_key()))


def _key_line(key: bytes) -> str:
    return f"{KEY_PREFIX}{base64.b64encode(key).decode()}\n"


def write_keys(path: Path, keys: tuple[bytes, ...]) -> None:
    replace_atomically(path, "".join(_key_line(k) for k in keys), 0o600)


def new_key() -> bytes:
    return os.urandom(32)


def seal_all(s: Session, box: SecretBox, *, plaintext_only: bool = False) -> int:
    """Seal stored values under the box's first key: plaintext ones, and (unless
    `plaintext_only`) those under an older key; how many changed. One transaction."""
    rows = queries.all_secrets(s, lock=True)
    return sum(box.reseal(row) for row in rows if not (plaintext_only and is_sealed(row.value)))


def count_plaintext(s: Session) -> int:
    return sum(not is_sealed(row.value) for row in queries.all_secrets(s))
