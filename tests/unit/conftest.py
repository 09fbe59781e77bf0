"""The unit tier runs in this process: a test here that starts a program or reaches the
PostgreSQL server fails, saying where it belongs (tests/integration/ or tests/e2e/)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

_popen_init = subprocess.Popen.__init__
_connect = socket.socket.connect


class StartedAProcess(AssertionError):
    pass


def _refuse_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
    raise StartedAProcess(
        f"a unit test started {args!r}: it belongs in tests/integration/ (or tests/e2e/ with a"
        " browser or a display)"
    )


def _refuse_postgresql(self: socket.socket, address: Any, *rest: Any) -> Any:
    if isinstance(address, tuple) and len(address) >= 2 and address[1] == 5432:
        raise StartedAProcess("a unit test reached PostgreSQL: it belongs in tests/integration/")
    return _connect(self, address, *rest)


@pytest.fixture(autouse=True)
def in_process_only() -> Iterator[None]:
    """For the test's own code and its fixtures alike (autouse fixtures are set up first)."""
    subprocess.Popen.__init__ = _refuse_popen  # type: ignore[method-assign]
    socket.socket.connect = _refuse_postgresql  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = _popen_init  # type: ignore[method-assign]
        socket.socket.connect = _connect  # type: ignore[method-assign]
