"""`deskfleet runs export` and `deskfleet verify`: a run's evidence as one signed file, and
its offline check (`verify` needs no coordinator, no credential and no configuration)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from coordinator.admin_cli import render
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.out_files import PRIVATE, check_writable
from shared import evidence_bundle as layout
from shared.bundle_verify import Report, pinned_fingerprint, read_manifest, verify_bundle
from shared.errors import AlreadyExistsError, DataIntegrityError, DeskfleetError, from_rpc_error
from shared.gen.deskfleet.v1 import runs_pb2

EXIT_NOT_VERIFIED = 6  # as `journal verify`: the evidence failed its check
# A long run's recording is encoded before the first byte comes: the export's own deadline.
EXPORT_TIMEOUT = 3600.0
PROGRESS_FROM = 16 * 1024 * 1024  # smaller exports arrive too fast for progress to help
PROGRESS_STEPS = 10

RUN_ID = {"metavar": "RUN_ID", "help": "the run's id (deskfleet runs list)"}


def export(client: CoordinatorClient, args: argparse.Namespace) -> None:
    out = Path(args.out)
    if not args.force and (out.exists() or out.is_symlink()):
        raise AlreadyExistsError(f"--out {out}: the file exists; pass --force to replace it")
    check_writable(out)
    part = out.with_name(out.name + ".part")
    request = runs_pb2.ExportRunRequest(id=args.id, frames_only=args.frames_only)
    stream = client.runs.ExportRun(
        request, metadata=client.metadata(), timeout=max(args.timeout, EXPORT_TIMEOUT)
    )
    done = False
    try:
        size, digest, fingerprint = _receive(stream, part, client.config.coordinator)
        _put_in_place(part, out, force=args.force)
        done = True
    finally:
        if not done:
            with contextlib.suppress(OSError):
                part.unlink()
    recording = read_manifest(out).get("recording", {})
    doc = {
        "id": args.id,
        "file": str(out),
        "size": size,
        "sha256": digest,
        "fingerprint": fingerprint,
        "frames": recording.get("frames", 0),
        "video": bool(recording.get("video")),
        "videoNote": recording.get("video_note", ""),
    }
    if args.json:
        render.print_json(doc)
        return
    print(f"run {args.id} exported to {out}")
    print(f"  size        {size} bytes")
    print(f"  sha256      {digest}")
    print(f"  signed by   {fingerprint}")
    video = layout.VIDEO if doc["video"] else f"no video: {doc['videoNote']}"
    print(f"  recording   {doc['frames']} frames; {video}")
    print(f"check it with: deskfleet verify {out} --key {fingerprint}")


def _receive(
    stream: Iterator[runs_pb2.ExportChunk], part: Path, target: str
) -> tuple[int, str, str]:
    """The stream into `part` (0600); (size, sha256, fingerprint), each checked against what
    the coordinator said it sent."""
    digest = hashlib.sha256()
    total = received = 0
    fingerprint = said_sha = ""
    shown = 0
    try:
        with _private(part) as fh:
            for chunk in stream:
                if not fingerprint:
                    total, fingerprint = chunk.total_bytes, chunk.fingerprint
                fh.write(chunk.data)
                digest.update(chunk.data)
                received += len(chunk.data)
                said_sha = chunk.sha256 or said_sha
                if total >= PROGRESS_FROM and received * PROGRESS_STEPS >= (shown + 1) * total:
                    shown = received * PROGRESS_STEPS // total
                    print(
                        f"deskfleet: received {received / 2**20:.1f} of {total / 2**20:.1f} MiB",
                        file=sys.stderr,
                        flush=True,
                    )
    except grpc.RpcError as exc:
        raise from_rpc_error(exc, target) from exc
    except OSError as exc:
        raise DeskfleetError(f"--out {part}: {exc.strerror or exc}") from exc
    if received != total or digest.hexdigest() != said_sha:
        raise DataIntegrityError(
            f"the export arrived incomplete or damaged ({received} of {total} bytes, sha256"
            f" {digest.hexdigest()}, the coordinator said {said_sha or 'nothing'}); nothing was"
            " written: export it again"
        )
    return received, said_sha, fingerprint


@contextlib.contextmanager
def _private(path: Path) -> Iterator[Any]:
    """`path` opened for writing, readable by the user alone (a recording shows a screen)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.fchmod(fd, PRIVATE)
    with os.fdopen(fd, "wb") as fh:
        yield fh


