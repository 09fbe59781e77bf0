"""Research apps on the worker, run for real (small Python scripts): what they see and how long
they may run, without a coordinator."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from shared.errors import InvalidArgumentError
from worker_agent.research_app import parse_env
from worker_agent.state import StateDir


def _state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    state.write("credential", "dfw_the-workers-own-credential\n", 0o600)
    return state


def test_passed_variables_must_be_names_the_worker_has() -> None:
    assert parse_env(["A"], {"A": "1", "B": "2"}) == {"A": "1"}
    with pytest.raises(InvalidArgumentError, match="not set in this worker's environment"):
        parse_env(["MISSING"], {})
    with pytest.raises(InvalidArgumentError, match="an environment variable name"):
        parse_env(["A=1"], {"A=1": "x"})


def test_the_worker_makes_its_secret_files_readable_by_itself_only(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.write("client.key", "KEY", 0o600)
    state.file("credential").chmod(0o644)
    fixed = state.tighten_secrets()
    assert fixed == [f"{state.file('credential')} (was 644)"]
    for name in ("credential", "client.key"):
        assert stat.S_IMODE(state.file(name).stat().st_mode) == 0o600
    assert state.tighten_secrets() == []
