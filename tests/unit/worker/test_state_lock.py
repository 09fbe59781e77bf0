"""The worker's state directory lock, in process: released with its holder, naming it. Two
real `deskfleet-worker run` processes: tests/integration/worker/test_state_lock.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.errors import FailedPreconditionError
from worker_agent.state import RUN_LOCK, StateLock


def test_the_lock_is_released_with_its_holder_and_names_it(tmp_path: Path) -> None:
    held = StateLock(tmp_path).acquire()
    try:
        with pytest.raises(FailedPreconditionError, match=f"in use by process {os.getpid()}"):
            StateLock(tmp_path).acquire()
        assert (tmp_path / RUN_LOCK).stat().st_mode & 0o777 == 0o600
    finally:
        held.release()
        held.release()  # twice is harmless
    StateLock(tmp_path).acquire().release()
