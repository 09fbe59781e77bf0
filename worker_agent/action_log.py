"""The worker's on-disk action log (`<state>/actions/`): finished work is never redone.

    started/<action_id>.<attempt_id>.json   written durably before the action acts
    outbox/<action_id>.<attempt_id>.json    the receipt, written durably after it acted

One file per attempt, not per action: a superseded attempt can still be finishing while its
successor runs, and both receipts must reach the coordinator. A started file without a live
execution is an attempt the process died in: its outcome is unknown and it is never rerun.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import encode_result

log = logging.getLogger("deskfleet.worker")

# Ids become file names: nothing that could climb out of the directory or hide a dot.
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
T = TypeVar("T")

REMEMBER_ACKED = 10_000  # acknowledged attempts remembered in memory, to refuse re-dispatch


@dataclass(frozen=True)
class StartedRecord:
    action_id: str
    attempt_id: str
    epoch: int
    run_id: str
    kind: str
    started_at: float
    traceparent: str = ""  # this worker's span of the attempt (W3C), to find it in a trace

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StartedRecord:
        return cls(
            str(data["action_id"]),
            str(data["attempt_id"]),
            int(data["epoch"]),
            str(data["run_id"]),
            str(data["kind"]),
            float(data.get("started_at", 0.0)),
            str(data.get("traceparent", "")),
        )


@dataclass(frozen=True)
class StoredArtifact:
    """An artifact of a receipt, kept in a file beside the outbox until acknowledged."""

    sha256: str
    media_type: str
    width: int
    height: int
    path: str

    def to_proto(self, data: bytes | None = None) -> worker_pb2.ReceiptArtifact | None:
        """The artifact for a receipt message: `data` if its bytes are still in memory (the
        first send), else read back from its file (a resend, after a reconnect or restart)."""
        if data is None:
            try:
                data = Path(self.path).read_bytes()
            except OSError as exc:
                log.warning("artifact %s of a receipt is gone: %s", self.sha256, exc)
                return None
        return worker_pb2.ReceiptArtifact(
            sha256=self.sha256,
            media_type=self.media_type,
            data=data,
            width=self.width,
            height=self.height,
        )


@dataclass(frozen=True)
class ReceiptRecord:
    action_id: str
    run_id: str
    attempt_id: str
    epoch: int
    status: str
    result_json: str
    error: str
    started_at: float
    finished_at: float
    artifacts: tuple[StoredArtifact, ...] = ()
    traceparent: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReceiptRecord:
        artifacts = tuple(StoredArtifact(**a) for a in data.get("artifacts", ()))
        return cls(
            str(data["action_id"]),
            str(data["run_id"]),
            str(data["attempt_id"]),
            int(data["epoch"]),
            str(data["status"]),
            str(data["result_json"]),
            str(data["error"]),
            float(data["started_at"]),
            float(data["finished_at"]),
            artifacts,
            str(data.get("traceparent", "")),
        )

    def to_proto(self, in_memory: Mapping[str, bytes] | None = None) -> worker_pb2.Receipt:
        """The receipt message; artifacts whose bytes are in `in_memory` (by sha256) are not
        read back from their files."""
        fields = asdict(self)
        del fields["artifacts"]
        held = in_memory or {}
        protos = [a.to_proto(held.get(a.sha256)) for a in self.artifacts]
        return worker_pb2.Receipt(**fields, artifacts=[p for p in protos if p is not None])


class HeldEntry(NamedTuple):
    action_id: str
    attempt_id: str
    epoch: int
    state: str  # "running" | "finished" | "interrupted"

    def to_proto(self) -> worker_pb2.HeldAction:
        return worker_pb2.HeldAction(**self._asdict())


class Verdict(enum.Enum):
    ACCEPT = "accept"  # run it
    DUPLICATE = "duplicate"  # this very attempt is running: ignore the dispatch
    FINISHED = "finished"  # this attempt has a receipt: send it again, do not rerun
    ACKNOWLEDGED = "acknowledged"  # finished and acknowledged: refuse
    STALE = "stale"  # a higher epoch was seen for the action: refuse
    INTERRUPTED = "interrupted"  # the process died during this attempt: refuse, never rerun


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    reason: str = ""  # why a dispatch is refused
    receipt: ReceiptRecord | None = None  # for FINISHED
    superseded: tuple[str, ...] = ()  # for ACCEPT: live attempts of the action to cancel


class ActionLog:
    """Started records and unacknowledged receipts, plus which attempts run in this process.

    Thread-safe: attempts begin and finish on pool threads, the stream reads it on the loop.
    """

    def __init__(self, root: Path) -> None:
        self.started_dir = root / "started"
        self.outbox_dir = root / "outbox"
        self.artifacts_dir = root / "artifacts"
        for directory in (self.started_dir, self.outbox_dir, self.artifacts_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            for tmp in directory.glob(".*.tmp"):  # a write the last process did not finish
                tmp.unlink(missing_ok=True)
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], int] = {}  # (action, attempt) -> epoch
        self._epochs: dict[str, int] = {}  # action -> highest epoch seen
        self._acked: OrderedDict[tuple[str, str], None] = OrderedDict()
        for receipt in self._receipts():
            self._see_epoch(receipt.action_id, receipt.epoch)
        for started in self._started():
            if self._has_receipt(started.action_id, started.attempt_id):
                # The last process died between writing the receipt and removing this.
                self._started_path(started.action_id, started.attempt_id).unlink(missing_ok=True)
            else:
                self._see_epoch(started.action_id, started.epoch)

    def admit(self, action_id: str, attempt_id: str, epoch: int) -> Admission:
        """Decide what to do with a dispatch; on ACCEPT the attempt counts as live from now."""
        for name, value in (("action_id", action_id), ("attempt_id", attempt_id)):
            if not _ID.fullmatch(value):
                raise InvalidArgumentError(f"{name} {value!r} is not a valid id")
        key = (action_id, attempt_id)
        with self._lock:
            if key in self._live:
                return Admission(Verdict.DUPLICATE)
            receipt = self.receipt(action_id, attempt_id)
            if receipt is not None:
                return Admission(Verdict.FINISHED, receipt=receipt)
            if key in self._acked:
                return Admission(
                    Verdict.ACKNOWLEDGED,
                    f"attempt {attempt_id} already finished and was acknowledged",
                )
            highest = self._epochs.get(action_id)
            if highest is not None and epoch < highest:
                return Admission(Verdict.STALE, f"stale epoch {epoch} < {highest}")
            if self._started_path(action_id, attempt_id).exists():
                return Admission(
                    Verdict.INTERRUPTED,
                    f"attempt {attempt_id} was interrupted by a worker restart;"
                    " its outcome is unknown",
                )
            # A newer attempt means the coordinator has decided about the older ones.
            for old in self._started():
                if old.action_id == action_id and (action_id, old.attempt_id) not in self._live:
                    self._started_path(action_id, old.attempt_id).unlink(missing_ok=True)
            superseded = tuple(t for (a, t) in self._live if a == action_id)
            self._live[key] = epoch
            self._see_epoch(action_id, epoch)
            return Admission(Verdict.ACCEPT, superseded=superseded)

    def begin(self, record: StartedRecord) -> None:
        """Record durably that the attempt is about to act."""
        _write_durably(self._started_path(record.action_id, record.attempt_id), asdict(record))

    def keep_artifact(
        self, sha256: str, media_type: str, data: bytes, width: int, height: int
    ) -> StoredArtifact:
        """Write an artifact durably before the receipt that names it."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise InvalidArgumentError(f"artifact id {sha256!r} is not a sha256")
        path = self.artifacts_dir / f"{sha256}.bin"
        if not path.exists():
            # Written whole (rename) but not synced: a screenshot lost to a power cut costs a
            # new screenshot, while an fsync of every frame costs every frame its latency.
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return StoredArtifact(sha256, media_type, width, height, str(path))

    def finish(self, receipt: ReceiptRecord) -> None:
        """Record the receipt durably, then forget the started record; the attempt is over."""
        key = (receipt.action_id, receipt.attempt_id)
        try:
            _write_durably(self._outbox_path(*key), asdict(receipt))
            self._started_path(*key).unlink(missing_ok=True)
        finally:
            with self._lock:
                self._live.pop(key, None)

    def release(self, action_id: str, attempt_id: str) -> None:
        """An admitted attempt that will not run after all (refused before it started)."""
        with self._lock:
            self._live.pop((action_id, attempt_id), None)

    def acknowledge(self, action_id: str, attempt_id: str) -> bool:
        """The coordinator has the receipt (or refused it): forget the attempt. True if held."""
        if not (_ID.fullmatch(action_id) and _ID.fullmatch(attempt_id)):
            return False
        key = (action_id, attempt_id)
        with self._lock:
            found = self._outbox_path(*key).exists()
            if found:
                for artifact in self._artifacts_of(*key):
                    Path(artifact.path).unlink(missing_ok=True)
            self._outbox_path(*key).unlink(missing_ok=True)
            if key not in self._live:  # an interrupted attempt the coordinator has settled
                found = self._started_path(*key).exists() or found
                self._started_path(*key).unlink(missing_ok=True)
            self._acked[key] = None
            while len(self._acked) > REMEMBER_ACKED:
                self._acked.popitem(last=False)
            return found

    def held(self) -> list[HeldEntry]:
        """Every attempt this worker knows about, for the Hello."""
        with self._lock:
            entries: dict[tuple[str, str], HeldEntry] = {}
            for r in self._receipts():
                entries[(r.action_id, r.attempt_id)] = HeldEntry(
                    r.action_id, r.attempt_id, r.epoch, "finished"
                )
            for s in self._started():
                key = (s.action_id, s.attempt_id)
                state = "running" if key in self._live else "interrupted"
                entries.setdefault(key, HeldEntry(s.action_id, s.attempt_id, s.epoch, state))
            for (a, t), epoch in self._live.items():  # admitted, still waiting for a thread
                entries.setdefault((a, t), HeldEntry(a, t, epoch, "running"))
            return sorted(entries.values())

    def pending_receipts(self) -> list[ReceiptRecord]:
        """Receipts not yet acknowledged, oldest first: sent again after every Welcome."""
        return sorted(self._receipts(), key=lambda r: (r.finished_at, r.action_id))

    def receipt(self, action_id: str, attempt_id: str) -> ReceiptRecord | None:
        data = _read(self._outbox_path(action_id, attempt_id))
        return ReceiptRecord.from_json(data) if data is not None else None

    def _artifacts_of(self, action_id: str, attempt_id: str) -> tuple[StoredArtifact, ...]:
        receipt = self.receipt(action_id, attempt_id)
        return receipt.artifacts if receipt is not None else ()

    def highest_epoch(self, action_id: str) -> int | None:
        with self._lock:
            return self._epochs.get(action_id)

    def is_live(self, action_id: str, attempt_id: str) -> bool:
        with self._lock:
            return (action_id, attempt_id) in self._live

    def _has_receipt(self, action_id: str, attempt_id: str) -> bool:
        return self._outbox_path(action_id, attempt_id).exists()

    def _see_epoch(self, action_id: str, epoch: int) -> None:
        self._epochs[action_id] = max(epoch, self._epochs.get(action_id, epoch))

    def _started_path(self, action_id: str, attempt_id: str) -> Path:
        return self.started_dir / f"{action_id}.{attempt_id}.json"

    def _outbox_path(self, action_id: str, attempt_id: str) -> Path:
        return self.outbox_dir / f"{action_id}.{attempt_id}.json"

    def _started(self) -> list[StartedRecord]:
        return _load_all(self.started_dir, StartedRecord.from_json)

    def _receipts(self) -> list[ReceiptRecord]:
        return _load_all(self.outbox_dir, ReceiptRecord.from_json)


def _load_all(directory: Path, parse: Callable[[dict[str, Any]], T]) -> list[T]:
    records: list[T] = []
    for path in sorted(directory.glob("*.json")):
        data = _read(path)
        if data is None:
            continue
        try:
            records.append(parse(data))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring damaged action record %s: %s", path, exc)
    return records


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return None  # acknowledged or finished meanwhile
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable action record %s: %s", path, exc)
        return None
    return data if isinstance(data, dict) else None


def _write_durably(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file, fsync, rename, fsync the directory: all or nothing, on disk."""
    _write_bytes_durably(path, encode_result(data).encode("ascii"))


def _write_bytes_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    if os.name == "posix":  # the rename itself is durable only once the directory is synced
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
