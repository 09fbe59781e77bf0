"""The recording as a video in an export: Debian's ffmpeg makes a WebM of the recorded JPEG
frames at their captured timing, the manifest says so, and a byte changed in the video is
caught by `verify_bundle`. In process, but ffmpeg and ffprobe are programs."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.model.identity import Principal, Role
from coordinator.runs.export import RunExports
from coordinator.security import evidence_key
from coordinator.store import Database
from shared import evidence_bundle as layout
from shared.bundle_verify import verify_bundle
from tests.conftest import require
from tests.harness.evidence import (
    OWNER_ID,
    add_frames,
    finished_run,
    flip,
    member,
    rewrite,
)
from tests.harness.ledger import Store

OLIVE = Principal(OWNER_ID, "olive", Role.OWNER)
TIMES = [0.0, 0.5, 0.6, 2.0]  # seconds after the first frame


@pytest.fixture
async def db(store: Store, tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield database
    await database.close()


async def _export(exports: RunExports, run_id: str, out: Path) -> Path:
    async with exports.bundle(OLIVE, run_id) as bundle:
        await asyncio.to_thread(shutil.copyfile, bundle.path, out)
    return out


def _duration(video: Path) -> float:
    done = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "json", str(video)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return float(json.loads(done.stdout)["format"]["duration"])


async def test_the_video_keeps_the_frames_timing_and_a_changed_byte_is_named(
    store: Store, db: Database, tmp_path: Path
) -> None:
    require(shutil.which("ffmpeg") is not None, "ffmpeg is not installed (scripts/setup.sh)")
    require(shutil.which("ffprobe") is not None, "ffprobe is not installed (ffmpeg's package)")
    key = tmp_path / "evidence.key"
    evidence_key.create(key)
    run_id = finished_run(store)
    add_frames(store.engine, run_id, TIMES, (321, 199))  # odd sizes: padded to even for VP8
    bundle = await _export(RunExports(db, key, "r1"), run_id, tmp_path / "run.tar")

    manifest = json.loads(member(bundle, layout.MANIFEST))
    assert manifest["recording"]["video"] is True, manifest["recording"]
    assert layout.VIDEO in {f["name"] for f in manifest["files"]}
    video = tmp_path / "recording.webm"
    video.write_bytes(member(bundle, layout.VIDEO))
    assert video.read_bytes()[:4] == b"\x1a\x45\xdf\xa3"  # EBML: Matroska/WebM
    # Each frame stays until the next was captured, the last for a second: 2.0 + 1.0 s.
    assert _duration(video) == pytest.approx(TIMES[-1] + 1.0, abs=0.15)
    report = verify_bundle(bundle)
    assert report.ok and report.video, [str(p) for p in report.problems]

    changed = verify_bundle(rewrite(bundle, tmp_path / "t.tar", {layout.VIDEO: flip()}))
    assert [str(p) for p in changed.problems if p.file == layout.VIDEO], changed.problems
    assert all(p.file == layout.VIDEO for p in changed.problems)


async def test_without_ffmpeg_on_the_path_the_manifest_says_why(
    store: Store, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "evidence.key"
    evidence_key.create(key)
    run_id = finished_run(store)
    add_frames(store.engine, run_id, TIMES, (64, 48))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    bundle = await _export(RunExports(db, key, "r1"), run_id, tmp_path / "run.tar")
    recording = json.loads(member(bundle, layout.MANIFEST))["recording"]
    assert recording["video"] is False
    assert recording["video_note"] == (
        "ffmpeg is not installed on the coordinator's host (not on its PATH)"
    )
    assert verify_bundle(bundle).ok
