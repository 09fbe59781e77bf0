"""The worker's state directory: who it is (worker.json) and its credential (0600).

With TLS it also holds the coordinator's CA (`ca.pem`) and, with mutual TLS, the worker's
key (`client.key`, 0600), its last certificate request (`client.csr`) and its certificate
(`client.pem`), each replaced atomically.

One `deskfleet-worker run` at a time holds the directory (`StateLock`, on `run.lock`): two
processes on one identity would each supersede the other's stream at the coordinator, forever.
"""

from __future__ import annotations

import json
import os
import sys
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
RUN_LOCK = "run.lock"
# Windows locks byte ranges and keeps other processes from reading a locked one: the lock is
# taken past the process id written at the start of the file, so a second process can read it.
_LOCKED_BYTE = 4096


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


class StateLock:
    """The running worker's hold on its state directory: an advisory lock on `run.lock`, kept
    for the life of the process (the system drops it when the process ends, however it ends:
    nothing stale is left to clean up), with the holder's process id written in the file."""

    def __init__(self, path: Path) -> None:
        self.path = path / RUN_LOCK
        self._fd: int | None = None

    def acquire(self) -> StateLock:
        """Take the lock, or raise FailedPreconditionError naming the process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Opened without truncating: the holder's process id must stay readable.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(fd)
        except OSError:
            os.close(fd)
            holder = self.holder()
            who = f"process {holder}" if holder else "another process"
            raise FailedPreconditionError(
                f"the state directory {self.path.parent} is in use by {who} (another"
                " `deskfleet-worker run`): one worker process per state directory; stop that"
                " one first, or enroll this machine again into another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd  # not inherited by children (PEP 446): they cannot keep it held
        return self

    def holder(self) -> int | None:
        """The process id the lock file names (None when it names none)."""
        try:
            with self.path.open("rb") as fh:
                text = fh.read(32).decode("ascii", "replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        """Give the directory up; safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the lock


if sys.platform == "win32":
    import msvcrt

    def _lock(fd: int) -> None:
        os.lseek(fd, _LOCKED_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
