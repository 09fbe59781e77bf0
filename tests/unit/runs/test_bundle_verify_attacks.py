"""`deskfleet verify` on bundles made to break it: whatever is in the file, the answer is a
report of problems (or one line), never a traceback, a hang or everything read into memory.

Each bundle here is signed by a key of the test's own, so that the verifier goes past the
signature into the members (an attacker signs with their own key as easily).
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coordinator.admin_cli.evidence_commands import EXIT_NOT_VERIFIED
from coordinator.admin_cli.main import main
from shared import evidence_bundle as layout, evidence_keys
from shared.bundle_verify import Report, verify_bundle

KEY = Ed25519PrivateKey.generate()
PEM = (
    KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def _manifest(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": layout.FORMAT,
        "run_id": "run_1",
        "files": [],
        "journal": {"events": 0, "head": "0" * 64},
        "key": {"fingerprint": evidence_keys.fingerprint(KEY.public_key()), "public_key_pem": PEM},
        "recording": {},
    }
    doc.update(fields)
    return doc


def _bundle(path: Path, members: dict[str, bytes], manifest: bytes | None = None) -> Path:
    raw = manifest if manifest is not None else layout.manifest_bytes(_manifest())
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in {
            layout.MANIFEST: raw,
            layout.SIGNATURE: KEY.sign(raw),
            **members,
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _event(**fields: Any) -> bytes:
    doc = {"seq": 1, "kind": "k", "at": 1.0, "data": "{}", "prev_hash": "0" * 64, "hash": "0"}
    doc.update(fields)
    return layout.json_line(doc)


def _problems(report: Report) -> list[str]:
    assert not report.ok
    return [str(p) for p in report.problems]


DEEP = b"[" * 200_000 + b"\n"


def test_a_manifest_nested_past_the_recursion_limit_is_not_json(tmp_path: Path) -> None:
    report = verify_bundle(_bundle(tmp_path / "b.tar", {}, manifest=DEEP))
    assert "manifest.json: not JSON: it was altered or is not a manifest" in _problems(report)


@pytest.mark.parametrize("member", [layout.JOURNAL, layout.RECEIPTS, layout.FRAMES_INDEX])
def test_a_line_nested_past_the_recursion_limit_is_an_altered_line(
    tmp_path: Path, member: str
) -> None:
    report = verify_bundle(_bundle(tmp_path / "b.tar", {member: DEEP}))
    assert any(p.startswith(f"{member}: line 1: ") for p in _problems(report)), report


@pytest.mark.parametrize(
    ("manifest", "line"),
    [
        (_manifest(), _event(kind="k\ud800")),
        (_manifest(), _event(data="\udfff")),
        (_manifest(), _event(prev_hash="\ud800")),
        (_manifest(run_id="run\ud800"), _event()),
    ],
    ids=["kind", "data", "prev_hash", "run_id"],
)
def test_a_lone_surrogate_in_an_event_is_an_event_that_does_not_match_its_hash(
    tmp_path: Path, manifest: dict[str, Any], line: bytes
) -> None:
    bundle = _bundle(
        tmp_path / "b.tar", {layout.JOURNAL: line}, manifest=layout.manifest_bytes(manifest)
    )
    problems = _problems(verify_bundle(bundle))
    assert any("does not match its hash" in p for p in problems), problems


def test_a_bundle_cut_short_is_one_problem_saying_so(tmp_path: Path) -> None:
    whole = _bundle(tmp_path / "whole.tar", {layout.JOURNAL: _event() * 2000})
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole.read_bytes()[:6000])
    problems = _problems(verify_bundle(cut))
    assert problems[-1].startswith("the tar is damaged or cut short"), problems


def test_members_that_are_links_or_outside_the_bundle_are_named_and_never_followed(
    tmp_path: Path,
) -> None:
    path = _bundle(tmp_path / "b.tar", {"../../escape": b"x", "/etc/absolute": b"y"})
    with tarfile.open(path, "a") as tar:
        for name, kind, target in (
            (layout.JOURNAL, tarfile.SYMTYPE, "/etc/passwd"),
            (layout.RECEIPTS, tarfile.LNKTYPE, layout.MANIFEST),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    before = set(os.listdir(tmp_path))
    problems = _problems(verify_bundle(path))
    assert set(os.listdir(tmp_path)) == before, "verify wrote something"
    for name in ("../../escape", "/etc/absolute"):
        assert f"{name}: is not named in the manifest (a file was added)" in problems
    for name in (layout.JOURNAL, layout.RECEIPTS):
        assert any(p.startswith(f"{name}: is not a regular file") for p in problems), problems


def test_a_manifest_that_lies_about_a_size_is_named(tmp_path: Path) -> None:
    data = _event()
    listed = [{"name": layout.JOURNAL, "sha256": hashlib.sha256(data).hexdigest(), "size": 10**30}]
    raw = layout.manifest_bytes(_manifest(files=listed))
    problems = _problems(verify_bundle(_bundle(tmp_path / "b.tar", {layout.JOURNAL: data}, raw)))
    assert f"{layout.JOURNAL}: is {len(data)} bytes; the manifest says {10**30}" in problems


def test_a_forged_signature_is_named(tmp_path: Path) -> None:
    path = _bundle(tmp_path / "b.tar", {})
    forged = tmp_path / "forged.tar"
    with tarfile.open(path) as old, tarfile.open(forged, "w") as new:
        for member in old.getmembers():
            fh = old.extractfile(member)
            data = fh.read() if fh is not None else b""
            if member.name == layout.SIGNATURE:
                data = Ed25519PrivateKey.generate().sign(data)
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    problems = _problems(verify_bundle(forged))
    assert any(p.startswith("manifest.sig: does not verify") for p in problems), problems


def test_the_command_answers_a_hostile_bundle_in_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, members, manifest in (
        ("deep", {}, DEEP),
        ("surrogate", {layout.JOURNAL: _event(data="\ud800")}, None),
        ("cut", None, None),
    ):
        if members is None:
            path = tmp_path / "cut.tar"
            whole = _bundle(tmp_path / "whole.tar", {layout.JOURNAL: _event() * 2000})
            path.write_bytes(whole.read_bytes()[:6000])
        else:
            path = _bundle(tmp_path / f"{name}.tar", members, manifest)
        code = main(["verify", str(path)])
        err = capsys.readouterr().err
        assert code == EXIT_NOT_VERIFIED, (name, err)
        assert err.rstrip().endswith("problem(s): not verified"), (name, err)
