"""Screens the CLI saves (`approvals peek --out`, `desktop act --out`, `runs show
--artifacts-dir`) are the user's alone (30.16); the commands themselves are run against real
desktops in tests/e2e/desktop/test_desktop.py and tests/e2e/console/test_console.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.admin_cli.out_files import write_private
from shared.errors import DeskfleetError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave a new file readable and writable by everyone."""
    old = os.umask(0)
    yield
    os.umask(old)


@pytest.mark.usefixtures("open_umask")
def test_a_new_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    write_private(out, b"\x89PNG screen")
    assert out.read_bytes() == b"\x89PNG screen" and _mode(out) == 0o600


def test_a_file_already_there_is_narrowed_before_it_is_written(tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    out.write_bytes(b"an older, longer screen")
    out.chmod(0o644)
    write_private(out, b"new")
    assert out.read_bytes() == b"new" and _mode(out) == 0o600


def test_a_device_is_written_as_it_is() -> None:
    before = _mode(Path("/dev/null"))
    write_private(Path("/dev/null"), b"screen")
    assert _mode(Path("/dev/null")) == before


def test_a_failure_is_one_line_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(DeskfleetError) as refused:
        write_private(tmp_path / "missing-dir" / "shot.png", b"x", "--artifacts-dir")
    assert refused.value.message.startswith(f"--artifacts-dir {tmp_path}/missing-dir/shot.png: ")
    assert "\n" not in refused.value.message
