"""Research apps on the worker, run for real (small Python scripts): what they see and how long
they may run, without a coordinator."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.errors import InvalidArgumentError
from tests.unit.research.test_research_app import _state
from worker_agent.actions import ActionContext, ActionRefused
from worker_agent.research_app import ResearchApps, app_user, parse_apps, parse_env

# Prints what it can see: its environment, its working directory, and whether it could read
# the worker's credential (the path is given on the command line).
PRINT_ENV_APP = """
import json, os, sys
try:
    with open(sys.argv[1]) as fh:
        credential = "read: " + fh.read().strip()
except OSError as exc:
    credential = type(exc).__name__
print(json.dumps({
    "answer": json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "credential": credential}),
    "sources": [{"url": "https://example.org/a", "title": "a", "excerpts": ["x"]}],
}))
"""


SLEEP_APP = "import time; time.sleep(30)\n"


PROVIDER_KEYS = {
    "OPENAI_API_KEY": "sk-provider-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "DESKFLEET_TOKEN_FILE": "/root/.deskfleet/token",
    "DESKFLEET_CHROMIUM": "/usr/bin/chromium",
}


@pytest.fixture
def scripts() -> Iterator[Path]:
    """A directory any user can read (pytest's own tmp_path is the worker user's only)."""
    path = Path(tempfile.mkdtemp(prefix="deskfleet-test-apps-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _script(scripts: Path, text: str) -> Path:
    script = scripts / f"app{len(list(scripts.iterdir()))}.py"
    script.write_text(text)
    script.chmod(0o644)
    return script


def _seen(result: dict[str, Any]) -> dict[str, Any]:
    assert result["outcome"] == "ok", result
    seen: dict[str, Any] = json.loads(result["answer"])
    return seen


def test_an_app_sees_only_an_explicit_environment_and_its_own_home(
    tmp_path: Path, scripts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**PROVIDER_KEYS, "APP_SETTING": "kept"}.items():
        monkeypatch.setenv(name, value)
    state = _state(tmp_path)
    script = _script(scripts, PRINT_ENV_APP)
    apps = ResearchApps(
        parse_apps([f"env=/usr/bin/python3 {script} {state.file('credential')}"]),
        workdir=state.file("apps"),
        env=parse_env(["APP_SETTING"]),
    )
    seen = _seen(apps.research({"app": "env", "query": "q"}, ActionContext("act_1", 1)))
    env = seen["env"]
    home = state.file("apps") / "env" / "home"
    assert set(env) <= {"PATH", "LANG", "HOME", "TMPDIR", "APP_SETTING", "LC_CTYPE"}, env
    assert env["HOME"] == str(home) and seen["cwd"] == str(home)
    assert env["TMPDIR"] == str(state.file("apps") / "env" / "tmp")
    assert env["APP_SETTING"] == "kept"
    assert not [k for k in env if k.startswith("DESKFLEET_")]
    assert not set(PROVIDER_KEYS.values()) & set(env.values())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    # Same user: the app can read the state directory. That is the documented limit, and the
    # reason for --research-app-user.
    assert seen["credential"] == "read: dfw_the-workers-own-credential"


@pytest.mark.skipif(os.geteuid() != 0, reason="starting an app as another user needs root")
def test_an_app_run_as_another_user_cannot_read_the_state_directory(
    tmp_path: Path, scripts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PROVIDER_KEYS.items():
        monkeypatch.setenv(name, value)
    state = _state(tmp_path)
    script = _script(scripts, PRINT_ENV_APP)
    apps = ResearchApps(
        parse_apps([f"env=/usr/bin/python3 {script} {state.file('credential')}"]),
        workdir=state.file("apps"),
        user=app_user("nobody"),
    )
    seen = _seen(apps.research({"app": "env", "query": "q"}, ActionContext("act_1", 1)))
    assert seen["credential"] == "PermissionError"
    home = Path(seen["env"]["HOME"])
    assert seen["cwd"] == str(home) and not home.is_relative_to(state.path)
    assert not home.exists()  # a fresh home for each run, removed after it
    assert not [k for k in seen["env"] if k.startswith("DESKFLEET_") or k.endswith("_API_KEY")]
    with pytest.raises(InvalidArgumentError, match="must not be root"):
        app_user("root")
    with pytest.raises(InvalidArgumentError, match="no such user"):
        app_user("no-such-user-here")


def test_the_owners_timeout_is_capped_by_the_workers_setting(tmp_path: Path, scripts: Path) -> None:
    script = _script(scripts, SLEEP_APP)
    apps = ResearchApps(
        parse_apps([f"slow={sys.executable} {script}"]),
        workdir=tmp_path / "apps",
        max_timeout=0.5,
    )
    started = time.monotonic()
    result = apps.research({"app": "slow", "query": "q", "timeout": 3600}, ActionContext("a", 1))
    assert time.monotonic() - started < 5
    assert (result["code"], result["timeout_capped"]) == ("timeout", 0.5)
    assert "did not answer within 0.5 s" in result["message"]
    for bad in ("30", float("inf"), float("nan"), -1, 0, True, [30]):
        with pytest.raises(ActionRefused, match="'timeout' must be a number > 0") as info:
            apps.research({"app": "slow", "query": "q", "timeout": bad}, ActionContext("a", 1))
        assert info.value.code == "invalid_argument"
    with pytest.raises(ActionRefused, match="'max_sources' must be an integer > 0"):
        apps.research({"app": "slow", "query": "q", "max_sources": 2.5}, ActionContext("a", 1))
    with pytest.raises(InvalidArgumentError, match="--research-app-timeout"):
        ResearchApps({}, max_timeout=float("inf"))
