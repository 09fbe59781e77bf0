"""A run's evidence as one signed file (`deskfleet runs export`): its journal with the hash
chain, its receipts, its artifacts, its recording (frames, and a WebM video made with ffmpeg
when it is installed), and a manifest of every file signed with the coordinator's evidence key.
The layout is `shared/evidence_bundle.py`; `shared/bundle_verify.py` checks it offline.

Built in a temporary directory, then sent: bytes are streamed from the store one row at a time
into files (a long recording is never held in memory), ffmpeg reads the frames from there, and
the tar is assembled from those files. The disk holds the run's evidence about twice over while
an export is made; the directory is removed as the export ends, sent or not.

What is read comes from one read transaction, a consistent snapshot, and is checked as it is
read: a journal whose chain is broken, or a receipt, artifact or frame that does not match its
hash, is refused rather than signed. A signature says "this is what the store held"; signing
what the store already knows to be altered would lend it a credibility it has lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.security import audit, evidence_key
from coordinator.security.evidence_key import EvidenceKey
from coordinator.store import Database
from coordinator.store.journal import Chain
from coordinator.store.models import (
    ArtifactRow,
    JournalRow,
    PrincipalRow,
    ReceiptRow,
    RecordingFrameRow,
    RunRow,
)
from shared import __version__, evidence_bundle as layout
from shared.errors import DataIntegrityError, FailedPreconditionError, NotFoundError
from shared.receipts import content_hash
from shared.text import visible
from shared.timestamps import iso

CHUNK = 256 * 1024  # what the servicer sends per message
PAGE = 500  # journal events and receipts fetched at a time
BLOB_PAGE = 4  # artifacts and frames: bytes, so only a few at a time
LAST_FRAME_SECONDS = 1.0  # the last frame's time on screen: nothing came after it
MIN_FRAME_SECONDS = 0.001  # frames with one timestamp still follow one another
VIDEO_BASE_SECONDS = 120.0  # ffmpeg's time allowance, plus per frame:
VIDEO_SECONDS_PER_FRAME = 0.2


def find_ffmpeg() -> str | None:
    return shutil.which("ffmpeg")


@dataclass(frozen=True)
class Bundle:
    """An export made and waiting to be sent: the tar at `path` (removed with its directory
    when the export ends)."""

    run_id: str
    path: Path
    size: int
    sha256: str
    fingerprint: str
    video: bool
    video_note: str

    async def chunks(self, size: int = CHUNK) -> AsyncIterator[bytes]:
        """The file's bytes in order, each read off the event loop."""
        with await asyncio.to_thread(self.path.open, "rb") as fh:
            while data := await asyncio.to_thread(fh.read, size):
                yield data


@dataclass(frozen=True)
class FileEntry:
    name: str
    sha256: str
    size: int


@dataclass
class _Staging:
    """The bundle's files as they are written into the temporary directory, each hashed as
    it is written."""

    root: Path
    files: list[FileEntry] = field(default_factory=list)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[_HashedWriter]:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            writer = _HashedWriter(fh)
            yield writer
        self.files.append(FileEntry(name, writer.digest.hexdigest(), writer.size))

    def write(self, name: str, data: bytes) -> None:
        with self.open(name) as out:
            out.write(data)

    def add_existing(self, name: str) -> None:
        digest, size = _hash_file(self.root / name)
        self.files.append(FileEntry(name, digest, size))


class _HashedWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._fh.write(data)
        self.digest.update(data)
        self.size += len(data)


@dataclass(frozen=True)
class _Staged:
    """What the read transaction put in the staging directory."""

    run_id: str
    run: dict[str, Any]
    owner: dict[str, str]
    events: int
    head: str
    receipts: int
    artifacts: int
    frames: int
    frame_size: tuple[int, int]  # the first frame's, for the video


