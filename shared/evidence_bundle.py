"""The layout of an evidence bundle: what `deskfleet runs export` writes and `deskfleet verify`
reads, defined once for both.

A bundle is an uncompressed tar. Its bulk (screenshots, JPEG frames, the WebM video) is already
compressed, so gzip would spend the coordinator's CPU for a few percent; and a plain tar is read
member by member by any tool (`tar -xf`), with nothing to unpack first.

    manifest.json              every other file's sha256 and size, the run, the journal's head,
                               the signing key (fingerprint and public PEM)
    manifest.sig               Ed25519 signature of manifest.json's exact bytes (64 raw bytes)
    journal.jsonl              every event as stored: seq, kind, at, data, prev_hash, hash
    receipts.jsonl             every receipt: its stored body and content hash
    artifacts/<sha256>         each artifact's bytes, named by their sha256
    recording/frames.jsonl     each recorded frame: seq, captured_at, held_by, sha256, size, ...
    recording/frames/<seq>.jpg each frame's JPEG
    recording/recording.webm   the frames as a video at their real timing (when one was made)

The signature can be checked without deskfleet too:
`openssl pkeyutl -verify -pubin -inkey key.pem -rawin -in manifest.json -sigfile manifest.sig`.
"""

from __future__ import annotations

import json
from typing import Any

FORMAT = "deskfleet-evidence/1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
JOURNAL = "journal.jsonl"
RECEIPTS = "receipts.jsonl"
ARTIFACTS = "artifacts/"
RECORDING = "recording/"
FRAMES = "recording/frames/"
FRAMES_INDEX = "recording/frames.jsonl"
VIDEO = "recording/recording.webm"


def frame_name(seq: int) -> str:
    return f"{FRAMES}{seq}.jpg"


def artifact_name(sha256: str) -> str:
    return f"{ARTIFACTS}{sha256}"


def json_line(doc: dict[str, Any]) -> bytes:
    """One JSON Lines record, ASCII (stored text with NUL or lone surrogates travels escaped and
    is read back as the very same string)."""
    text = json.dumps(doc, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return text.encode("ascii") + b"\n"


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The manifest as signed: indented for a person to read, the signature over these bytes."""
    return (json.dumps(manifest, ensure_ascii=True, sort_keys=True, indent=2) + "\n").encode()