def _put_in_place(part: Path, out: Path, *, force: bool) -> None:
    """`part` renamed to `out`; without `force`, never over a file that appeared meanwhile."""
    try:
        if force:
            os.replace(part, out)
            return
        try:
            os.link(part, out)  # fails if `out` exists: no window between check and rename
        except FileExistsError as exc:
            raise AlreadyExistsError(
                f"--out {out}: the file appeared during the export; pass --force to replace it"
            ) from exc
        except OSError:  # a file system without hard links
            if out.exists():
                raise AlreadyExistsError(f"--out {out}: the file exists") from None
            os.replace(part, out)
            return
        part.unlink()
    except OSError as exc:
        raise DeskfleetError(f"--out {out}: {exc.strerror or exc}") from exc


def verify(args: argparse.Namespace) -> int:
    """Offline: no coordinator is reached. 0 when the bundle is intact (and signed by the
    pinned key, given one); EXIT_NOT_VERIFIED with each problem on its own line otherwise."""
    pinned = pinned_fingerprint(args.key) if args.key else ""
    report = verify_bundle(Path(args.file), pinned)
    if getattr(args, "json", False):
        render.print_json(report.to_dict())
    elif report.ok:
        print(_summary(report))
    if report.ok:
        return 0
    for problem in report.problems:
        print(f"problem: {problem}", file=sys.stderr)
    if not getattr(args, "json", False):
        print(
            f"deskfleet: {args.file}: {len(report.problems)} problem(s): not verified",
            file=sys.stderr,
        )
    return EXIT_NOT_VERIFIED


def _summary(report: Report) -> str:
    video = f"a video ({layout.VIDEO})" if report.video else "no video"
    key = (
        f"signed by {report.signed_by}, the pinned key"
        if report.pinned
        else f"signed by {report.signed_by}; that key is NOT pinned: this proves the bundle"
        " is intact, not who made it (pass --key with the fingerprint from"
        " `deskfleet-coordinator evidence-key`)"
    )
    return (
        f"{report.path} verified: run {report.run_id}, {report.files} files match the manifest;"
        f" {report.events} events in an unbroken chain ending at the manifest's head;"
        f" {report.receipts} receipts match their content hashes; {report.artifacts} artifacts"
        f" and {report.frames} frames match their sha256; {video}.\n{key}"
    )


def add_parsers(sub: Any, runs: Any, leaf: Any) -> None:
    p = leaf(
        runs,
        "export",
        export,
        "the run's evidence as one signed file: journal, receipts, artifacts, recording",
    )
    p.add_argument("id", **RUN_ID)
    p.add_argument("--out", required=True, metavar="FILE", help="the bundle to write (a tar, 0600)")
    p.add_argument(
        "--frames-only",
        action="store_true",
        help="the recording as its JPEG frames only, even where the coordinator has ffmpeg",
    )
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    v = sub.add_parser(
        "verify",
        help="check an exported bundle offline: signature, every file, the hash chain",
        description="check an exported bundle offline (no coordinator is reached): its"
        " signature, every file's sha256 against the manifest, the journal's hash chain, each"
        " receipt, artifact and frame; exit 0 when all is well, 6 with each problem on its own"
        " line otherwise",
    )
    v.set_defaults(run=None, offline=verify)
    v.add_argument("file", metavar="FILE", help="the bundle (deskfleet runs export)")
    v.add_argument(
        "--key",
        metavar="FINGERPRINT|PUBLIC_KEY_FILE",
        help="the coordinator's evidence key the bundle must be signed by: its fingerprint"
        " (SHA256:...) or its public key PEM, as `deskfleet-coordinator evidence-key` prints"
        " them; without it the bundle's integrity is checked and its signer named, not pinned",
    )
    v.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