class RunExports:
    """Makes bundles: `key_file` is the evidence key (None: this coordinator has none, as on
    PostgreSQL without --evidence-key-file); `replica` is named in each manifest."""

    def __init__(
        self,
        db: Database,
        key_file: Path | None,
        replica: str,
        *,
        ffmpeg: Callable[[], str | None] = find_ffmpeg,
    ) -> None:
        self._db = db
        self._key_file = key_file
        self._replica = replica
        self._ffmpeg = ffmpeg

    def _key(self) -> EvidenceKey:
        if self._key_file is None:
            raise FailedPreconditionError(
                "this coordinator has no evidence key to sign exports with: create one with"
                " `deskfleet-coordinator init --db URL --evidence-key-file FILE` and give every"
                " replica `serve --evidence-key-file FILE`"
            )
        return evidence_key.load(self._key_file)

    @contextlib.asynccontextmanager
    async def bundle(
        self, who: Principal, run_id: str, *, frames_only: bool = False
    ) -> AsyncIterator[Bundle]:
        """Build the run's bundle (admins: any run; owners: their own), audit it, and yield it
        for sending; the temporary files are removed afterwards."""
        by = audit.actor(who)
        key = await asyncio.to_thread(self._key)
        where = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="deskfleet-export-"))
        try:
            staging = _Staging(where / "bundle")
            staged = await self._db.read(_stage, who, run_id, staging)
            video, note = await self._video(staging, staged, frames_only)
            exported_at = time.time()
            manifest = _manifest(staged, staging, key, self._replica, who, exported_at)
            manifest["recording"].update(video=video, video_note=note)
            path = where / f"{run_id}.tar"
            digest, size = await asyncio.to_thread(
                _write_tar, path, staging, manifest, key, exported_at
            )
            await asyncio.to_thread(shutil.rmtree, staging.root)
            await audit.write(
                self._db,
                by,
                "run.export",
                run_id,
                owner=staged.owner["id"],
                sha256=digest,
                size=size,
                fingerprint=key.fingerprint,
                events=staged.events,
                frames=staged.frames,
                video=video,
            )
            yield Bundle(run_id, path, size, digest, key.fingerprint, video, note)
        finally:
            await asyncio.to_thread(shutil.rmtree, where, True)

    async def _video(
        self, staging: _Staging, staged: _Staged, frames_only: bool
    ) -> tuple[bool, str]:
        """Whether the recording was made a video, and if not, why."""
        if staged.frames == 0:
            return False, "no frames were recorded for this run"
        if frames_only:
            return False, "frames only, as the export asked"
        ffmpeg = self._ffmpeg()
        if ffmpeg is None:
            return False, "ffmpeg is not installed on the coordinator's host (not on its PATH)"
        timeout = VIDEO_BASE_SECONDS + VIDEO_SECONDS_PER_FRAME * staged.frames
        made, note = await asyncio.to_thread(
            _encode, ffmpeg, staging.root, staged.frame_size, timeout
        )
        if made:
            staging.add_existing(layout.VIDEO)
        return made, note


def _exportable(s: Session, who: Principal, run_id: str) -> RunRow:
    """Admins export any run; an owner their own. Anyone else's run is indistinguishable from
    one that does not exist, as everywhere else."""
    run = s.get(RunRow, run_id)
    if run is None or (who.role is not Role.ADMIN and run.owner_id != who.id):
        raise NotFoundError(f"no run {run_id!r}")
    return run


def _stage(s: Session, who: Principal, run_id: str, staging: _Staging) -> _Staged:
    """Every row of the run into the staging directory, each checked as it is read."""
    run = _exportable(s, who, run_id)
    head_seq, head_hash = run.last_seq, run.last_hash
    owner = s.get(PrincipalRow, run.owner_id)
    chain = Chain(run_id)
    with staging.open(layout.JOURNAL) as out:
        rows = s.scalars(
            select(JournalRow)
            .where(JournalRow.run_id == run_id, JournalRow.seq <= head_seq)
            .order_by(JournalRow.seq)
            .execution_options(yield_per=PAGE)
        )
        for row in rows:
            try:
                chain.follow(row)
            except DataIntegrityError as exc:
                raise DataIntegrityError(f"{exc.message}; refusing to sign it") from exc
            out.write(
                layout.json_line(
                    {
                        "seq": row.seq,
                        "kind": row.kind,
                        "at": row.at,
                        "data": row.data,
                        "prev_hash": row.prev_hash,
                        "hash": row.hash,
                    }
                )
            )
    if chain.seq != head_seq or (head_hash and chain.prev != head_hash):
        raise DataIntegrityError(
            f"the journal of run {run_id} was altered: the run's head says {head_seq} events"
            f" ending at {head_hash or '-'}, the journal holds {chain.seq}; refusing to sign it"
        )
    receipts = _stage_receipts(s, run_id, staging)
    artifacts = _stage_artifacts(s, run_id, staging)
    frames, frame_size = _stage_frames(s, run_id, staging)
    return _Staged(
        run_id=run_id,
        run={
            "kind": run.kind,
            "title": run.title,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "created_at": run.created_at,
            "parent": run.parent_id or "",
        },
        owner={"id": run.owner_id, "name": owner.name if owner is not None else ""},
        events=chain.seq,
        head=chain.prev,
        receipts=receipts,
        artifacts=artifacts,
        frames=frames,
        frame_size=frame_size,
    )


