"""The worker's action log (`<state>/actions/`): finished work is never redone.

    action.log         one append-only file of framed records, replayed into memory at start
    artifacts/<sha>    an artifact of an unacknowledged receipt

Records: `started` (written durably before a non-idempotent attempt acts), `receipt` (written
durably after any attempt acted: the outbox), `ack` (the coordinator has the receipt) and
`forget` (a newer attempt settled an interrupted one). Only `started` and `receipt` are synced,
one `fdatasync` for every record appended while the previous sync ran (group commit); an `ack`
or `forget` lost to a power cut only means a receipt sent again, which the coordinator
recognises. Everything is answered from memory; the file is read only at start.

Each record is framed as magic, length and CRC-32: a record torn by a power cut mid-append (or
the zeros a file system may leave after it) ends the replay there, and the file is cut back
to the last whole record. Acknowledged records are dropped by rewriting the live ones into a
new file once they are most of the file.

One record per attempt, not per action: a superseded attempt can still be finishing while its
successor runs, and both receipts must reach the coordinator. A started record without a live
execution is an attempt the process died in: its outcome is unknown and it is never rerun.
Attempts whose rerun is harmless (`shared.action_kinds.rerun_is_harmless`) have no started
record: a restart forgets them and the coordinator sends them again.

A state directory of an older worker (`started/` and `outbox/`, one JSON file per record) is
taken into the log once at start and removed.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import shutil
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import encode_result

log = logging.getLogger("deskfleet.worker")

# Action and attempt ids: plain tokens, nothing that could climb out of a directory.
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
T = TypeVar("T")

REMEMBER_ACKED = 10_000  # acknowledged attempts remembered in memory, to refuse re-dispatch
LOG_NAME = "action.log"
COMPACT_AT = 256 * 1024  # bytes of log before acknowledged records are worth dropping
_MAGIC = b"DF"
_FRAME = struct.Struct(">2sII")  # magic, payload length, CRC-32 of the payload
MAX_RECORD = 1 << 30  # a length beyond this is damage, not a record
_BINARY = getattr(os, "O_BINARY", 0)  # Windows would otherwise turn \n into \r\n
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync

Key = tuple[str, str]  # (action_id, attempt_id)


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

    def __init__(self, root: Path, *, compact_at: int = COMPACT_AT) -> None:
        self.root = root
        self.path = root / LOG_NAME
        self.artifacts_dir = root / "artifacts"
        self._compact_at = compact_at
        for directory in (root, self.artifacts_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            for tmp in directory.glob(".*.tmp"):  # a write the last process did not finish
                tmp.unlink(missing_ok=True)
        self._lock = threading.Lock()  # the state below, and appends to the file
        self._live: dict[Key, int] = {}  # (action, attempt) -> epoch
        self._epochs: dict[str, int] = {}  # action -> highest epoch seen
        self._acked: OrderedDict[Key, None] = OrderedDict()
        self._started: dict[Key, StartedRecord] = {}
        self._receipts: dict[Key, ReceiptRecord] = {}
        self._sizes: dict[Key, int] = {}  # bytes of the live records of each attempt
        self._live_bytes = 0
        # Group commit: one thread syncs at a time; whoever appended meanwhile waits for the
        # next sync, which covers every record written before it began.
        self._sync_turn = threading.Condition()
        self._syncing = False
        # Positions in everything ever appended (not in the file, which a rewrite shortens).
        self._appended = self._synced = 0
        self.syncs = 0  # fdatasync calls so far (the benchmark counts them)

        created = not self.path.exists()
        good = self._replay()
        self._fd = self._open()
        if os.fstat(self._fd).st_size > good:
            log.warning(
                "the action log ends in a torn record (a write cut short): ignoring its last"
                " %d bytes",
                os.fstat(self._fd).st_size - good,
            )
            os.ftruncate(self._fd, good)
            self._sync_file()
        if created:
            _sync_directory(root)
        self._size = good  # the file's length
        self._import_older_layout()
        self._compact_if_due()

    # ------------------------------------------------------------------ decisions

    def admit(self, action_id: str, attempt_id: str, epoch: int) -> Admission:
        """Decide what to do with a dispatch; on ACCEPT the attempt counts as live from now."""
        for name, value in (("action_id", action_id), ("attempt_id", attempt_id)):
            if not _ID.fullmatch(value):
                raise InvalidArgumentError(f"{name} {value!r} is not a valid id")
        key = (action_id, attempt_id)
        with self._lock:
            if key in self._live:
                return Admission(Verdict.DUPLICATE)
            receipt = self._receipts.get(key)
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
            if key in self._started:
                return Admission(
                    Verdict.INTERRUPTED,
                    f"attempt {attempt_id} was interrupted by a worker restart;"
                    " its outcome is unknown",
                )
            # A newer attempt means the coordinator has decided about the older ones.
            settled = [k for k in self._started if k[0] == action_id and k not in self._live]
            for old in settled:
                self._forget_started(old)
            if settled:
                try:
                    self._write(b"".join(framed({"op": "forget", "key": list(k)}) for k in settled))
                except OSError as exc:  # after a restart they are reported again: harmless
                    log.warning("could not record settled attempts of %s: %s", action_id, exc)
            superseded = tuple(t for (a, t) in self._live if a == action_id)
            self._live[key] = epoch
            self._see_epoch(action_id, epoch)
            return Admission(Verdict.ACCEPT, superseded=superseded)

    def begin(self, record: StartedRecord) -> None:
        """Record durably that the attempt is about to act."""
        key = (record.action_id, record.attempt_id)
        frame = framed({"op": "started", **asdict(record)})
        with self._lock:
            end = self._write(frame)
            self._put(key, len(frame), started=record)
        self._sync(end)

    def keep_artifact(
        self, sha256: str, media_type: str, data: bytes, width: int, height: int
    ) -> StoredArtifact:
        """Write an artifact before the receipt that names it."""
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
        """Record the receipt durably (it replaces the started record); the attempt is over."""
        key = (receipt.action_id, receipt.attempt_id)
        frame = framed({"op": "receipt", **asdict(receipt)})
        try:
            with self._lock:
                end = self._write(frame)
                self._put(key, len(frame), receipt=receipt)
            self._sync(end)
        finally:
            with self._lock:
                self._live.pop(key, None)
        self._compact_if_due()

    def release(self, action_id: str, attempt_id: str) -> None:
        """An admitted attempt that will not run after all (refused before it started)."""
        with self._lock:
            self._live.pop((action_id, attempt_id), None)

    def acknowledge(self, action_id: str, attempt_id: str) -> bool:
        """The coordinator has the receipt (or refused it): forget the attempt. True if held.

        Not synced: lost to a power cut, the receipt is sent again and recognised."""
        if not (_ID.fullmatch(action_id) and _ID.fullmatch(attempt_id)):
            return False
        key = (action_id, attempt_id)
        with self._lock:
            receipt = self._receipts.get(key)
            if receipt is not None:
                for artifact in receipt.artifacts:
                    Path(artifact.path).unlink(missing_ok=True)
            # Or an interrupted attempt the coordinator has settled.
            interrupted = key in self._started and key not in self._live
            found = receipt is not None or interrupted
            if found:
                self._drop(key)
                try:
                    self._write(framed({"op": "ack", "key": list(key)}))
                except OSError as exc:  # the receipt comes back after a restart: harmless
                    log.warning("could not record the acknowledgement of %s: %s", action_id, exc)
            self._acked[key] = None
            while len(self._acked) > REMEMBER_ACKED:
                self._acked.popitem(last=False)
            return found

    # ------------------------------------------------------------------ reading

    def held(self) -> list[HeldEntry]:
        """Every attempt this worker knows about, for the Hello."""
        with self._lock:
            entries: dict[Key, HeldEntry] = {}
            for key, r in self._receipts.items():
                entries[key] = HeldEntry(r.action_id, r.attempt_id, r.epoch, "finished")
            for key, s in self._started.items():
                state = "running" if key in self._live else "interrupted"
                entries.setdefault(key, HeldEntry(s.action_id, s.attempt_id, s.epoch, state))
            for (a, t), epoch in self._live.items():  # no started record, or not begun yet
                entries.setdefault((a, t), HeldEntry(a, t, epoch, "running"))
            return sorted(entries.values())

    def pending_receipts(self) -> list[ReceiptRecord]:
        """Receipts not yet acknowledged, oldest first: sent again after every Welcome."""
        with self._lock:
            receipts = list(self._receipts.values())
        return sorted(receipts, key=lambda r: (r.finished_at, r.action_id))

    def receipt(self, action_id: str, attempt_id: str) -> ReceiptRecord | None:
        with self._lock:
            return self._receipts.get((action_id, attempt_id))

    def highest_epoch(self, action_id: str) -> int | None:
        with self._lock:
            return self._epochs.get(action_id)

    def is_live(self, action_id: str, attempt_id: str) -> bool:
        with self._lock:
            return (action_id, attempt_id) in self._live

    # ------------------------------------------------------------------ state

    def _put(
        self,
        key: Key,
        size: int,
        *,
        started: StartedRecord | None = None,
        receipt: ReceiptRecord | None = None,
    ) -> None:
        if receipt is not None:
            self._drop(key)  # the receipt supersedes the started record
            self._receipts[key] = receipt
            self._see_epoch(receipt.action_id, receipt.epoch)
        elif started is not None:
            if key in self._receipts:
                return  # a started record after its receipt says nothing new
            self._drop(key)
            self._started[key] = started
            self._see_epoch(started.action_id, started.epoch)
        self._sizes[key] = size
        self._live_bytes += size

    def _drop(self, key: Key) -> None:
        self._started.pop(key, None)
        self._receipts.pop(key, None)
        self._live_bytes -= self._sizes.pop(key, 0)

    def _forget_started(self, key: Key) -> None:
        if key in self._started:
            self._drop(key)

    def _see_epoch(self, action_id: str, epoch: int) -> None:
        self._epochs[action_id] = max(epoch, self._epochs.get(action_id, epoch))

    def _apply(self, record: dict[str, Any], size: int) -> None:
        """One record read back from the log (at start)."""
        op = record.get("op")
        if op == "started":
            s = StartedRecord.from_json(record)
            self._put((s.action_id, s.attempt_id), size, started=s)
        elif op == "receipt":
            r = ReceiptRecord.from_json(record)
            self._put((r.action_id, r.attempt_id), size, receipt=r)
        elif op in ("ack", "forget"):
            action_id, attempt_id = (str(x) for x in record["key"])
            key = (action_id, attempt_id)
            if op == "ack":
                self._drop(key)
                self._acked[key] = None
                while len(self._acked) > REMEMBER_ACKED:
                    self._acked.popitem(last=False)
            else:
                self._forget_started(key)
        else:
            raise ValueError(f"unknown record {op!r}")

    # ------------------------------------------------------------------ the file

    def _replay(self) -> int:
        """Read the log into memory; the length of its whole records."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        good = 0
        for offset, end, payload in read_frames(data):
            try:
                record = json.loads(payload.decode("ascii"))
                if not isinstance(record, dict):
                    raise ValueError("not an object")
                self._apply(record, end - offset)
            except (KeyError, TypeError, ValueError) as exc:
                # Whole and checksummed, so written by a worker that meant it: skip, go on.
                log.warning("ignoring a damaged action record at byte %d: %s", offset, exc)
            good = end
        return good

    def _write(self, data: bytes) -> int:
        """Append (under the lock); the position after `data`, for `_sync`."""
        try:
            written = _write_all(self._fd, data)
        except OSError:
            # A half record would hide every later one from the replay.
            os.ftruncate(self._fd, self._size)
            raise
        self._size += written
        self._appended += written
        return self._appended

    def _sync(self, upto: int) -> None:
        """Return once everything appended up to position `upto` is on disk."""
        with self._sync_turn:
            while self._synced < upto and self._syncing:
                self._sync_turn.wait()
            if self._synced >= upto:
                return  # another thread's sync covered this record
            self._syncing = True
        try:
            # Read without the lock (a rewrite holds it while waiting for this sync to end):
            # it only grows, and already counts this thread's own record.
            target = self._appended
            self._sync_file()
        except BaseException:
            with self._sync_turn:
                self._syncing = False
                self._sync_turn.notify_all()
            raise
        with self._sync_turn:
            self._syncing = False
            self._synced = max(self._synced, target)
            self._sync_turn.notify_all()

    def _sync_file(self) -> None:
        _fdatasync(self._fd)
        self.syncs += 1

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _BINARY, 0o600)

    def _compact_if_due(self) -> None:
        with self._lock:
            if self._size < self._compact_at or self._live_bytes * 2 >= self._size:
                return
            try:
                self._rewrite()
            except OSError as exc:  # the log stays as it was, only longer
                log.warning("could not compact the action log: %s", exc)

    def _rewrite(self) -> None:
        """(Under the lock) Replace the log with its live records: acknowledged ones dropped.

        Waits for a sync in flight: its file descriptor is about to be closed."""
        with self._sync_turn:
            while self._syncing:
                self._sync_turn.wait()
            self._syncing = True
        try:
            frames = [framed({"op": "started", **asdict(s)}) for s in self._started.values()]
            frames += [framed({"op": "receipt", **asdict(r)}) for r in self._receipts.values()]
            data = b"".join(frames)
            tmp = self.root / f".{LOG_NAME}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _BINARY, 0o600)
            try:
                _write_all(fd, data)
                _fdatasync(fd)
                self.syncs += 1
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            finally:
                os.close(fd)
            # Both closed before the rename: Windows renames no open file.
            os.close(self._fd)
            try:
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            finally:
                self._fd = self._open()  # the new file, or the old one if the rename failed
            _sync_directory(self.root)
            self._size = len(data)
            self._synced = self._appended  # every live record is in the synced new file
            log.debug("action log compacted to %d live records", len(frames))
        finally:
            with self._sync_turn:
                self._syncing = False
                self._sync_turn.notify_all()

    def _import_older_layout(self) -> None:
        """Take the one-file-per-record directories of an older worker into the log, once."""
        old = [self.root / "started", self.root / "outbox"]
        if not any(d.is_dir() for d in old):
            return
        started = _load_all(old[0], StartedRecord.from_json)
        receipts = _load_all(old[1], ReceiptRecord.from_json)
        frames = []
        with self._lock:
            for r in receipts:
                key = (r.action_id, r.attempt_id)
                if key not in self._receipts and key not in self._acked:
                    frame = framed({"op": "receipt", **asdict(r)})
                    frames.append(frame)
                    self._put(key, len(frame), receipt=r)
            for s in started:
                key = (s.action_id, s.attempt_id)
                if key not in self._receipts and key not in self._started:
                    frame = framed({"op": "started", **asdict(s)})
                    frames.append(frame)
                    self._put(key, len(frame), started=s)
            end = self._write(b"".join(frames))
        self._sync(end)
        # Only now that the log holds them: a crash before this imports them again, which
        # changes nothing (the records are keyed by attempt).
        for directory in old:
            shutil.rmtree(directory, ignore_errors=True)
        _sync_directory(self.root)
        log.info(
            "took %d receipts and %d started records of an older action log into %s",
            len(receipts),
            len(started),
            self.path,
        )


def framed(record: dict[str, Any]) -> bytes:
    payload = encode_result(record).encode("ascii")
    return _FRAME.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def read_frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, payload) of each whole record, up to the first that is not."""
    offset = 0
    while offset + _FRAME.size <= len(data):
        magic, length, crc = _FRAME.unpack_from(data, offset)
        end = offset + _FRAME.size + length
        if magic != _MAGIC or length > MAX_RECORD or end > len(data):
            return
        payload = data[offset + _FRAME.size : end]
        if zlib.crc32(payload) != crc:
            return
        yield offset, end, payload
        offset = end


def _write_all(fd: int, data: bytes) -> int:
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    return written


def _sync_directory(path: Path) -> None:
    """A created or renamed file is durable only once its directory is synced."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_all(directory: Path, parse: Callable[[dict[str, Any]], T]) -> list[T]:
    """The records of one directory of the older layout."""
    records: list[T] = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="ascii"))
            records.append(parse(data))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring damaged action record %s: %s", path, exc)
    return records
