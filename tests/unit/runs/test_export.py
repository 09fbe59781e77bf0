"""Evidence export and offline verification in process: a run's bundle is built from a SQLite
store (journal, receipts, an artifact, recorded JPEG frames), and every kind of alteration of
it is caught by `verify_bundle` and named by file (and event, receipt or frame). The video is
made by ffmpeg, a program: tests/integration/runs/test_export_video.py."""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.runs.export import RunExports
from coordinator.security import evidence_key
from coordinator.store import Database
from coordinator.store.models import AuditRow, JournalRow, ReceiptRow
from shared import evidence_bundle as layout, evidence_keys
from shared.bundle_verify import Report, pinned_fingerprint, verify_bundle
from shared.errors import DataIntegrityError, FailedPreconditionError, NotFoundError
from tests.harness.evidence import (
    OWNER_ID,
    add_artifact,
    add_frames,
    finished_run,
    flip,
    member,
    members,
    png,
    rewrite,
)
from tests.harness.ledger import Store

OLIVE = Principal(OWNER_ID, "olive", Role.OWNER)
ADMIN = Principal("usr_admin", "ada", Role.ADMIN)
MALLORY = Principal("usr_mallory", "mallory", Role.OWNER)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
async def db(store: Store, tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield database
    await database.close()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "evidence.key"
    evidence_key.create(path)
    return path


@pytest.fixture
def exports(db: Database, key_file: Path) -> RunExports:
    return RunExports(db, key_file, "r1", ffmpeg=lambda: None)


@pytest.fixture
def run_id(store: Store) -> str:
    run = finished_run(store)
    add_artifact(store.engine, run, png(8, 8))
    add_frames(store.engine, run, [0.0, 0.4, 1.0, 1.1], (64, 48))
    return run


async def export(exports: RunExports, who: Principal, run: str, out: Path) -> Path:
    async with exports.bundle(who, run) as bundle:
        assert await asyncio.to_thread(_copy, bundle.path, out) == bundle.size
    return out


def _copy(src: Path, dst: Path) -> int:
    shutil.copyfile(src, dst)
    return dst.stat().st_size


@pytest.fixture
async def bundle(exports: RunExports, run_id: str, tmp_path: Path) -> Path:
    return await export(exports, OLIVE, run_id, tmp_path / "run.tar")


def named(report: Report, file: str, where: str = "") -> list[str]:
    found = [str(p) for p in report.problems if p.file == file and where in p.where]
    assert found, f"no problem named {file} {where}: {[str(p) for p in report.problems]}"
    return found


async def test_a_bundle_holds_the_whole_run_and_verifies(
    bundle: Path, run_id: str, key_file: Path, store: Store
) -> None:
    names = members(bundle)
    assert names[:2] == [layout.MANIFEST, layout.SIGNATURE]
    assert {layout.JOURNAL, layout.RECEIPTS, layout.FRAMES_INDEX} <= set(names)
    assert [n for n in names if n.startswith(layout.FRAMES)] == [
        layout.frame_name(i) for i in (1, 2, 3, 4)
    ]
    assert len([n for n in names if n.startswith(layout.ARTIFACTS)]) == 1
    manifest = json.loads(member(bundle, layout.MANIFEST))
    key = evidence_key.load(key_file)
    assert manifest["key"] == {"fingerprint": key.fingerprint, "public_key_pem": key.public_pem}
    assert manifest["run_id"] == run_id and manifest["owner"] == {"id": OWNER_ID, "name": "olive"}
    assert manifest["replica"] == "r1"
    assert manifest["recording"]["frames"] == 4 and manifest["recording"]["video"] is False
    assert "ffmpeg is not installed" in manifest["recording"]["video_note"]
    assert {f["name"] for f in manifest["files"]} == set(names) - {
        layout.MANIFEST,
        layout.SIGNATURE,
    }
    # The journal is the stored text: NUL and é travel escaped and hash as written.
    run = store.run_row(run_id)
    events = [json.loads(line) for line in member(bundle, layout.JOURNAL).splitlines()]
    assert len(events) == run.last_seq == manifest["journal"]["events"]
    assert events[-1]["hash"] == run.last_hash == manifest["journal"]["head"]
    rows = store.read(lambda s: s.scalars(select(JournalRow).order_by(JournalRow.seq)).all())
    assert [e["data"] for e in events] == [r.data for r in rows]
    frames = [json.loads(line) for line in member(bundle, layout.FRAMES_INDEX).splitlines()]
    assert [f["held_by"] for f in frames] == ["agent", "agent", "person", "person"]
    assert all(f["width"] == 64 and f["height"] == 48 for f in frames)

    report = verify_bundle(bundle)
    assert report.ok, [str(p) for p in report.problems]
    assert (report.events, report.receipts, report.artifacts, report.frames) == (
        run.last_seq,
        2,
        1,
        4,
    )
    assert report.signed_by == key.fingerprint and report.pinned == ""
    # Pinned by fingerprint, or by the public key's PEM in a file.
    assert verify_bundle(bundle, pinned_fingerprint(key.fingerprint)).ok
    pem = key_file.parent / "coordinator.pub"
    pem.write_text(key.public_pem)
    assert verify_bundle(bundle, pinned_fingerprint(str(pem))).ok


async def test_the_export_is_audited(bundle: Path, run_id: str, store: Store) -> None:
    [entry] = store.read(lambda s: s.scalars(select(AuditRow)).all())
    assert (entry.action, entry.target, entry.actor_id) == ("run.export", run_id, OWNER_ID)
    detail = json.loads(entry.detail)
    assert detail["sha256"] and detail["frames"] == 4 and detail["video"] is False


def _event_data_changed(line_no: int) -> Callable[[bytes], bytes]:
    def change(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        doc = json.loads(lines[line_no - 1])
        doc["data"] = doc["data"].replace("{", "[", 1)
        lines[line_no - 1] = layout.json_line(doc)
        return b"".join(lines)

    return change


def _receipt_body_changed(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    doc = json.loads(lines[0])
    doc["body"] = doc["body"].replace("succeeded", "failed")
    lines[0] = layout.json_line(doc)
    return b"".join(lines)


async def test_an_event_changed_in_the_journal_is_named_by_its_seq(
    bundle: Path, tmp_path: Path
) -> None:
    report = verify_bundle(
        rewrite(bundle, tmp_path / "t.tar", {layout.JOURNAL: _event_data_changed(2)})
    )
    assert not report.ok
    [problem] = named(report, layout.JOURNAL, "event 2")
    assert "does not match its hash" in problem
    named(report, layout.JOURNAL)  # and its sha256 is not the manifest's
    assert any("differs from the manifest" in str(p) for p in report.problems)


async def test_an_event_removed_from_the_journal_is_named(bundle: Path, tmp_path: Path) -> None:
    def drop_third(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        return b"".join(lines[:2] + lines[3:])

    report = verify_bundle(rewrite(bundle, tmp_path / "t.tar", {layout.JOURNAL: drop_third}))
    found = named(report, layout.JOURNAL, "event 4")
    assert any("should" in p for p in found) and any("prev_hash" in p for p in found)


async def test_a_receipt_changed_is_named_by_its_id(bundle: Path, tmp_path: Path) -> None:
    first = json.loads(member(bundle, layout.RECEIPTS).splitlines()[0])
    report = verify_bundle(
        rewrite(bundle, tmp_path / "t.tar", {layout.RECEIPTS: _receipt_body_changed})
    )
    [problem] = named(report, layout.RECEIPTS, f"receipt {first['id']}")
    assert "content hash" in problem


async def test_an_artifact_changed_is_named(bundle: Path, tmp_path: Path) -> None:
    [name] = [n for n in members(bundle) if n.startswith(layout.ARTIFACTS)]
    report = verify_bundle(rewrite(bundle, tmp_path / "t.tar", {name: flip()}))
    found = named(report, name)
    assert any("not the sha256 it is named by" in p for p in found)


async def test_a_frame_changed_is_named_by_its_seq(bundle: Path, tmp_path: Path) -> None:
    name = layout.frame_name(3)
    report = verify_bundle(rewrite(bundle, tmp_path / "t.tar", {name: flip()}))
    [problem] = named(report, name, "frame 3")
    assert "not the frame" in problem


async def test_a_changed_manifest_fails_its_signature(bundle: Path, tmp_path: Path) -> None:
    report = verify_bundle(
        rewrite(
            bundle,
            tmp_path / "t.tar",
            {layout.MANIFEST: lambda d: d.replace(b'"replica": "r1"', b'"replica": "r2"')},
        )
    )
    [problem] = named(report, layout.SIGNATURE)
    assert "does not verify over manifest.json" in problem
    assert report.signed_by == ""


async def test_a_changed_signature_is_named(bundle: Path, tmp_path: Path) -> None:
    report = verify_bundle(rewrite(bundle, tmp_path / "t.tar", {layout.SIGNATURE: flip(10)}))
    [problem] = named(report, layout.SIGNATURE)
    assert "does not verify" in problem


async def test_a_removed_file_and_an_extra_file_are_named(bundle: Path, tmp_path: Path) -> None:
    report = verify_bundle(
        rewrite(
            bundle,
            tmp_path / "t.tar",
            {layout.RECEIPTS: None, layout.frame_name(1): None},
            extra={"notes.txt": b"trust me", "../escape": b"x"},
        )
    )
    assert "missing" in named(report, layout.RECEIPTS)[0]
    assert any("missing" in p for p in named(report, layout.frame_name(1)))
    assert "not named in the manifest" in named(report, "notes.txt")[0]
    assert "not named in the manifest" in named(report, "../escape")[0]
    assert not (tmp_path.parent / "escape").exists()  # read in place, never extracted


async def test_a_wrong_pinned_key_is_named(bundle: Path, key_file: Path) -> None:
    other = evidence_keys.fingerprint(Ed25519PrivateKey.generate().public_key())
    report = verify_bundle(bundle, other)
    [problem] = named(report, layout.SIGNATURE)
    assert f"not by the pinned key {other}" in problem


async def test_a_bundle_resigned_by_another_key_passes_only_unpinned(
    bundle: Path, key_file: Path, tmp_path: Path
) -> None:
    """Whoever alters a bundle can sign it again with a key of theirs: intact, but not the
    coordinator's, which only pinning tells."""
    forger = Ed25519PrivateKey.generate()

    manifest = json.loads(member(bundle, layout.MANIFEST))
    manifest["replica"] = "forged"
    manifest["key"] = {
        "fingerprint": evidence_keys.fingerprint(forger.public_key()),
        "public_key_pem": evidence_keys.public_pem(forger.public_key()),
    }
    raw = layout.manifest_bytes(manifest)
    forged = rewrite(
        bundle,
        tmp_path / "t.tar",
        {layout.MANIFEST: lambda _: raw, layout.SIGNATURE: lambda _: forger.sign(raw)},
    )
    unpinned = verify_bundle(forged)
    assert unpinned.ok and unpinned.signed_by == manifest["key"]["fingerprint"]
    coordinator = evidence_key.load(key_file).fingerprint
    assert not verify_bundle(forged, coordinator).ok


async def test_any_byte_flipped_in_any_file_is_named(bundle: Path, tmp_path: Path) -> None:
    for i, name in enumerate(members(bundle)):
        report = verify_bundle(rewrite(bundle, tmp_path / f"{i}.tar", {name: flip()}))
        assert not report.ok, name
        if name != layout.MANIFEST:  # a manifest changed is its signature's failure
            named(report, name)


async def test_not_a_tar_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    path.write_bytes(b"\x00not a tar" * 100)
    report = verify_bundle(path)
    assert [str(p) for p in report.problems] == [
        "not an uncompressed tar archive (a bundle as exported)"
    ]
    with pytest.raises(NotFoundError):
        verify_bundle(tmp_path / "absent.tar")


async def test_admins_export_any_run_and_other_owners_none(
    exports: RunExports, run_id: str, tmp_path: Path
) -> None:
    out = await export(exports, ADMIN, run_id, tmp_path / "a.tar")
    manifest = json.loads(member(out, layout.MANIFEST))
    assert manifest["exported_by"] == {"id": ADMIN.id, "name": "ada", "role": "admin"}
    assert verify_bundle(out).ok
    with pytest.raises(NotFoundError, match="no run"):
        await export(exports, MALLORY, run_id, tmp_path / "m.tar")


async def test_a_broken_chain_or_receipt_in_the_store_is_refused(
    exports: RunExports,
    run_id: str,
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with Session(store.engine) as s, s.begin():
        s.execute(
            update(JournalRow)
            .where(JournalRow.run_id == run_id, JournalRow.seq == 2)
            .values(data='{"edited":true}')
        )
    with pytest.raises(DataIntegrityError, match=r"event 2 .*refusing to sign it"):
        await export(exports, OLIVE, run_id, tmp_path / "x.tar")

    run = finished_run(store)
    with Session(store.engine) as s, s.begin():
        s.execute(update(ReceiptRow).where(ReceiptRow.run_id == run).values(body="{}"))
    with pytest.raises(DataIntegrityError, match=r"receipt .* content hash"):
        await export(exports, OLIVE, run, tmp_path / "y.tar")
    assert not list(scratch.iterdir())  # nothing of a refused export is left behind


async def test_without_an_evidence_key_the_export_says_how_to_make_one(
    db: Database, run_id: str, tmp_path: Path
) -> None:
    with pytest.raises(FailedPreconditionError, match="--evidence-key-file"):
        await export(RunExports(db, None, "r1"), OLIVE, run_id, tmp_path / "x.tar")
    with pytest.raises(FailedPreconditionError, match="deskfleet-coordinator init"):
        await export(RunExports(db, tmp_path / "none.key", "r1"), OLIVE, run_id, tmp_path / "x")


async def test_frames_only_says_so(
    db: Database, key_file: Path, run_id: str, tmp_path: Path
) -> None:
    exports = RunExports(db, key_file, "r1", ffmpeg=lambda: "/nonexistent/ffmpeg")
    async with exports.bundle(OLIVE, run_id, frames_only=True) as made:
        assert not made.video and made.video_note == "frames only, as the export asked"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_the_verifier_imports_nothing_of_the_coordinator() -> None:
    """`deskfleet verify` runs where no coordinator is installed: the verifier and every
    module of ours it imports, however deep, are in shared/."""
    todo, seen = ["shared.bundle_verify"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            continue  # a name imported from a module, or shared's package itself
        for imported in _imports(path):
            assert not imported.startswith(("coordinator", "worker_agent")), (name, imported)
            if imported.startswith("shared"):
                todo.append(imported)
    assert "shared.journal_chain" in seen and "shared.receipts" in seen
