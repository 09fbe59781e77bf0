"""A worker's own kill switch, as a contract (30.19): what both sides hold to, and what the
KILL file says (since when, by what). Shown to admins:
tests/integration/desktop/test_local_kill.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import fleet_pb2
from shared.local_kill import MAX_REASON, LocalKill, clean_reason
from worker_agent.input_guard import InputGuard


def test_the_contract_both_sides_hold_to() -> None:
    """Pure rules: what the worker sends, and what the coordinator accepts."""
    assert clean_reason("  first line\nsecond\x1b[2J") == "first line"
    assert clean_reason("tab\there") == "tab\\there"
    assert len(clean_reason("y" * 1000)) == MAX_REASON
    state = LocalKill(True, 1_800_000_000.5, "hotkey", "pressed")
    assert LocalKill.from_proto(state.to_proto()) == state
    assert LocalKill.from_proto(fleet_pb2.LocalKill(engaged=False, means="x", reason="y")) == (
        LocalKill()
    )
    with pytest.raises(InvalidArgumentError, match=r"local_kill\.means: one of command"):
        LocalKill.from_proto(LocalKill(True, 1_800_000_000, "voodoo", "").to_proto())


def test_the_kill_file_says_since_when_and_by_what(tmp_path: Path) -> None:
    guard = InputGuard(tmp_path)
    assert guard.local_state() == LocalKill()
    engaged = guard.engage_local("at the desk", "hotkey")
    assert guard.local_state() == engaged and engaged.means == "hotkey"
    assert json.loads((tmp_path / "KILL").read_text())["means"] == "hotkey"
    assert guard.engage_local("again", "signal") == engaged  # the first engagement stands
    assert guard.blocked("run_x") is not None
    guard.release_local()
    # The line an older worker wrote: its time and reason are kept, the means is `file`.
    (tmp_path / "KILL").write_text("2026-01-02T03:04:05Z engaged by SIGUSR1\n")
    old = guard.local_state()
    assert (old.means, old.reason, old.since) == ("file", "engaged by SIGUSR1", 1767323045.0)
