"""The checked-in stubs are exactly what the build generates from protos/."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_checked_in_stubs_match_the_protos(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(out)],
        check=True,
        capture_output=True,
    )
    checked_in = ROOT / "shared" / "gen"
    generated = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    present = sorted(
        p.relative_to(checked_in)
        for p in checked_in.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert generated == present, "stub files differ: run `make proto`"
    stale = [str(p) for p in generated if not filecmp.cmp(out / p, checked_in / p, shallow=False)]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit the result"
