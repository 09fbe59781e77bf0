"""The bounds on the coordinator's connections (coordinator/app/descriptors.py): what serve
refuses, and the cap it derives from the limit of open files."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from coordinator.app import cli, descriptors


def test_the_cap_leaves_the_reserve_and_the_consoles_connections() -> None:
    assert descriptors.connection_cap(20_000) == 20_000 - descriptors.RESERVED
    assert descriptors.connection_cap(20_000, 512) == 20_000 - descriptors.RESERVED - 512
    # A limit too low for the reserve still takes some connections: an admin must get in.
    assert descriptors.connection_cap(100) == descriptors.MIN_CAP


@pytest.fixture
def _process_state() -> Iterator[None]:
    """`main` sets the umask and configures logging, as a program does: put both back."""
    mask = os.umask(0o022)
    os.umask(mask)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    os.umask(mask)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("_process_state")
@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--max-connections", "-1", "--max-connections: 0 (the default cap) or more"),
        ("--handshake-timeout", "0", "--handshake-timeout must be positive"),
        ("--handshake-timeout", "nan", "--handshake-timeout must be positive"),
    ],
)
def test_serve_refuses_bad_connection_bounds_in_a_line(
    flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", "--db", "sqlite:///unused.db", flag, value]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"deskfleet-coordinator: {said}"]
