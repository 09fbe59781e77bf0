"""Offline verification of an evidence bundle (`deskfleet verify FILE`): no coordinator, no
store, no configuration; only the bundle, and the key to pin if the auditor has one.

Checked: the manifest's signature (and, with a pinned key, that it is that key's); every file's
sha256 and size against the manifest, with none missing and none added; the journal's hash
chain re-computed from GENESIS with the coordinator's own `event_hash` and ending at the
manifest's head; every receipt's content hash; every artifact's name against its bytes; every
recorded frame against `recording/frames.jsonl`. Each problem names the file it was found in,
and the event, receipt or frame.

The bundle is read as it lies in the tar: nothing is extracted to disk, so a member named
`../x` or a link can do no harm here (it is reported as a file the manifest does not name).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from shared import evidence_bundle as layout, evidence_keys
from shared.errors import DeskfleetError, InvalidArgumentError, NotFoundError
from shared.journal_chain import GENESIS, event_hash
from shared.receipts import content_hash

MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # ~1M files' entries: read whole, so bounded
SIGNATURE_BYTES = 64  # Ed25519
MAX_PROBLEMS_PER_FILE = 50  # a file altered throughout is named, not listed line by line
CHUNK = 1024 * 1024
SHA256 = re.compile(r"[0-9a-f]{64}")
FINGERPRINT = re.compile(re.escape(evidence_keys.FINGERPRINT_PREFIX) + r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the bundle: the file it is in (`""`: the bundle itself), where in
    that file (`event 3`, `receipt rcp_…`, `frame 12`, `line 4`), and what."""

    file: str
    where: str
    text: str

    def __str__(self) -> str:
        place = ": ".join(p for p in (self.file, self.where) if p)
        return f"{place}: {self.text}" if place else self.text

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "where": self.where, "problem": self.text}


@dataclass(frozen=True)
class Report:
    path: str
    run_id: str = ""
    signed_by: str = ""  # the fingerprint of the key in the manifest whose signature verified
    pinned: str = ""  # the fingerprint the auditor pinned, or ""
    files: int = 0
    events: int = 0
    receipts: int = 0
    artifacts: int = 0
    frames: int = 0
    video: bool = False
    video_note: str = ""
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "file": self.path,
            "runId": self.run_id,
            "signedBy": self.signed_by,
            "pinnedKey": self.pinned,
            "keyPinned": bool(self.pinned),
            "files": self.files,
            "events": self.events,
            "receipts": self.receipts,
            "artifacts": self.artifacts,
            "frames": self.frames,
            "video": self.video,
            "videoNote": self.video_note,
            "problems": [p.to_dict() for p in self.problems],
        }


def pinned_fingerprint(value: str) -> str:
    """`--key`: a fingerprint (`SHA256:` and 64 hex digits) or a file holding the public key's
    PEM (`deskfleet-coordinator evidence-key` prints both); the fingerprint either way."""
    if FINGERPRINT.fullmatch(value):
        return value
    path = Path(value)
    if value.startswith(evidence_keys.FINGERPRINT_PREFIX) or not path.exists():
        raise InvalidArgumentError(
            f"--key {value[:80]}: neither a fingerprint (SHA256: and 64 hex digits) nor a"
            " public key file"
        )
    try:
        with path.open("rb") as fh:
            text = fh.read(64 * 1024)
    except OSError as exc:
        raise InvalidArgumentError(f"--key {value}: {exc.strerror or exc}") from exc
    return evidence_keys.fingerprint(evidence_keys.load_public_pem(text, f"--key {value}"))


class _Problems:
    def __init__(self) -> None:
        self.found: list[Problem] = []
        self._per_file: dict[str, int] = {}

    def add(self, file: str, where: str, text: str) -> None:
        count = self._per_file.get(file, 0) + 1
        self._per_file[file] = count
        if count <= MAX_PROBLEMS_PER_FILE:
            self.found.append(Problem(file, where, text))
        elif count == MAX_PROBLEMS_PER_FILE + 1:
            self.found.append(Problem(file, "", "more problems in this file are not listed"))