def _stage_receipts(s: Session, run_id: str, staging: _Staging) -> int:
    count = 0
    with staging.open(layout.RECEIPTS) as out:
        rows = s.scalars(
            select(ReceiptRow)
            .where(ReceiptRow.run_id == run_id)
            .order_by(ReceiptRow.created_at, ReceiptRow.id)
            .execution_options(yield_per=PAGE)
        )
        for row in rows:
            if content_hash(row.body) != row.sha256:
                raise DataIntegrityError(
                    f"receipt {row.id} of run {run_id} does not match its content hash: the"
                    " stored receipt was altered; refusing to sign it"
                )
            out.write(
                layout.json_line(
                    {
                        "id": row.id,
                        "action_id": row.action_id,
                        "attempt_id": row.attempt_id,
                        "epoch": row.epoch,
                        "worker_id": row.worker_id,
                        "status": row.status,
                        "created_at": row.created_at,
                        "traceparent": row.traceparent,
                        "body": row.body,
                        "sha256": row.sha256,
                    }
                )
            )
            count += 1
    return count


def _stage_artifacts(s: Session, run_id: str, staging: _Staging) -> int:
    count = 0
    rows = s.execute(
        select(ArtifactRow.sha256, ArtifactRow.data)
        .where(ArtifactRow.run_id == run_id)
        .order_by(ArtifactRow.sha256)
        .execution_options(yield_per=BLOB_PAGE)
    )
    for sha256, data in rows:
        if hashlib.sha256(data).hexdigest() != sha256:
            raise DataIntegrityError(
                f"artifact {sha256} of run {run_id} does not match its sha256: the stored bytes"
                " were altered; refusing to sign them"
            )
        staging.write(layout.artifact_name(sha256), data)
        count += 1
    return count


def _stage_frames(s: Session, run_id: str, staging: _Staging) -> tuple[int, tuple[int, int]]:
    """The recording's JPEGs, their index, and the ffmpeg concat list that times them."""
    count = 0
    first = (0, 0)
    before: tuple[int, float] | None = None  # the frame whose duration the next one gives
    rows = s.execute(
        select(
            RecordingFrameRow.seq,
            RecordingFrameRow.captured_at,
            RecordingFrameRow.held_by,
            RecordingFrameRow.sha256,
            RecordingFrameRow.width,
            RecordingFrameRow.height,
            RecordingFrameRow.media_type,
            RecordingFrameRow.display,
            RecordingFrameRow.worker_id,
            RecordingFrameRow.data,
        )
        .where(RecordingFrameRow.run_id == run_id)
        .order_by(RecordingFrameRow.seq)
        .execution_options(yield_per=BLOB_PAGE)
    )
    concat_path = staging.root.parent / "frames.ffconcat"
    with staging.open(layout.FRAMES_INDEX) as index, concat_path.open("w") as concat:
        concat.write("ffconcat version 1.0\n")
        for seq, at, held_by, sha256, width, height, media_type, display, worker, data in rows:
            if hashlib.sha256(data).hexdigest() != sha256:
                raise DataIntegrityError(
                    f"recorded frame {seq} of run {run_id} does not match its sha256: the"
                    " stored frame was altered; refusing to sign it"
                )
            staging.write(layout.frame_name(seq), data)
            index.write(
                layout.json_line(
                    {
                        "seq": seq,
                        "captured_at": at,
                        "held_by": held_by,
                        "sha256": sha256,
                        "size": len(data),
                        "width": width,
                        "height": height,
                        "media_type": media_type,
                        "display": display,
                        "worker_id": worker,
                    }
                )
            )
            if before is not None:
                _concat_entry(concat, before[0], at - before[1])
            else:
                first = (width, height)
            before = (seq, at)
            count += 1
        if before is not None:
            _concat_entry(concat, before[0], LAST_FRAME_SECONDS)
            # The concat demuxer gives the last entry no duration of its own: named once more,
            # the last frame stays on screen for the duration written above.
            concat.write(f"file '{_frame_path(before[0])}'\n")
    return count, first


