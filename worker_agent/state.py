"""The worker's state directory: who it is (worker.json) and its credential (0600).

With TLS it also holds the coordinator's CA (`ca.pem`) and, with mutual TLS, the worker's
key (`client.key`, 0600), its last certificate request (`client.csr`) and its certificate
(`client.pem`), each replaced atomically.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from shared.errors import FailedPreconditionError, InvalidArgumentError
from shared.files import replace_atomically

IDENTITY = "worker.json"
CREDENTIAL = "credential"
CA = "ca.pem"
CLIENT_KEY = "client.key"
CLIENT_CSR = "client.csr"
CLIENT_CERT = "client.pem"
SECRETS = (CREDENTIAL, CLIENT_KEY)  # readable by the worker's user only (0600)


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    name: str
    coordinators: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    allowed_capabilities: list[str] = field(default_factory=list)
    # Where streams go with the client certificate: the coordinators' worker listeners.
    stream_coordinators: list[str] = field(default_factory=list)
    plaintext: bool = False  # enrolled with --plaintext beyond loopback: keep doing so


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def enrolled(self) -> bool:
        return (self.path / CREDENTIAL).exists()

    @property
    def tls(self) -> bool:
        return (self.path / CA).exists()

    def file(self, name: str) -> Path:
        return self.path / name

    def write(self, name: str, text: str, mode: int = 0o644) -> None:
        """Replace one file atomically (certificates, the CA, the key with mode 0600)."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_atomically(self.path / name, text, mode)

    def read_bytes(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read {self.path / name}: {exc.strerror}") from exc

    def save(self, identity: WorkerIdentity, credential: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_atomically(
            self.path / IDENTITY, json.dumps(asdict(identity), indent=2) + "\n", 0o644
        )
        replace_atomically(self.path / CREDENTIAL, credential + "\n", 0o600)

    def save_credential(self, credential: str) -> None:
        """Replace the credential (after a rotation), atomically and readable by us only."""
        replace_atomically(self.path / CREDENTIAL, credential + "\n", 0o600)

    def tighten_secrets(self) -> list[str]:
        """Make the credential and the client key 0600 again if something widened them; the
        names of the files that had to be fixed."""
        fixed = []
        for name in SECRETS:
            path = self.path / name
            try:
                mode = path.stat().st_mode & 0o777
            except FileNotFoundError:
                continue
            if mode != 0o600:
                path.chmod(0o600)
                fixed.append(f"{path} (was {mode:o})")
        return fixed

    def load(self) -> tuple[WorkerIdentity, str]:
        if not self.enrolled:
            raise FailedPreconditionError(
                f"{self.path} holds no enrollment: run `deskfleet-worker enroll --state-dir"
                f" {self.path} ...` first"
            )
        try:
            data = json.loads((self.path / IDENTITY).read_text())
            credential = (self.path / CREDENTIAL).read_text().strip()
            return WorkerIdentity(**data), credential
        except (OSError, ValueError, TypeError) as exc:
            raise InvalidArgumentError(f"{self.path} is damaged ({exc}); enroll again") from exc