class _Hashing(io.RawIOBase):
    """Reads a member through, hashing and counting every byte (lines are parsed from it)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self.digest = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        self.digest.update(data)
        self.size += len(data)
        return len(data)

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


@dataclass
class _Seen:
    """What was found in the members, to be compared once every member has been read."""

    hashes: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> sha256, size
    frames: dict[int, tuple[str, int]] = field(default_factory=dict)  # seq -> listed sha, size
    events: int = 0
    head: str = GENESIS
    receipts: int = 0
    artifacts: int = 0


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the bundle at `path`, unverified (for saying what was written)."""
    with _open(path) as tar:
        member = _member(tar, layout.MANIFEST)
        if member is None:
            raise InvalidArgumentError(f"{path}: no {layout.MANIFEST} in it")
        doc = json.loads(_read_small(tar, member, MAX_MANIFEST_BYTES))
        if not isinstance(doc, dict):
            raise InvalidArgumentError(f"{path}: {layout.MANIFEST} is not a JSON object")
        return doc


def verify_bundle(path: Path, pinned: str = "") -> Report:
    """Check the bundle at `path` (see the module's docstring); `pinned`: the fingerprint its
    signer must have. A file that cannot be read at all is an error; anything wrong inside it
    is a problem in the report."""
    problems = _Problems()
    try:
        tar = _open(path)
    except tarfile.ReadError:
        problems.add("", "", "not an uncompressed tar archive (a bundle as exported)")
        return Report(str(path), pinned=pinned, problems=tuple(problems.found))
    with tar:
        try:
            return _verify(tar, path, pinned, problems)
        except (tarfile.TarError, EOFError) as exc:
            # A tar cut short or with a broken header further in: what was read so far is
            # reported, with the damage.
            problems.add("", "", f"the tar is damaged or cut short ({str(exc)[:200]})")
            return Report(str(path), pinned=pinned, problems=tuple(problems.found))


