"""The benchmark suite's own machinery on small documents: figures, the validator, the page.

No benchmark runs here; `make bench-quick` runs them (and validates what they wrote)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.project.test_bench import _doc

ROOT = Path(__file__).resolve().parents[3]


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.validate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_validator_command_accepts_a_good_file_and_says_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "quick.json"
    path.write_text(json.dumps(_doc()))
    done = _validate(path)
    assert done.returncode == 0, done.stderr
    assert "well formed: 2 figures, 1 errors (quick mode" in done.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        (json.dumps({**_doc(), "command": ""}), "command: missing"),
    ],
)
def test_the_validator_command_fails_with_one_clear_line(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    done = _validate(path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench validate: ")
    assert expected in lines[0] and "Traceback" not in done.stderr


def test_an_unknown_group_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.suite", "--only", "round_trip,nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--only: no group 'nope'" in done.stderr and "Traceback" not in done.stderr