def _frame_path(seq: int) -> str:
    return f"bundle/{layout.frame_name(seq)}"  # relative to the concat file: ffmpeg's safe mode


def _concat_entry(concat: IO[str], seq: int, seconds: float) -> None:
    concat.write(f"file '{_frame_path(seq)}'\nduration {max(seconds, MIN_FRAME_SECONDS):.6f}\n")


def _encode(ffmpeg: str, root: Path, size: tuple[int, int], timeout: float) -> tuple[bool, str]:
    """The frames as `recording/recording.webm` (VP8, at their real timing: variable frame
    rate, each frame on screen until the next was captured); (made, why not)."""
    # Even dimensions for 4:2:0 chroma; frames of another size are fitted and padded.
    width, height = max(2, size[0] - size[0] % 2), max(2, size[1] - size[1] % 2)
    fit = (
        f"scale={width}:{height}:force_original_aspect_ratio=decrease,"
        f"pad={width}:{height}:(ow-iw)/2:(oh-ih)/2,format=yuv420p"
    )
    out = root / layout.VIDEO
    argv = [
        ffmpeg,
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-y",
        "-f",
        "concat",
        "-i",
        str(root.parent / "frames.ffconcat"),
        "-fps_mode",
        "vfr",
        "-vf",
        fit,
        "-c:v",
        "libvpx",
        "-deadline",
        "realtime",
        "-cpu-used",
        "8",
        "-b:v",
        "2M",
        "-an",
        str(out),
    ]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        out.unlink(missing_ok=True)
        return False, f"ffmpeg took longer than {timeout:.0f} s; the frames are in the bundle"
    except OSError as exc:
        return False, f"ffmpeg could not be started ({exc.strerror or exc})"
    if done.returncode != 0 or not out.exists():
        out.unlink(missing_ok=True)
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return False, f"ffmpeg failed ({visible(said)[:200]}); the frames are in the bundle"
    return True, "made with ffmpeg from the frames at their captured times (WebM, VP8)"


def _manifest(
    staged: _Staged,
    staging: _Staging,
    key: EvidenceKey,
    replica: str,
    who: Principal,
    exported_at: float,
) -> dict[str, Any]:
    return {
        "format": layout.FORMAT,
        "run_id": staged.run_id,
        "run": staged.run,
        "owner": staged.owner,
        "exported_at": exported_at,
        "exported_at_utc": iso(exported_at),
        "exported_by": {"id": who.id, "name": who.name, "role": who.role.value},
        "replica": replica,
        "coordinator_version": __version__,
        "journal": {"events": staged.events, "head": staged.head},
        "receipts": staged.receipts,
        "artifacts": staged.artifacts,
        "recording": {"frames": staged.frames, "video_file": layout.VIDEO},
        "key": {"fingerprint": key.fingerprint, "public_key_pem": key.public_pem},
        "files": [
            {"name": f.name, "sha256": f.sha256, "size": f.size}
            for f in sorted(staging.files, key=lambda f: f.name)
        ],
    }


def _write_tar(
    path: Path,
    staging: _Staging,
    manifest: dict[str, Any],
    key: EvidenceKey,
    exported_at: float,
) -> tuple[str, int]:
    """The tar: the manifest and its signature first (a reader finds them at once), then every
    file the manifest names; (sha256, size) of the whole."""
    signed = layout.manifest_bytes(manifest)
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((layout.MANIFEST, signed), (layout.SIGNATURE, key.sign(signed))):
            tar.addfile(_info(name, len(data), exported_at), io.BytesIO(data))
        for entry in manifest["files"]:
            with (staging.root / entry["name"]).open("rb") as fh:
                tar.addfile(_info(entry["name"], entry["size"], exported_at), fh)
    return _hash_file(path)


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o600  # a recording shows whatever was on a person's screen
    return info


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while data := fh.read(1024 * 1024):
            digest.update(data)
            size += len(data)
    return digest.hexdigest(), size
