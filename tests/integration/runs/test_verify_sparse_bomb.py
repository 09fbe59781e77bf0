"""`deskfleet verify` on a tar bomb an uncompressed tar still allows: a GNU sparse member whose
few KiB of map declare gigabytes of zeros. It is refused as not a regular file, unread (the
other hostile bundles: tests/unit/runs/test_bundle_verify_attacks.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared import evidence_bundle as layout
from tests.unit.runs.test_bundle_verify_attacks import KEY, _manifest


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_a_sparse_member_declaring_gigabytes_is_refused_without_reading_it(
    tmp_path: Path,
) -> None:
    """A tar bomb for an uncompressed tar: a few KiB of sparse map declaring 20 GiB of zeros."""
    src = tmp_path / "src"
    src.mkdir()
    raw = layout.manifest_bytes(_manifest())
    (src / layout.MANIFEST).write_bytes(raw)
    (src / layout.SIGNATURE).write_bytes(KEY.sign(raw))
    with (src / layout.JOURNAL).open("wb") as fh:
        fh.truncate(20 * 1024**3)
    bomb = tmp_path / "bomb.tar"
    subprocess.run(
        ["tar", "--format=gnu", "-cSf", str(bomb), "-C", str(src),
         layout.MANIFEST, layout.SIGNATURE, layout.JOURNAL],
        check=True,
    )  # fmt: skip
    (src / layout.JOURNAL).unlink()
    assert bomb.stat().st_size < 1024 * 1024
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.admin_cli.main", "verify", str(bomb)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - started < 30, "verify read the sparse member's zeros"
    assert done.returncode == 6 and "Traceback" not in done.stderr, done.stderr
    assert f"problem: {layout.JOURNAL}: is not a regular file" in done.stderr, done.stderr