def _open(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r:")
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise InvalidArgumentError(f"{path}: is a directory, not a bundle") from exc
    except OSError as exc:
        raise DeskfleetError(f"{path}: {exc.strerror or exc}") from exc


def _member(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo | None:
    found = [m for m in tar.getmembers() if m.name == name and m.isreg()]
    return found[0] if found else None


def _read_small(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    fh = tar.extractfile(member)
    assert fh is not None  # a regular member
    return fh.read(limit + 1)


def _verify(tar: tarfile.TarFile, path: Path, pinned: str, problems: _Problems) -> Report:
    members = tar.getmembers()
    manifest_member = _member(tar, layout.MANIFEST)
    if manifest_member is None:
        problems.add(layout.MANIFEST, "", "missing: nothing in the bundle can be checked")
        return Report(str(path), pinned=pinned, problems=tuple(problems.found))
    raw = _read_small(tar, manifest_member, MAX_MANIFEST_BYTES)
    manifest = _manifest(raw, problems)
    signed_by = _signature(tar, raw, manifest, pinned, problems)
    if manifest is None:
        return Report(str(path), pinned=pinned, problems=tuple(problems.found))
    run_id: str = manifest["run_id"]
    listed: dict[str, tuple[str, int]] = {
        f["name"]: (f["sha256"], f["size"]) for f in manifest["files"]
    }
    seen = _Seen()
    counted: dict[str, int] = {}
    for member in members:
        name = member.name
        counted[name] = counted.get(name, 0) + 1
        if counted[name] == 2:
            problems.add(name, "", "appears more than once in the bundle")
        if name in (layout.MANIFEST, layout.SIGNATURE):
            continue
        if not member.isreg() or member.issparse():
            # A sparse member's holes read as zeros: a few bytes of tar could declare
            # terabytes to hash. An export writes none.
            problems.add(name, "", "is not a regular file (no directory, link or sparse file)")
            continue
        if name not in listed:
            problems.add(name, "", "is not named in the manifest (a file was added)")
        fh = tar.extractfile(member)
        assert fh is not None
        reader = _Hashing(fh)
        _check_content(name, reader, run_id, seen, problems)
        reader.drain()
        if counted[name] == 1:
            seen.hashes[name] = (reader.digest.hexdigest(), reader.size)
    for name, (sha, size) in listed.items():
        got = seen.hashes.get(name)
        if got is None:
            problems.add(name, "", "is named in the manifest but missing from the bundle")
            continue
        if got[0] != sha:
            problems.add(name, "", f"sha256 {got[0]} differs from the manifest's {sha}: altered")
        if got[1] != size:
            problems.add(name, "", f"is {got[1]} bytes; the manifest says {size}")
    _check_journal_head(manifest, seen, problems)
    _check_frames(seen, problems)
    recording = manifest["recording"]
    return Report(
        str(path),
        run_id=run_id,
        signed_by=signed_by,
        pinned=pinned,
        files=len(listed),
        events=seen.events,
        receipts=seen.receipts,
        artifacts=seen.artifacts,
        frames=len(seen.frames),
        video=bool(recording.get("video")),
        video_note=str(recording.get("video_note", "")),
        problems=tuple(problems.found),
    )


def _manifest(raw: bytes, problems: _Problems) -> dict[str, Any] | None:
    """The manifest's document, its shape checked; None (with the problem) if it has none."""
    if len(raw) > MAX_MANIFEST_BYTES:
        problems.add(layout.MANIFEST, "", f"larger than {MAX_MANIFEST_BYTES} bytes")
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: [[[[...
        problems.add(layout.MANIFEST, "", "not JSON: it was altered or is not a manifest")
        return None
    wrong = _manifest_shape(doc)
    if wrong:
        problems.add(layout.MANIFEST, "", wrong)
        return None
    if doc["format"] != layout.FORMAT:
        problems.add(layout.MANIFEST, "format", f"{doc['format']!r}, not {layout.FORMAT!r}")
    result: dict[str, Any] = doc
    return result


def _manifest_shape(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "not a JSON object"
    for key, kind in (
        ("format", str),
        ("run_id", str),
        ("files", list),
        ("journal", dict),
        ("key", dict),
        ("recording", dict),
    ):
        if not isinstance(doc.get(key), kind):
            return f"{key}: missing or not a {kind.__name__}"
    for i, entry in enumerate(doc["files"]):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("size"), int)
        )
        if not ok:
            return f"files[{i}]: not a name, sha256 and size"
    journal, key = doc["journal"], doc["key"]
    if not isinstance(journal.get("events"), int) or not isinstance(journal.get("head"), str):
        return "journal: not an event count and a head hash"
    if not isinstance(key.get("fingerprint"), str) or not isinstance(
        key.get("public_key_pem"), str
    ):
        return "key: not a fingerprint and a public key PEM"
    return ""


def _signature(
    tar: tarfile.TarFile,
    raw: bytes,
    manifest: dict[str, Any] | None,
    pinned: str,
    problems: _Problems,
) -> str:
    """The fingerprint of the key whose signature verified over the manifest's bytes, or ""."""
    member = _member(tar, layout.SIGNATURE)
    if member is None:
        problems.add(layout.SIGNATURE, "", "missing: the manifest is not signed")
        return ""
    signature = _read_small(tar, member, SIGNATURE_BYTES)
    if manifest is None:
        return ""
    named = manifest["key"]
    try:
        key = evidence_keys.load_public_pem(named["public_key_pem"].encode(), "key.public_key_pem")
    except (InvalidArgumentError, UnicodeEncodeError) as exc:
        problems.add(layout.MANIFEST, "key", getattr(exc, "message", "not a public key"))
        return ""
    fingerprint = evidence_keys.fingerprint(key)
    if named["fingerprint"] != fingerprint:
        problems.add(
            layout.MANIFEST,
            "key",
            f"names fingerprint {named['fingerprint'][:80]} for a key whose fingerprint is"
            f" {fingerprint}",
        )
    if not _verifies(key, signature, raw):
        problems.add(
            layout.SIGNATURE,
            "",
            f"does not verify over {layout.MANIFEST} with the key it names ({fingerprint}):"
            " the manifest or its signature was altered",
        )
        return ""
    if pinned and fingerprint != pinned:
        problems.add(
            layout.SIGNATURE,
            "",
            f"signed by {fingerprint}, not by the pinned key {pinned}",
        )
    return fingerprint


def _verifies(key: Ed25519PublicKey, signature: bytes, data: bytes) -> bool:
    if len(signature) != SIGNATURE_BYTES:
        return False
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def _check_content(
    name: str, reader: _Hashing, run_id: str, seen: _Seen, problems: _Problems
) -> None:
    if name == layout.JOURNAL:
        _check_journal(_lines(reader), run_id, seen, problems)
    elif name == layout.RECEIPTS:
        _check_receipts(_lines(reader), seen, problems)
    elif name == layout.FRAMES_INDEX:
        _read_frames(_lines(reader), seen, problems)
    elif name.startswith(layout.ARTIFACTS):
        seen.artifacts += 1
        stated = name[len(layout.ARTIFACTS) :]
        reader.drain()
        actual = reader.digest.hexdigest()
        if not SHA256.fullmatch(stated):
            problems.add(name, "", "an artifact is named by its sha256 (64 hex digits)")
        elif actual != stated:
            problems.add(name, "", f"its bytes hash to {actual}, not the sha256 it is named by")


def _lines(reader: _Hashing) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value or None when the line is not JSON) of a JSON Lines member."""
    buffered = io.BufferedReader(reader, CHUNK)
    for number, line in enumerate(buffered, 1):
        try:
            yield number, json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            yield number, None


def _check_journal(
    lines: Iterator[tuple[int, Any]], run_id: str, seen: _Seen, problems: _Problems
) -> None:
    file = layout.JOURNAL
    prev: str | None = GENESIS  # None: the line before was unreadable, and named already
    expected = 1
    for number, doc in lines:
        seen.events += 1
        if not _is_event(doc):
            problems.add(
                file, f"line {number}", f"not a journal event (event {expected}?): altered"
            )
            prev, expected = None, expected + 1
            continue
        seq, kind = doc["seq"], doc["kind"]
        where = f"event {seq} ({kind[:64]})"
        if seq != expected:
            problems.add(
                file, where, f"comes where event {expected} should: an event was removed or moved"
            )
        if prev is not None and doc["prev_hash"] != prev:
            problems.add(file, where, "does not follow the event before it (prev_hash)")
        try:
            digest = event_hash(doc["prev_hash"], run_id, seq, kind, doc["at"], doc["data"])
        except UnicodeEncodeError:  # a lone surrogate: no stored event hashes that way
            digest = ""
        if digest != doc["hash"]:
            problems.add(file, where, "does not match its hash: it was altered")
        prev = doc["hash"]
        expected = seq + 1
    seen.head = prev or ""


def _is_event(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and type(doc.get("seq")) is int
        and isinstance(doc.get("kind"), str)
        and isinstance(doc.get("at"), float | int)
        and isinstance(doc.get("data"), str)
        and isinstance(doc.get("prev_hash"), str)
        and isinstance(doc.get("hash"), str)
    )


def _check_journal_head(manifest: dict[str, Any], seen: _Seen, problems: _Problems) -> None:
    if layout.JOURNAL not in seen.hashes:
        return  # named as missing already
    journal = manifest["journal"]
    if seen.events != journal["events"] or seen.head != journal["head"]:
        problems.add(
            layout.JOURNAL,
            "",
            f"the chain holds {seen.events} events ending at {seen.head}; the manifest says"
            f" {journal['events']} ending at {str(journal['head'])[:64]}",
        )


def _check_receipts(lines: Iterator[tuple[int, Any]], seen: _Seen, problems: _Problems) -> None:
    file = layout.RECEIPTS
    for number, doc in lines:
        ok = (
            isinstance(doc, dict)
            and isinstance(doc.get("id"), str)
            and isinstance(doc.get("body"), str)
            and isinstance(doc.get("sha256"), str)
        )
        if not ok:
            problems.add(file, f"line {number}", "not a receipt: the line was altered")
            continue
        seen.receipts += 1
        try:
            digest = content_hash(doc["body"])
        except InvalidArgumentError:
            digest = ""
        if digest != doc["sha256"]:
            problems.add(
                file, f"receipt {doc['id'][:64]}", "does not match its content hash: altered"
            )


def _read_frames(lines: Iterator[tuple[int, Any]], seen: _Seen, problems: _Problems) -> None:
    file = layout.FRAMES_INDEX
    for number, doc in lines:
        ok = (
            isinstance(doc, dict)
            and type(doc.get("seq")) is int
            and isinstance(doc.get("sha256"), str)
            and type(doc.get("size")) is int
        )
        if not ok:
            problems.add(file, f"line {number}", "not a frame's entry: the line was altered")
            continue
        if doc["seq"] in seen.frames:
            problems.add(file, f"frame {doc['seq']}", "is listed twice")
        seen.frames[doc["seq"]] = (doc["sha256"], doc["size"])


def _check_frames(seen: _Seen, problems: _Problems) -> None:
    """Each frame listed in frames.jsonl against its JPEG, and each JPEG against the list."""
    for seq, (sha, size) in sorted(seen.frames.items()):
        name = layout.frame_name(seq)
        got = seen.hashes.get(name)
        if got is None:
            problems.add(name, f"frame {seq}", f"listed in {layout.FRAMES_INDEX} but missing")
        elif got != (sha, size):
            problems.add(
                name,
                f"frame {seq}",
                f"its bytes (sha256 {got[0]}, {got[1]} bytes) are not the frame"
                f" {layout.FRAMES_INDEX} lists: altered",
            )
    listed = {layout.frame_name(seq) for seq in seen.frames}
    for name in seen.hashes:
        if name.startswith(layout.FRAMES) and name not in listed:
            problems.add(name, "", f"is not listed in {layout.FRAMES_INDEX}")
